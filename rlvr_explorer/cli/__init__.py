"""The `rlvr-explorer` command line: service commands (`main`) and what-if commands
(`whatif`), both registered on one Typer app."""

from rlvr_explorer.cli import whatif  # noqa: F401  (registers the what-if commands)
from rlvr_explorer.cli.main import app

__all__ = ["app"]
