"""`python -m rlvr_explorer ...` is the `rlvr-explorer` command."""

from rlvr_explorer.cli import app

app()
