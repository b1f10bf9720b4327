"""An advisor sweep fanned out over real worker processes as a Celery group (one
`advice_part` per rollout layout): the reduced result equals the sweep run in one
process, calibrated or not, and says which worker ran each part."""

from __future__ import annotations

import pytest

from backend.store.db import get_engine, new_session
from backend.store.models import JobPart, Trace
from core.simulator.advice import AdviceRequest, advice_of
from tests.conftest import wait_for_job
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder
from workers.runners.simulations import load_columns, steps_of_columns

URL = "/api/v1/advice"


def _upload(api, data: bytes) -> dict:
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", data, "application/zip"))])
    assert r.status_code == 201, r.text
    return r.json()


def _advise(api, body: dict) -> dict:
    r = api.post(URL, json=body)
    assert r.status_code == 202, r.text
    job = wait_for_job(api, r.json()["id"], timeout=300)
    assert job["status"] == "succeeded", job
    return job


def _local(job: dict) -> dict:
    """The same request swept in this process, unsplit (`advice_of`)."""
    request = AdviceRequest.from_json(job["params"])
    with new_session() as session:
        trace = session.get(Trace, request.trace_id)
        with get_engine().connect() as conn:
            steps = steps_of_columns(load_columns(conn, trace, request.steps), trace.max_response_len)
    return advice_of(steps, request, workers=1)


def _assert_fanned_out_equals_local(job: dict) -> dict:
    res = job["result"]
    with new_session() as session:
        parts = session.query(JobPart).filter(JobPart.job_id == job["id"]).count()
    assert res["parts"] == parts >= 2, (res.get("parts"), parts)
    assert len(res["part_workers"]) == res["parts"] and all(res["part_workers"])
    local = _local(job)
    assert [r["label"] for r in res["ranking"]] == [r["label"] for r in local["ranking"]]
    assert [r["step_s"] for r in res["ranking"]] == [r["step_s"] for r in local["ranking"]]
    # everything else too: the parts reduce to the unsplit sweep exactly
    assert {k: v for k, v in res.items() if k not in ("parts", "part_workers")} == local
    return local


def test_fanned_out_sweep_equals_the_local_sweep(api, worker, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=3, groups=16, n=4))
    trace = _upload(api, zip_folder(folder))
    job = _advise(api, {"trace_id": trace["id"], "gpu": "h100", "n_gpus": 8, "model": "qwen2.5-7b"})
    local = _assert_fanned_out_equals_local(job)
    assert local["n_configurations"] >= 50 and local["calibration"] is None
    assert job["message"].endswith(f"({job['result']['parts']} parts)")


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_calibrated_sweep_shares_its_calibration_with_the_parts(api, worker, shared_fixtures):
    # measured timings: the planner calibrates once, every part replays with its
    # calibration and noise model (Monte-Carlo intervals) sent along
    folder = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b"
    trace = _upload(api, zip_folder(folder))
    body = {
        "trace_id": trace["id"],
        "gpu": "h100",
        "n_gpus": 8,
        "model": "qwen2.5-7b",
        "steps": [0, 2],
        "calibrate": {"fit_steps": [0]},
        "policies": ["sync", "one_step_off"],
        "balancing": ["none"],
        "runs": 20,
        "policy_runs": 2,
    }
    job = _advise(api, body)
    local = _assert_fanned_out_equals_local(job)
    assert local["calibration"]["fit_steps"] == [0] and local["uncertainty"] == "mc"
    assert all(r["step_s"]["p10"] is not None for r in local["ranking"])


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_a_worker_killed_mid_sweep_leaves_the_result_unchanged(api, env, monkeypatch, tmp_path):
    """SIGKILL one of two workers while the parts of a sweep run: a part it held is lost
    with it (the embedded queue), so the job's fan-out lease runs out and the survivor's
    sweeper sends the job again, which plans the same parts again (or, killed between
    two parts, the survivor takes the rest); either way the sweep ends, equal to the
    unsplit one."""
    import os
    import signal
    import time

    from backend.store.db import reset_caches
    from backend.store.models import Job
    from tests.conftest import start_worker, stop_worker

    short = {
        "RLVR_JOB_LEASE_S": "4",
        "RLVR_JOB_SWEEP_S": "1",
        "RLVR_JOB_REQUEUE_S": "6",
        "RLVR_QUEUE_NAME": f"advice-kill-{os.getpid()}-{time.monotonic_ns()}",
    }
    for key, value in short.items():
        monkeypatch.setenv(key, value)
    reset_caches()
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=4, groups=128, n=8))
    trace = _upload(api, zip_folder(folder))
    workers = [start_worker({**env, **short}, tmp_path / f"{i}.log", concurrency=1) for i in range(2)]
    try:
        r = api.post(URL, json={"trace_id": trace["id"], "gpu": "h100", "n_gpus": 8, "model": "qwen2.5-7b"})
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with new_session() as session:
                job = session.get_one(Job, job_id)
                started = job.parts_total > 1 and 1 <= job.parts_done < job.parts_total - 2
            if started:
                break
            time.sleep(0.05)
        assert started, "the sweep never ran in parts"
        os.killpg(workers[0].pid, signal.SIGKILL)  # the whole worker: main process and pool
        workers[0].wait()
        job = wait_for_job(api, job_id, timeout=300)
    finally:
        for w in workers:
            stop_worker(w)
    assert job["status"] == "succeeded", job
    _assert_fanned_out_equals_local(job)
