"""Analysis jobs on a real worker: defaults run when a trace is ready, results are reused,
big traces are split into step-range parts and reduced, failures are readable."""

from __future__ import annotations

import numpy as np
import pytest

from backend.store.db import get_engine, new_session
from backend.store.models import Trace
from backend.store.trace_tables import load_trace_data
from core.analysis.registry import run_analysis
from tests.conftest import WORKER_PART_SAMPLES, wait_for_job
from tests.helpers import responses_of, synthetic_rows, write_packed_dir, zip_folder


@pytest.fixture()
def trace(api, worker, tmp_path):
    per_step = synthetic_rows(steps=6, groups=16, n=4)
    r = api.post(
        "/api/v1/traces",
        files=[("files", ("run.zip", zip_folder(write_packed_dir(tmp_path / "run", per_step)), "application/zip"))],
    )
    assert r.status_code == 201, r.text
    return r.json(), per_step


def latest(api, trace_id, kind):
    r = api.get(f"/api/v1/traces/{trace_id}/analyses/{kind}")
    assert r.status_code == 200, r.text
    return wait_for_job(api, r.json()["id"])


def test_default_analyses_run_when_ready(api, trace):
    body, per_step = trace
    kinds = {j["kind"] for j in api.get(f"/api/v1/traces/{body['id']}/analyses").json()["items"]}
    assert {"lengths", "longtail", "imbalance"} <= kinds
    lengths = latest(api, body["id"], "lengths")
    assert lengths["status"] == "succeeded", lengths
    # 6 steps x 64 samples > WORKER_PART_SAMPLES: computed in parts, then reduced.
    assert 6 * 64 > WORKER_PART_SAMPLES
    assert lengths["result"]["parts"] >= 2
    # Each part names the worker host that ran it.
    workers = lengths["result"]["part_workers"]
    assert len(workers) == lengths["result"]["parts"] and all(workers), workers
    for kind in ("longtail", "imbalance"):
        assert latest(api, body["id"], kind)["status"] == "succeeded"


def test_parts_reduce_to_the_direct_result(api, trace, env):
    body, per_step = trace
    for kind in ("lengths", "longtail", "imbalance"):
        job = latest(api, body["id"], kind)
        with new_session() as s:
            stored = s.get(Trace, body["id"])
        with get_engine().connect() as conn:
            from core.analysis.registry import ANALYSES

            data = load_trace_data(conn, stored, ANALYSES[kind].tables)
        from core.jsonable import json_safe

        direct = json_safe(run_analysis(kind, data, job["params"]))
        # The parts share a dp_size fixed from the whole trace, which the result records.
        chunked = {k: v for k, v in job["result"].items() if k not in ("parts", "part_workers", "params")}
        direct.pop("params")
        assert _close(chunked, direct), kind


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and np.isclose(a, b, rtol=1e-9, atol=1e-9)
    return a == b


def test_request_reuses_identical_job(api, trace):
    body, _ = trace
    url = f"/api/v1/traces/{body['id']}/analyses"
    first = api.post(url, json={"kind": "longtail", "params": {"tail_fraction": 0.2}})
    assert first.status_code == 202
    job = wait_for_job(api, first.json()["id"])
    assert job["status"] == "succeeded"
    again = api.post(url, json={"kind": "longtail", "params": {"tail_fraction": 0.2}})
    assert again.status_code == 200 and again.json()["id"] == job["id"]


def test_bad_requests(api, trace):
    body, _ = trace
    url = f"/api/v1/traces/{body['id']}/analyses"
    r = api.post(url, json={"kind": "astrology"})
    assert r.status_code == 422 and "astrology" in r.json()["detail"]["message"]
    r = api.post(url, json={"kind": "lengths", "params": {"nope": 1}})
    assert r.status_code == 422 and "nope" in r.json()["detail"]["message"]
    r = api.post(url, json={"kind": "multiturn"})
    assert r.status_code == 422 and "does not apply" in r.json()["detail"]["message"]


def test_crashing_analysis_fails_with_reason(api, trace):
    from backend.jobs.dispatch import dispatch
    from backend.jobs.state import create_job
    from backend.store.db import session_scope

    body, _ = trace
    # the API refuses a parameter of the wrong type up front, naming it
    r = api.post(f"/api/v1/traces/{body['id']}/analyses", json={"kind": "longtail", "params": {"tail_fraction": "abc"}})
    assert r.status_code == 422 and "params.tail_fraction" in r.json()["detail"]["message"]
    # a job that crashes in the worker anyway (queued around the API's checks)
    with session_scope() as session:
        team_id = session.get(Trace, body["id"]).team_id
        job = create_job(
            session, team_id=team_id, trace_id=body["id"], kind="longtail", params={"tail_fraction": "abc"}
        )
        job_id = job.id
    dispatch([job_id], "longtail")
    job = wait_for_job(api, job_id)
    assert job["status"] == "failed"
    assert "longtail failed" in job["error"]
    # The worker keeps serving.
    ok = api.post(f"/api/v1/traces/{body['id']}/analyses", json={"kind": "longtail", "params": {"tail_fraction": 0.3}})
    assert wait_for_job(api, ok.json()["id"])["status"] == "succeeded"


def test_lengths_result_matches_numpy(api, trace):
    body, per_step = trace
    result = latest(api, body["id"], "lengths")["result"]
    assert result, result
    text = repr(result)
    expected_p99 = float(np.percentile(responses_of(per_step, 3), 99))
    assert f"{expected_p99}" in text or any(abs(v - expected_p99) < 1e-6 for v in _floats(result))


def _floats(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _floats(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _floats(v)
    elif isinstance(obj, float):
        yield obj
