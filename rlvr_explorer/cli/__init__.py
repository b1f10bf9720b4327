"""The `rlvr-explorer` command line: service commands (`main`), what-if commands
(`whatif`, imported when one runs: main.LAZY_COMMANDS) and team administration
(`teams`: keys, quota), registered on one Typer app."""

from rlvr_explorer.cli import teams  # noqa: F401  (it registers its commands)
from rlvr_explorer.cli.main import app

__all__ = ["app"]
