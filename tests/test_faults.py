"""Faults, for real: a worker SIGKILLed mid-job (both brokers), the broker down and back,
the database restarted during an upload. Each ends with the job done once, or failed
with a reason, and no partial rows; none leaves a job stuck.

Job leases are short here (RLVR_JOB_LEASE_S) so a lost worker is noticed in seconds.
Servers that are stopped are private ones the test starts on their own port (a
redis-server, a Postgres cluster in a temp folder); the shared ones are never touched.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from tests.conftest import start_worker, stop_worker, wait_for_job
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder

LEASE = {"RLVR_JOB_LEASE_S": "4", "RLVR_JOB_SWEEP_S": "1", "RLVR_JOB_REQUEUE_S": "30"}


def _sample_count(trace_id: int) -> int:
    from backend.store.db import new_session
    from backend.store.models import Sample

    with new_session() as s:
        return s.scalar(select(func.count()).select_from(Sample).where(Sample.trace_id == trace_id)) or 0


@pytest.fixture()
def fault_env(env, monkeypatch):
    """Short leases, a queue of this test's own (only workers started here take its
    jobs), every upload ingested by a worker."""
    from backend.settings import get_settings
    from backend.store.db import reset_caches

    queue = f"{env.get('RLVR_QUEUE_NAME', 'rlvr')}-faults-{os.getpid()}-{time.monotonic_ns()}"
    extra = {**LEASE, "RLVR_QUEUE_NAME": queue}
    for key, value in extra.items():
        monkeypatch.setenv(key, value)
    reset_caches()
    monkeypatch.setattr(get_settings(), "inline_ingest_max_bytes", 0)
    return {**env, **extra}


def _wait_running(api, job_id: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        if job["status"] == "running" and job["progress"] > 0:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job never got going: {job}")


# --------------------------------------------------------------------------- worker killed


def test_killed_worker_job_is_finished_by_another(api, fault_env, tmp_path):
    """SIGKILL the worker mid-ingestion: on Redis its message waits for the visibility
    timeout (an hour) and on the embedded transport it is gone, so it is the lease that
    brings the job back; the partial rows are removed before the retry."""
    per_step = synthetic_rows(steps=40, groups=640, n=8)  # 204,800 samples: a few seconds of work
    archive = zip_folder(write_packed_dir(tmp_path / "run", per_step))
    first = start_worker(fault_env, tmp_path / "first.log", concurrency=1)
    try:
        r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
        assert r.status_code == 202, r.text
        job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
        _wait_running(api, job_id)
        os.killpg(first.pid, signal.SIGKILL)  # the whole worker: main process and pool
        first.wait()
        killed_at = time.monotonic()
        assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "running"
        partial = _sample_count(trace_id)
    finally:
        stop_worker(first)

    second = start_worker(fault_env, tmp_path / "second.log", concurrency=1)
    try:
        job = wait_for_job(api, job_id, timeout=60)
    finally:
        stop_worker(second)
    recovered_s = time.monotonic() - killed_at
    print(f"\n[{fault_env['RLVR_BROKER_URL'][:5]}] killed with {partial:,} rows in; done {recovered_s:.1f} s later")
    assert job["status"] == "succeeded", job
    assert job["attempts"] == 2
    trace = api.get(f"/api/v1/traces/{trace_id}").json()
    assert trace["status"] == "ready"
    assert trace["n_samples"] == _sample_count(trace_id) == 40 * 640 * 8


def test_job_of_a_worker_lost_too_often_fails_with_reason(api, fault_env):
    """The sweeper gives up after job_max_attempts: failed, with the reason, no rows."""
    from backend.jobs.leases import sweep
    from backend.settings import get_settings
    from backend.store.db import get_engine, new_session
    from backend.store.models import Job, Trace, utcnow

    r = api.post("/api/v1/traces", files=[("files", ("run.zip", _small_zip(1), "application/zip"))])
    assert r.status_code == 202, r.text
    job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
    with new_session() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                status="running",
                worker="gone:1",
                attempts=get_settings().job_max_attempts,
                lease_until=utcnow() - timedelta(seconds=1),
            )
        )
        s.execute(update(Trace).where(Trace.id == trace_id).values(status="ingesting"))
        s.commit()
    assert sweep(get_engine())["failed"] == 1
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["status"] == "failed" and "gone:1" in job["error"] and "attempts" in job["error"]
    trace = api.get(f"/api/v1/traces/{trace_id}").json()
    assert trace["status"] == "failed" and trace["error"]
    assert _sample_count(trace_id) == 0


def test_reupload_of_a_stuck_trace_starts_it_again(api, fault_env):
    """A trace whose ingest job lost its worker is not handed back: it starts again."""
    from backend.store.db import new_session
    from backend.store.models import Job, utcnow

    archive = _small_zip(2)
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert r.status_code == 202, r.text
    job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
    again = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert again.status_code == 200 and again.json()["id"] == trace_id  # queued: alive
    with new_session() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(status="running", worker="gone:2", attempts=1, lease_until=utcnow() - timedelta(seconds=1))
        )
        s.commit()
    restarted = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert restarted.status_code == 202, restarted.text
    body = restarted.json()
    # A fresh trace and job (SQLite may reuse the ids of the stuck ones, deleted with them).
    assert body["job"]["status"] == "queued" and body["job"]["attempts"] == 0
    assert body["trace"]["status"] == "pending"
    with new_session() as s:
        assert s.scalar(select(func.count()).select_from(Job).where(Job.worker == "gone:2")) == 0


def _small_zip(seed: int) -> bytes:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        return zip_folder(write_packed_dir(Path(tmp) / "run", synthetic_rows(steps=2, groups=4, n=2, seed=seed)))
