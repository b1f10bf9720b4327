"""Each kind of plug-in (a trace format, an analysis, a replay policy, a dashboard page)
takes at most three source files, as CONTRIBUTING.md's recipes say.

Each test copies the project's packages to a temporary folder, follows one recipe there
(the plug-in's own module, plus its one registration where the recipe has one), checks
which source files now differ from the project's (at most three, none of them a test or
a doc), and runs a fresh interpreter on the copy that shows the plug-in picked up
everywhere: a format detected by name and by content, read, and named by the refusals of
an unknown format; an analysis run, listed by the API with where it shows, and shown
there by the dashboard (the Overview's panels and a headline card, Compare many); a
policy in the request schema, the presets and the CLI; a page routed and in the top
navigation. Nothing is written into the source tree.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("backend", "core", "dashboard", "workers", "rlvr_explorer", "engine")
MAX_FILES = 3


@pytest.fixture()
def tree(tmp_path) -> Path:
    """A copy of the project's packages (their byte-code too: the fresh interpreter
    compiles only what a recipe changed)."""
    copy = tmp_path / "project"
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("*.log"))
    return copy


def write(tree: Path, path: str, text: str) -> None:
    assert not (tree / path).exists(), f"{path} exists: a recipe's new module must be new"
    (tree / path).write_text(text)


def register(tree: Path, path: str, anchor: str, text: str) -> None:
    """Put `text` before `anchor` (found once) in `path`: a recipe's registration."""
    source = (tree / path).read_text()
    assert source.count(anchor) == 1, f"{anchor!r} in {path}: the recipe's registration point moved"
    (tree / path).write_text(source.replace(anchor, text + anchor))


