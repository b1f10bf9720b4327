"""The `rlvr-explorer` command line: service commands (`main`), what-if commands
(`whatif`, imported when one runs: main.LAZY_COMMANDS) and team administration
(`teams`: keys, quota) and `rename`, registered on one Typer app."""

from rlvr_explorer.cli import rename, teams  # noqa: F401  (they register their commands)
from rlvr_explorer.cli.main import app

__all__ = ["app"]
