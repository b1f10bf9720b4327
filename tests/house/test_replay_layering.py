"""The replay path reads one typed request, and the runners only do I/O around core —
checked by reading the source (no import of the modules, no services)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# from the REST body (and the CLI's flags) to the replay: route -> job -> runner -> core
REPLAY_PATH = (
    "backend/api/routes/simulations.py",
    "backend/api/routes/advice.py",
    "backend/api/replay_requests.py",
    "backend/jobs/simulations.py",
    "backend/jobs/advice.py",
    "workers/runners/simulations.py",
    "workers/runners/advice.py",
    "rlvr_explorer/cli/whatif.py",
    "core/simulator/request.py",
    "core/simulator/replay.py",
    "core/simulator/advice.py",
)
# functions of those modules that serve the workload (generate) job, not a replay
NOT_REPLAY = {"queue_workload"}
RUNNERS = {
    "workers/runners/simulations.py": "core.simulator.replay",
    "workers/runners/advice.py": "core.simulator.advice",
}


def _tree(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(), filename=path)


def _is_dict(annotation: ast.expr | None) -> bool:
    """`dict`, `dict[...]`, `Dict[...]` or their string forms."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.split("[")[0].strip() in ("dict", "Dict")
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    return isinstance(annotation, ast.Name) and annotation.id in ("dict", "Dict")


@pytest.mark.parametrize("path", REPLAY_PATH)
def test_no_params_dict_on_the_replay_path(path):
    """A replay's parameters travel as `ReplayRequest` / `AdviceRequest`, never as a
    `params: dict` nor read back with `params[...]` / `params.get(...)`."""
    bad = []
    tree = _tree(path)
    skipped = {
        id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name in NOT_REPLAY for n in ast.walk(f)
    }
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.arg == "params" and _is_dict(arg.annotation):
                    bad.append(f"{path}:{node.lineno} {node.name}(params: dict)")
        target = node.value if isinstance(node, (ast.Subscript, ast.Attribute)) else None
        if isinstance(target, ast.Name) and target.id == "params":
            if isinstance(node, ast.Subscript) or (isinstance(node, ast.Attribute) and node.attr == "get"):
                bad.append(f"{path}:{node.lineno} reads params")
    assert bad == []


@pytest.mark.parametrize("path, core_module", sorted(RUNNERS.items()))
def test_replay_runners_only_do_io_around_core(path, core_module):
    """The runner imports its computation from core and holds no loop of its own (the
    replay, calibration, forecast and result shaping live in core/simulator/)."""
    tree = _tree(path)
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert core_module in imported
    assert not {"numpy", "core.simulator.calibration", "core.simulator.evaluation"} & imported
    loops = [f"{path}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    assert loops == []


RUNNERS_AS_MODULES = {p.removesuffix(".py").replace("/", ".") for p in RUNNERS}


def test_the_cli_replays_through_core_not_the_runner():
    tree = _tree("rlvr_explorer/cli/whatif.py")
    from_runner = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module in RUNNERS_AS_MODULES
        for a in n.names
    }
    # the CLI reads the store with the runner's readers; the replay and advice come from core
    assert from_runner <= {"load_columns", "steps_of_columns", "workers_for_sweep"}
