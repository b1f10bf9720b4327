"""A worker killed mid-job (SIGKILL, for real) leaves the job to be redelivered to
another worker, which finishes it (Redis broker: late acknowledgement + visibility
timeout). The embedded filesystem transport deletes a message when it is fetched, so
this guarantee is for the Redis deployment."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.conftest import start_worker, stop_worker, wait_for_job
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder


@pytest.fixture()
def kill_env(env, monkeypatch, tmp_path):
    from backend.settings import get_settings
    from backend.store.db import reset_caches

    # A queue of its own, so only the two workers started here take the job.
    queue = env["RLVR_QUEUE_NAME"] + "-kill"
    monkeypatch.setenv("RLVR_QUEUE_NAME", queue)
    reset_caches()
    monkeypatch.setattr(get_settings(), "inline_ingest_max_bytes", 0)
    return {**env, "RLVR_QUEUE_NAME": queue, "RLVR_VISIBILITY_TIMEOUT_S": "3"}


@pytest.mark.parametrize("backend_env", ["postgres"], indirect=True)
def test_killed_worker_job_is_finished_by_another(api, kill_env, tmp_path):
    per_step = synthetic_rows(steps=40, groups=640, n=8)  # 204,800 samples: a few seconds of work
    archive = zip_folder(write_packed_dir(tmp_path / "run", per_step))
    first = start_worker(kill_env, tmp_path / "first.log", concurrency=1)
    try:
        r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
        assert r.status_code == 202, r.text
        job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = api.get(f"/api/v1/jobs/{job_id}").json()
            if job["status"] == "running" and job["progress"] > 0:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"job never got going: {job}")
        os.killpg(first.pid, signal.SIGKILL)  # the whole worker: main process and pool
        first.wait()
        assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "running"
    finally:
        stop_worker(first)

    second = start_worker(kill_env, tmp_path / "second.log", concurrency=1)
    try:
        job = wait_for_job(api, job_id, timeout=120)
    finally:
        stop_worker(second)
    assert job["status"] == "succeeded", job
    assert job["attempts"] >= 2
    trace = api.get(f"/api/v1/traces/{trace_id}").json()
    assert trace["status"] == "ready"
    assert trace["n_samples"] == 40 * 640 * 8