def touched(tree: Path) -> list[str]:
    """The source files of the copy that are new or differ from the project's."""
    out = []
    for path in sorted(tree.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(tree)
        original = ROOT / rel
        if not original.exists() or not filecmp.cmp(path, original, shallow=False):
            out.append(rel.as_posix())
    return out


def check_recipe(tree: Path, expected: set[str]) -> None:
    files = touched(tree)
    assert set(files) == expected, files
    assert len(files) <= MAX_FILES
    assert not any(f.startswith(("tests/", "docs/")) for f in files)


def run_in(tree: Path, script: str) -> dict:
    """`script` in a fresh interpreter importing the copy; its last line of output, JSON."""
    prologue = f"import backend, core, dashboard\nassert backend.__file__.startswith({str(tree)!r})\n"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", prologue + script], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- a format

TOY_FORMAT = '''"""Toy lengths: JSON lines {"toy": [step, group, sample, prompt_len, response_len]}."""

from collections.abc import Iterator

import numpy as np
import orjson

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.spec import FormatSpec

COLUMNS = ("step", "group_idx", "sample_idx", "prompt_len", "response_len")


def read_toy(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    with source.open() as stream:
        rows = [orjson.loads(line)["toy"] for line in stream if line.strip()]
    if not rows:
        raise InputError(source.name, "no rows")
    table = np.array(rows, dtype=np.int32)
    yield TableBatch("samples", {c: table[:, i] for i, c in enumerate(COLUMNS)})


FORMAT_SPECS = (
    FormatSpec(
        "toy-lengths",
        read_toy,
        "``*.toy``; or a first line with toy",
        names=(r".*\\.toy$",),
        line=lambda obj: "toy" in obj,
        carries={"samples": "toy length files (*.toy)"},
    ),
)
'''

CHECK_FORMAT = """
import json, tempfile
from pathlib import Path
from typer.testing import CliRunner
from backend.formats import FORMATS, detect_format, read_sources, upload_format
from backend.formats.base import InputError, ReadResult, Source
from backend.formats.detect import detection_table
from backend.formats.registry import carried_by
import backend.api.routes.live as live, backend.api.routes.traces as traces
from rlvr_explorer.cli import app

folder = Path(tempfile.mkdtemp())
rows = b"".join(b'{"toy": [%d, %d, 0, 10, %d]}\\n' % (s, g, 5 + s + g) for s in range(2) for g in range(3))
(folder / "run.toy").write_bytes(rows)
(folder / "other.jsonl").write_bytes(rows)
def source(path):
    return Source(path.name, lambda: path.open("rb"), path.stat().st_size)

by_name, by_line = source(folder / "run.toy"), source(folder / "other.jsonl")
read = sum(len(b) for b in read_sources([by_name], None, ReadResult()))
try:
    list(read_sources([by_name], "nosuch", ReadResult()))
    refused = ""
except InputError as exc:
    refused = str(exc)
cli = CliRunner().invoke(app, ["ingest", str(folder / "run.toy"), "--format", "nosuch"])
print(json.dumps({
    "detected": [detect_format(by_name), detect_format(by_line), upload_format([by_name, by_line])],
    "rows": read,
    "refusals": ["toy-lengths" in refused, "toy-lengths" in cli.output, "toy-lengths" in FORMATS,
                 "toy-lengths" in traces.FORMATS, "toy-lengths" in live.FORMATS],
    "carried": carried_by()["samples"],
    "table": "toy-lengths" in detection_table(),
}))
"""


def test_a_format_takes_its_module_and_one_line(tree):
    write(tree, "backend/formats/toy_lengths.py", TOY_FORMAT)
    register(
        tree,
        "backend/formats/registry.py",
        "from backend.formats.base import",
        "from backend.formats import toy_lengths\n",
    )
    register(tree, "backend/formats/registry.py", ")\n\nSPECS: dict", "    toy_lengths,\n")
    check_recipe(tree, {"backend/formats/toy_lengths.py", "backend/formats/registry.py"})

    out = run_in(tree, CHECK_FORMAT)
    assert out["detected"] == ["toy-lengths"] * 3  # by name, by its first line, an upload's
    assert out["rows"] == 6
    assert out["refusals"] == [True] * 5  # the reader's, the CLI's and both routes' lists
    assert "toy length files (*.toy)" in out["carried"] and out["table"]


# --------------------------------------------------------------------------- an analysis

TOY_ANALYSIS = '''"""Samples per step at least `min_len` long."""

import numpy as np

from core.analysis.tables import TraceData


def _headline(steps: list[dict], min_len: int) -> dict:
    return {"label": "Samples counted", "value": sum(e["n"] for e in steps), "hint": f"at least {min_len} long"}


def analyze_toy_count(data: TraceData, min_len: int) -> dict:
    s = data.samples
    steps, counts = np.unique(s.step[s.response_len >= min_len], return_counts=True)
    per_step = [{"step": int(a), "n": int(b)} for a, b in zip(steps, counts)]
    return {"steps": per_step, "headline": _headline(per_step, min_len)}


def reduce_toy_count(partials: list[dict], min_len: int) -> dict:
    per_step = sorted((e for p in partials for e in p["steps"]), key=lambda e: e["step"])
    return {"steps": per_step, "headline": _headline(per_step, min_len)}
'''

TOY_ANALYSIS_SPEC = """ANALYSES["toy_count"] = AnalysisSpec(
    kind="toy_count",
    title="Samples per step",
    tables={"samples": SAMPLE_BASE},
    required={"samples": ("step", "response_len")},
    defaults={"min_len": 0},
    run=toy_count.analyze_toy_count,
    reduce=toy_count.reduce_toy_count,
    reduce_params=("min_len",),
    shows=("overview", "compare"),
)


"""

CHECK_ANALYSIS = """
import json
import flask, httpx, numpy as np
from backend.api.routes.jobs import list_job_kinds
from core.analysis.registry import default_analyses, run_analysis_chunked
from core.analysis.tables import TraceData
from dashboard.api import session
from dashboard.app import create_dash
from dashboard.server.analysis_places import analyses_shown
from dashboard.views.overview import overview_cards

step = np.repeat(np.arange(3), 4).astype(np.int32)
zeros = np.zeros(12, np.int32)
data = TraceData.from_tables({"samples": {"step": step, "group_idx": zeros, "sample_idx": np.tile(np.arange(4), 3),
                                          "prompt_len": zeros + 5, "response_len": np.arange(12, dtype=np.int32)}})
result = run_analysis_chunked("toy_count", [data.select_steps(0, 1), data.select_steps(1, 3)], {"min_len": 2})
kinds = list_job_kinds(None).model_dump()
job = {"id": 9, "trace_id": 1, "kind": "toy_count", "status": "succeeded", "params": {}, "result": result}

def answer(request):
    path = request.url.path
    if path == "/api/v1/jobs/kinds":
        return httpx.Response(200, json=kinds)
    if path in ("/api/v1/traces/1/analyses", "/api/v1/jobs"):
        return httpx.Response(200, json={"items": [job], "total": 1})
    if path == "/api/v1/jobs/9":
        return httpx.Response(200, json=job)
    return httpx.Response(404, json={"detail": {"message": "not here"}})

app = create_dash("http://api.test", http_client=httpx.Client(transport=httpx.MockTransport(answer)))
with app.server.test_request_context("/traces/1"):
    flask.session[session.KEY_FIELD] = session.seal_key("rlvr_test", app.server)
    from dashboard.pages import trace_overview
    body = trace_overview.body({"id": 1, "analyses": ["lengths", "toy_count"], "n_steps": 3, "n_samples": 12})
    shown = {"overview": analyses_shown("overview"), "compare": analyses_shown("compare")}
cards = [c.__dict__ for c in overview_cards({"n_steps": 3}, [], None, {"toy_count": result})]
print(json.dumps({
    "steps": [e["n"] for e in result["steps"]],
    "default": "toy_count" in default_analyses({"samples": ["step", "response_len"]}),
    "listed": next(a for a in kinds["analyses"] if a["kind"] == "toy_count"),
    "shown": shown,
    "panel": '"toy_count"' in json.dumps(body.to_plotly_json(), default=lambda o: o.to_plotly_json()),
    "card": next((c for c in cards if c["key"] == "toy_count"), None),
}))
"""


def test_an_analysis_takes_its_module_and_its_registry_entry(tree):
    write(tree, "core/analysis/toy_count.py", TOY_ANALYSIS)
    register(
        tree, "core/analysis/registry.py", "from core.analysis.tables import", "from core.analysis import toy_count\n"
    )
    register(tree, "core/analysis/registry.py", "def default_analyses(", TOY_ANALYSIS_SPEC)
    check_recipe(tree, {"core/analysis/toy_count.py", "core/analysis/registry.py"})

    out = run_in(tree, CHECK_ANALYSIS)
    assert out["steps"] == [2, 4, 4] and out["default"]  # run in step-range parts, queued by default
    assert out["listed"]["shows"] == ["overview", "compare"] and out["listed"]["defaults"] == {"min_len": 0}
    assert "toy_count" in out["shown"]["overview"] and "toy_count" in out["shown"]["compare"]
    assert out["panel"]  # its panel on the Overview, whose result feeds the cards
    assert out["card"] == {
        "key": "toy_count",
        "label": "Samples counted",
        "value": "10",
        "hint": "at least 2 long",
        "source": "toy_count",
    }


# --------------------------------------------------------------------------- a policy

TOY_POLICY = '''"""A throwaway policy: the synchronous replay, with one parameter."""

from dataclasses import dataclass

from core.simulator.policies.spec import PolicySpec, param
from core.simulator.policies.sync import run_sync


@dataclass(frozen=True)
class ToyParams:
    rounds: int = param(3, "rounds per step", ge=1, le=64)


SPEC = PolicySpec(
    kind="toy_policy",
    disaggregated=False,
    help="colocated; a throwaway policy of the recipe test",
    run=run_sync,
    params=ToyParams,
    batch_rollouts=True,
)
'''

CHECK_POLICY = """
import json
from typer.testing import CliRunner
from backend.api.schemas_replay import replay_models
from backend.jobs.simulations import presets
from core.simulator.policies import POLICIES, make_policy
from rlvr_explorer.cli import app

try:
    make_policy({"kind": "toy_policy", "params": {"rounds": 0}})
    bad = ""
except ValueError as exc:
    bad = str(exc)
listing = CliRunner().invoke(app, ["policies", "--json"])
schema = json.dumps(replay_models().simulation.model_json_schema())
print(json.dumps({
    "registered": "toy_policy" in POLICIES,
    "params": make_policy({"kind": "toy_policy", "params": {"rounds": 5}}).params,
    "bad": bad,
    "presets": presets()["policy_params"].get("toy_policy"),
    "schema": '"toy_policy"' in schema,
    "cli": "toy_policy" in json.loads(listing.stdout.strip().splitlines()[-1]),
}))
"""


def test_a_policy_takes_its_module_and_one_line(tree):
    write(tree, "core/simulator/policies/toy_policy.py", TOY_POLICY)
    register(tree, "core/simulator/policies/__init__.py", "    sync,\n", "    toy_policy,\n")
    register(tree, "core/simulator/policies/__init__.py", "sync, one_step_off,", "toy_policy, ")
    check_recipe(tree, {"core/simulator/policies/toy_policy.py", "core/simulator/policies/__init__.py"})

    out = run_in(tree, CHECK_POLICY)
    assert out["registered"] and out["params"] == {"rounds": 5}
    assert "policy.params.rounds" in out["bad"]
    assert [p["name"] for p in out["presets"]] == ["rounds"]  # the dashboard's forms read these
    assert out["schema"] and out["cli"]


# --------------------------------------------------------------------------- a page

TOY_PAGE = '''"""A throwaway page. Ids: toy-body."""

import dash
from dash import html

dash.register_page(__name__, path="/toy", name="Toy", title="Toy · RLVR Explorer", nav="top", order=9)


def layout(**_):
    return html.Div("the toy page", id="toy-body")
'''

CHECK_PAGE = """
import json
import dash
from dashboard.app import create_dash
from dashboard.views import components

app = create_dash("http://127.0.0.1:9")
client = app.server.test_client()
body = {
    "output": ".._pages_content.children..._pages_store.data..",
    "outputs": [{"id": "_pages_content", "property": "children"}, {"id": "_pages_store", "property": "data"}],
    "inputs": [{"id": "_pages_location", "property": "pathname", "value": "/toy"},
               {"id": "_pages_location", "property": "search", "value": ""}],
    "state": [],
    "changedPropIds": ["_pages_location.pathname"],
}
page = client.post("/_dash-update-component", json=body).get_json()["response"]["_pages_content"]["children"]
with app.server.test_request_context("/toy"):
    nav = json.dumps([link.to_plotly_json() for link in components.top_nav("/toy")], default=lambda o: o.to_plotly_json())
print(json.dumps({
    "registered": [p["path"] for p in dash.page_registry.values() if p["name"] == "Toy"],
    "routed": "the toy page" in json.dumps(page),
    "nav": '"/toy"' in nav,
}))
"""


def test_a_page_takes_its_module(tree):
    write(tree, "dashboard/pages/toy.py", TOY_PAGE)
    check_recipe(tree, {"dashboard/pages/toy.py"})

    out = run_in(tree, CHECK_PAGE)
    assert out == {"registered": ["/toy"], "routed": True, "nav": True}
