"""Large uploads are ingested by a real worker process: 202, job progress, ready or failed.

Runs on both deployment shapes: SQLite + filesystem transport, and Postgres + Redis."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from backend.store.db import new_session
from backend.store.models import Sample
from tests.conftest import wait_for_job
from tests.helpers import jsonl, synthetic_rows, write_packed_dir, zip_folder


@pytest.fixture()
def big_uploads(monkeypatch, env):
    from backend.settings import get_settings

    # Every upload counts as large here, so it goes to the worker.
    monkeypatch.setattr(get_settings(), "inline_ingest_max_bytes", 0)


def test_large_upload_ingested_by_worker(api, worker, big_uploads, tmp_path):
    per_step = synthetic_rows(steps=5, groups=32, n=4)
    r = api.post(
        "/api/v1/traces",
        files=[("files", ("run.zip", zip_folder(write_packed_dir(tmp_path / "run", per_step)), "application/zip"))],
    )
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["trace"]["status"] == "pending"
    job = wait_for_job(api, body["job"]["id"])
    assert job["status"] == "succeeded", job
    assert job["progress"] == 1.0
    assert job["started_at"] and job["finished_at"]
    trace = api.get(f"/api/v1/traces/{body['trace']['id']}").json()
    assert trace["status"] == "ready"
    assert trace["n_samples"] == 5 * 32 * 4
    assert trace["job_id"] == job["id"]


def test_bad_large_upload_fails_job_with_reason(api, worker, big_uploads):
    rows = synthetic_rows(steps=1, groups=4, n=2)[0]
    body = jsonl(rows) + b'{"step": 0, "input": -3, "output": [1, 2], "n_sampling": 2}\n'
    r = api.post("/api/v1/traces", files=[("files", ("packed_lengths_step_0.jsonl", body, "application/json"))])
    assert r.status_code == 202
    trace_id = r.json()["trace"]["id"]
    job = wait_for_job(api, r.json()["job"]["id"])
    assert job["status"] == "failed"
    assert "packed_lengths_step_0.jsonl" in job["error"] and "line 5" in job["error"]
    trace = api.get(f"/api/v1/traces/{trace_id}").json()
    assert trace["status"] == "failed" and "input" in trace["error"]
    with new_session() as s:
        assert s.scalar(select(func.count()).select_from(Sample).where(Sample.trace_id == trace_id)) == 0
    assert api.get(f"/api/v1/traces/{trace_id}/steps").status_code == 409
