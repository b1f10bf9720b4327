"""One registration is all an analysis needs: a throwaway analysis put in the registry
(a per-step count with one parameter, shared by every step range, in the live series)
is listed by the API's job kinds and offered by the dashboard's Jobs page, shown where it
says (the Overview's panels, Compare many's kinds), applies to a trace,
is queued by default when a trace becomes ready, checks its parameters, runs through
the worker's runner (its shared parameter fixed from the whole trace) and joins the
trace's step series."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.registry import ANALYSES, SAMPLE_BASE, AnalysisSpec
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder


def _run(data, min_len: int, top_rank: int | None) -> dict:
    s = data.samples
    keep = s.response_len >= min_len
    steps, counts = np.unique(s.step[keep], return_counts=True)
    return {
        "steps": [{"step": int(a), "n": int(b)} for a, b in zip(steps, counts)],
        "top_rank": top_rank,
    }


def _reduce(partials: list[dict], top_rank: int | None) -> dict:
    return {"steps": sorted((e for p in partials for e in p["steps"]), key=lambda e: e["step"]), "top_rank": top_rank}


TOY = AnalysisSpec(
    kind="toy_count",
    title="Samples per step (a test)",
    tables={"samples": SAMPLE_BASE + ("dp_rank",)},
    required={"samples": ("step", "response_len", "dp_rank")},
    defaults={"min_len": 0, "top_rank": None},
    run=_run,
    reduce=_reduce,
    reduce_params=("top_rank",),
    live_series=True,
    shared_params={"top_rank": ("samples", "dp_rank")},
    shows=("overview", "compare"),
)


@pytest.fixture()
def toy(monkeypatch):
    """The toy analysis registered, and jobs kept off the queue: the worker processes of
    other tests know no toy analysis (the test runs its jobs through the runner here)."""
    import backend.jobs.analyses as jobs

    sent: list[list[int]] = []
    monkeypatch.setitem(ANALYSES, "toy_count", TOY)
    monkeypatch.setattr(jobs, "dispatch", lambda ids, kind: sent.append(list(ids)))
    return sent


def _run_jobs(job_ids: list[int]) -> None:
    """What the worker's run_analyses task does with them."""
    from backend.jobs import leases
    from workers.runners.analyses import plan_and_run

    with leases.running(job_ids) as claimed:
        assert claimed == job_ids
        plan_and_run(claimed, lambda *a: pytest.fail("a test-sized trace runs in one part"))


def test_the_api_and_the_runner_serve_it(toy, api, tmp_path):
    kinds = api.get("/api/v1/jobs/kinds").json()
    assert "toy_count" in kinds["kinds"]
    listed = {a["kind"]: a for a in kinds["analyses"]}
    assert listed["toy_count"] == {
        "kind": "toy_count",
        "title": TOY.title,
        "defaults": {"min_len": 0, "top_rank": None},
        "default": True,
        "live_series": True,
        "shows": ["overview", "compare"],
    }

    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=3, groups=4, n=2))
    trace = api.post("/api/v1/traces", files=[("files", ("run.zip", zip_folder(folder), "application/zip"))]).json()
    try:
        assert "toy_count" in trace["analyses"]
        runs = f"/api/v1/traces/{trace['id']}/analyses"
        default_job = next(j for j in api.get(runs).json()["items"] if j["kind"] == "toy_count")
        assert default_job["id"] in toy[-1]  # queued with the defaults when the trace became ready

        r = api.post(runs, json={"kind": "toy_count", "params": {"min_len": "long"}})
        assert r.status_code == 422 and "params.min_len" in r.text, r.text
        r = api.post(runs, json={"kind": "toy_count", "params": {"colour": 1}})
        assert r.status_code == 422 and "colour" in r.text, r.text

        _run_jobs([default_job["id"]])
        done = api.get(f"{runs}/toy_count").json()
        assert done["status"] == "succeeded", done
        assert [e["n"] for e in done["result"]["steps"]] == [8, 8, 8]
        top = max(r["dp_rank"] for rows in synthetic_rows(steps=3, groups=4, n=2) for r in rows)
        assert done["result"]["top_rank"] == top + 1  # fixed from the whole trace

        series = api.get(f"/api/v1/traces/{trace['id']}/series", params={"keys": "toy_count/n"}).json()
        assert series["series"]["toy_count/n"] == [8, 8, 8]

    finally:
        api.delete(f"/api/v1/traces/{trace['id']}")


def test_the_jobs_page_offers_it(toy, api):
    """The Jobs page (against a stub API answering with the real API's job kinds) offers
    the toy analysis in its kind filter and its re-run form."""
    import httpx

    from dashboard.app import create_dash
    from tests.dashboard.test_dashboard_team import KEY, StubApi, _callback, team_page

    kinds = api.get("/api/v1/jobs/kinds").json()
    stub = StubApi()
    stub.routes[("GET", "/api/v1/me")] = httpx.Response(200, json={"team": {"id": 1, "name": "infra"}})
    stub.routes[("GET", "/api/v1/jobs/kinds")] = httpx.Response(200, json=kinds)
    stub.routes[("GET", "/api/v1/traces")] = httpx.Response(200, json={"items": [], "total": 0})
    app = create_dash("http://api.test", http_client=httpx.Client(transport=httpx.MockTransport(stub)))
    c = app.server.test_client()
    _callback(
        c,
        "..sign-in-message.children...sign-in-redirect.href..",
        [
            {"id": "sign-in-submit", "property": "n_clicks", "value": 1},
            {"id": "sign-in-key", "property": "n_submit", "value": 0},
        ],
        [
            {"id": "sign-in-key", "property": "value", "value": KEY},
            {"id": "sign-in-next", "property": "data", "value": "/jobs"},
        ],
        ["sign-in-submit.n_clicks"],
    )
    _r, page = team_page(c, "/jobs")
    options = {}

    def walk(node):
        if isinstance(node, dict):
            props = node.get("props") or {}
            if props.get("id") in ("jobs-kind", "rerun-kind"):
                options[props["id"]] = props.get("options")
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(page)
    assert "toy_count" in options["jobs-kind"] and "advice" in options["jobs-kind"]
    assert "toy_count" in options["rerun-kind"] and "advice" not in options["rerun-kind"]

    # where it shows comes from the same answer: the Overview's panels, Compare many's kinds
    import flask

    from dashboard.api import session
    from dashboard.server.analysis_places import analyses_shown

    with app.server.test_request_context("/"):
        flask.session[session.KEY_FIELD] = session.seal_key(KEY, app.server)
        assert "toy_count" in analyses_shown("overview") and "toy_count" in analyses_shown("compare")
        assert "longtail" in analyses_shown("overview") and "lengths" not in analyses_shown("overview")
        assert analyses_shown("imbalance") == ("imbalance",)
