"""`view=page` (and `load`) on GET /jobs/{id} and GET /traces/{id}/analyses/{kind}: a
long-tail or imbalance result as the dashboard pages draw it (core.analysis.page_views),
`view=steps` (and `step_offset`, `step_limit`): a page of its full-resolution step
entries, the stored result unchanged without the parameter."""

from __future__ import annotations

import orjson
import pytest

from backend.auth import team_for_key
from backend.jobs.state import create_job
from backend.store.db import session_scope
from backend.store.models import JobStatus
from core.analysis.imbalance import analyze_imbalance
from core.analysis.longtail import analyze_longtail
from core.analysis.page_views import STEPS_PAGE_MAX, page_view, steps_page
from core.analysis.registry import resolve_params
from core.analysis.tables import TraceData
from tests.helpers import jsonl, synthetic_rows, synthetic_trace_tables

pytestmark = pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)


def _results() -> dict[str, dict]:
    data = TraceData.from_tables(synthetic_trace_tables())
    # through JSON, as the store keeps them
    return {
        "imbalance": orjson.loads(orjson.dumps(analyze_imbalance(data))),
        "longtail": orjson.loads(orjson.dumps(analyze_longtail(data))),
        "lengths": {"steps": [{"step": 0, "p50": 12.0}]},
    }


def _trace(api) -> int:
    r = api.post(
        "/api/v1/traces",
        files=[("files", ("packed_lengths_step_0.jsonl", jsonl(synthetic_rows(1, 4, 2)[0]), "application/jsonl"))],
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _succeeded(team_key: str, trace_id: int, kind: str, result: dict) -> int:
    with session_scope() as s:
        team = team_for_key(s, team_key)
        job = create_job(s, team_id=team.id, trace_id=trace_id, kind=kind, params=resolve_params(kind, {}))
        job.status, job.progress, job.result = JobStatus.SUCCEEDED, 1.0, result
        return job.id


def test_page_view_of_a_job(api, team_key):
    trace_id = _trace(api)
    results = _results()
    ids = {kind: _succeeded(team_key, trace_id, kind, result) for kind, result in results.items()}

    for kind, job_id in ids.items():  # without the parameter: the result as stored
        assert api.get(f"/api/v1/jobs/{job_id}").json()["result"] == results[kind]
        assert api.get(f"/api/v1/jobs/{job_id}?view=full").json()["result"] == results[kind]

    lt = api.get(f"/api/v1/jobs/{ids['longtail']}", params={"view": "page"})
    assert lt.status_code == 200
    body = lt.json()
    assert body["result"] == page_view("longtail", results["longtail"])
    assert body["id"] == ids["longtail"] and body["status"] == "succeeded" and body["kind"] == "longtail"
    assert "engine_heatmap" in body["result"] and all("engine" not in s for s in body["result"]["steps"])

    for load in ("tokens", "cost"):
        got = api.get(f"/api/v1/jobs/{ids['imbalance']}", params={"view": "page", "load": load}).json()["result"]
        assert got == page_view("imbalance", results["imbalance"], load=load)
        assert got["view"] == {"name": "page", "load": load}
    # a kind without a page view: its result
    assert api.get(f"/api/v1/jobs/{ids['lengths']}?view=page").json()["result"] == results["lengths"]
    # the stored result is untouched by a view
    assert api.get(f"/api/v1/jobs/{ids['longtail']}").json()["result"] == results["longtail"]


def test_page_view_of_the_latest_analysis(api, team_key):
    trace_id = _trace(api)
    results = _results()
    _succeeded(team_key, trace_id, "imbalance", results["imbalance"])
    path = f"/api/v1/traces/{trace_id}/analyses/imbalance"
    assert api.get(path).json()["result"] == results["imbalance"]
    got = api.get(path, params={"view": "page", "load": "cost"}).json()["result"]
    assert got == page_view("imbalance", results["imbalance"], load="cost")


def test_unknown_view_or_load_is_refused(api, team_key):
    job_id = _succeeded(team_key, _trace(api), "imbalance", _results()["imbalance"])
    for params in (
        {"view": "summary"},
        {"view": "page", "load": "flops"},
        {"view": "steps", "step_limit": STEPS_PAGE_MAX + 1},
        {"view": "steps", "step_limit": 0},
        {"view": "steps", "step_offset": -1},
    ):
        r = api.get(f"/api/v1/jobs/{job_id}", params=params)
        assert r.status_code == 422, params


def test_steps_view_pages_the_stored_entries(api, team_key):
    trace_id = _trace(api)
    results = _results()
    job_id = _succeeded(team_key, trace_id, "longtail", results["longtail"])
    stored = results["longtail"]["steps"]
    assert len(stored) > 2
    got = []
    for offset in range(0, len(stored), 2):
        r = api.get(f"/api/v1/jobs/{job_id}", params={"view": "steps", "step_offset": offset, "step_limit": 2})
        assert r.status_code == 200, r.text
        body = r.json()["result"]
        assert body == steps_page(results["longtail"], offset, 2)
        assert body["view"]["total"] == len(stored) and body["summary"] == results["longtail"]["summary"]
        got += body["steps"]
    assert got == stored  # every entry once, as stored (per-engine columns included)
    latest = api.get(
        f"/api/v1/traces/{trace_id}/analyses/longtail", params={"view": "steps", "step_offset": 1, "step_limit": 1}
    )
    assert latest.json()["result"]["steps"] == stored[1:2]
