"""The what-if commands load their module (and the simulator) only when one of them runs
or the help lists them (rlvr_explorer/cli/main.py LAZY_COMMANDS): an `ingest` starts
without them, and every command whatif registers is declared lazy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


def _loads_simulator(*argv: str) -> bool:
    code = (
        "import sys; from rlvr_explorer.cli import app\n"
        f"try:\n    app({list(argv)!r})\nexcept SystemExit:\n    pass\n"
        "print('core.simulator' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def test_ingest_starts_without_the_simulator_and_simulate_loads_it():
    assert not _loads_simulator("ingest", "--help")
    assert _loads_simulator("policies", "--json")


def test_every_whatif_command_is_declared_lazy_and_listed():
    from rlvr_explorer.cli import app
    from rlvr_explorer.cli.main import LAZY_COMMANDS

    help_text = CliRunner().invoke(app, ["--help"]).output
    import rlvr_explorer.cli.whatif as whatif
    from rlvr_explorer.cli.main import app as main_app

    registered = {
        (info.name or info.callback.__name__).replace("_", "-")
        for info in main_app.registered_commands
        if info.callback is not None and info.callback.__module__ == whatif.__name__
    }
    assert registered == {n for n, m in LAZY_COMMANDS.items() if m == whatif.__name__}
    assert all(name in help_text for name in registered)
