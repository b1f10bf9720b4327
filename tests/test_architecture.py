"""The layering is part of the code: `lint-imports` checks the contracts declared in
pyproject.toml ([tool.importlinter]): core <- backend <- workers <- rlvr_explorer one way,
the dashboard a REST client mounted only by the single-machine server, core free of I/O
frameworks, and no cycle between the subpackages of any package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_a_cross_layer_import_breaks_a_contract():
    """The check bites: a core module importing the backend is reported."""
    bad = ROOT / "core" / "_contract_probe.py"
    bad.write_text("import backend.settings  # noqa: F401\n")
    try:
        lint = Path(sys.executable).with_name("lint-imports")
        r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        bad.unlink()
    assert r.returncode != 0 and "core._contract_probe -> backend.settings" in r.stdout
