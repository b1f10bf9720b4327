"""What the dashboard relies on from the REST API: job lists without results unless
asked (a result can be megabytes), one job with its result, and a JSON 404 (not the
dashboard's HTML) for any unknown /api path. Both deployment shapes (SQLite, Postgres)."""

from __future__ import annotations

import pytest

from tests.helpers import synthetic_rows, write_packed_dir, zip_folder

BIG = {"values": list(range(2000)), "note": "a result"}


@pytest.fixture()
def trace_with_jobs(api, team_key, tmp_path):
    """A small trace with a finished analysis, a finished replay and a queued analysis."""
    from backend.auth import team_for_key
    from backend.jobs.state import create_job, mark_succeeded
    from backend.store.db import get_engine, session_scope

    archive = zip_folder(write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2)))
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert r.status_code == 201, r.text
    trace_id = r.json()["id"]
    with session_scope() as session:
        team_id = team_for_key(session, team_key).id
        done = create_job(session, team_id=team_id, trace_id=trace_id, kind="imbalance", params={"x": 1})
        sim = create_job(session, team_id=team_id, trace_id=trace_id, kind="simulation", params={"policy": "sync"})
        queued = create_job(session, team_id=team_id, trace_id=trace_id, kind="longtail", params={"x": 2})
        ids = {"done": done.id, "sim": sim.id, "queued": queued.id}
    mark_succeeded(get_engine(), ids["done"], BIG, "done")
    mark_succeeded(get_engine(), ids["sim"], BIG, "replayed")
    return trace_id, ids


def _by_id(items: list[dict]) -> dict[int, dict]:
    return {j["id"]: j for j in items}


def test_lists_omit_results_unless_asked(api, trace_with_jobs):
    trace_id, ids = trace_with_jobs
    for url in ("/api/v1/jobs", f"/api/v1/traces/{trace_id}/analyses", "/api/v1/simulations"):
        plain = api.get(url)
        assert plain.status_code == 200, plain.text
        items = plain.json()["items"]
        assert items and all(j["result"] is None for j in items), url
        assert all(j["status"] and j["params"] is not None for j in items)  # the rest is all there
        full = _by_id(api.get(url, params={"include_result": "true"}).json()["items"])
        wanted = ids["sim"] if "simulations" in url else ids["done"]
        assert full[wanted]["result"] == BIG, url
        assert len(plain.content) < len(api.get(url, params={"include_result": "true"}).content) / 3
    listed = _by_id(api.get("/api/v1/jobs", params={"trace_id": trace_id}).json()["items"])
    assert listed[ids["done"]]["status"] == "succeeded" and listed[ids["queued"]]["status"] == "queued"
    assert listed[ids["done"]]["message"] == "done"
    # one job by id carries its result
    assert api.get(f"/api/v1/jobs/{ids['done']}").json()["result"] == BIG
    assert api.get(f"/api/v1/simulations/{ids['sim']}").json()["result"] == BIG


def test_unknown_api_paths_answer_json_404(client, api):
    for method, path in (
        ("GET", "/api/v1/no-such-thing"),
        ("POST", "/api/v2/traces"),
        ("GET", "/api/"),
        ("DELETE", "/api/v1/traces/1/nothing/here"),
    ):
        r = client.request(method, path)
        assert r.status_code == 404, (method, path, r.status_code)
        assert r.headers["content-type"].startswith("application/json")
        assert path.rstrip("/").split("/")[-1] in r.json()["detail"]["message"]
    wrong_method = client.request("PUT", "/api/v1/jobs")  # a known path: still "method not allowed"
    assert wrong_method.status_code == 405 and "PUT" in wrong_method.json()["detail"]["message"]
    assert client.get("/api/v1/health").json() == {"status": "ok"}


def test_a_fresh_server_serves_the_component_scripts_asked_at_once(env):
    """With several server processes a browser's first script requests can be a fresh
    process's first requests, all at once: none may fail while Dash sets itself up."""
    import re
    from concurrent.futures import ThreadPoolExecutor

    from fastapi.testclient import TestClient

    from rlvr_explorer.server import create_server

    index = TestClient(create_server()).get("/sign-in").text
    scripts = re.findall(r'src="(/_dash-component-suites/[^"]+)"', index)
    assert len(scripts) >= 4
    fresh = TestClient(create_server())  # another process: no request served yet
    with ThreadPoolExecutor(len(scripts)) as pool:
        codes = list(pool.map(lambda src: fresh.get(src).status_code, scripts))
    assert codes == [200] * len(scripts)
