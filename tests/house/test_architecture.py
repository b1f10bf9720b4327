"""The layering is part of the code: `lint-imports` checks the contracts declared in
pyproject.toml ([tool.importlinter]): core <- backend <- workers <- rlvr_explorer one way,
the dashboard a REST client mounted only by the single-machine server, core free of I/O
frameworks, and no cycle between the subpackages of any package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_a_cross_layer_import_breaks_a_contract(tmp_path):
    """The check bites: a core module importing the backend is reported (in a copy of
    the packages: the test reads the source tree, never writes into it)."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "core" / "_contract_probe.py").write_text("import backend.settings  # noqa: F401\n")
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode != 0 and "core._contract_probe -> backend.settings" in r.stdout, r.stdout[-2000:]


PACKAGES = ("core", "backend", "workers", "dashboard", "rlvr_explorer", "engine")


def private_imports(source: str, module: str) -> list[str]:
    """`from <project module> import _name` in `source` (of `module`): another module's
    private name (a name used across modules is public)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module.split(".")[0] not in PACKAGES or node.module == module:
            continue
        found += [
            f"{module}:{node.lineno} imports {node.module}.{a.name}"
            for a in node.names
            if a.name.startswith("_") and not a.name.startswith("__")
        ]
    return found


def test_no_module_imports_another_modules_private_names():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found += private_imports(path.read_text(), module)
    assert not found, "\n".join(found)


def test_the_private_name_check_bites():
    assert private_imports("from backend.ingest.pipeline import COUNT_COLUMN, _Loader\n", "backend.ingest.attach") == [
        "backend.ingest.attach:1 imports backend.ingest.pipeline._Loader"
    ]
    assert private_imports("from backend.auth import create_team as _create\n", "rlvr_explorer.cli.main") == []
