"""The `rlvr-explorer` command line: service commands (`main`), what-if commands
(`whatif`) and team administration (`teams`: keys, quota), registered on one Typer app."""

from rlvr_explorer.cli import teams, whatif  # noqa: F401  (they register their commands)
from rlvr_explorer.cli.main import app

__all__ = ["app"]
