"""`rlvr-explorer ingest` of a small GPU trace runs its analyses in its own process
(rlvr_explorer/cli/inline_analyses.py): the stored result is the one a worker stores
for the same trace, and above the threshold the analyses are left queued as before."""

from __future__ import annotations

import orjson
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from backend.settings import get_settings
from backend.store.db import new_session
from backend.store.models import Job, JobStatus
from rlvr_explorer.cli import app
from tests.format_writers import kineto_rank_trace

runner = CliRunner()


@pytest.fixture()
def env(env, monkeypatch):
    """Jobs sent to a queue no worker reads: the session's worker processes would
    otherwise race this process for them (and, by design, may win)."""
    from backend.store.db import reset_caches

    monkeypatch.setenv("RLVR_QUEUE_NAME", "small-gpu-test")
    reset_caches()
    yield env
    reset_caches()


def _ingest(path) -> dict:
    result = runner.invoke(app, ["ingest", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.output[result.output.rindex('{"id"') :].splitlines()[0])


def _gpu_job(trace_id: int) -> Job:
    with new_session() as s:
        return s.scalars(select(Job).where(Job.trace_id == trace_id, Job.kind == "gpu_timeline")).one()


def test_small_gpu_trace_is_analysed_in_the_ingest_process_as_a_worker_would(env, tmp_path, monkeypatch):
    here_file = tmp_path / "rank-0.json"
    here_file.write_bytes(kineto_rank_trace(0, steps=3, ops_per_step=40))
    here = _ingest(here_file)
    assert here["analysed_here"] == ["gpu_timeline"] and "gpu_timeline" not in here["queued_analyses"]
    done_here = _gpu_job(here["id"])
    assert done_here.status == JobStatus.SUCCEEDED and done_here.result

    # the same events (other bytes, so a new trace) over the threshold: queued, run by the worker's task
    monkeypatch.setattr(get_settings(), "inline_analyses_max_gpu_events", here["gpu_events"] - 1)
    queued_file = tmp_path / "rank-0-again.json"
    queued_file.write_bytes(here_file.read_bytes() + b"\n")
    queued = _ingest(queued_file)
    assert queued["analysed_here"] == [] and "gpu_timeline" in queued["queued_analyses"]
    assert _gpu_job(queued["id"]).status == JobStatus.QUEUED
    from workers.tasks import run_analyses

    run_analyses([_gpu_job(queued["id"]).id])
    by_worker = _gpu_job(queued["id"])
    assert by_worker.status == JobStatus.SUCCEEDED
    assert by_worker.result == done_here.result


def test_analyses_done_here_are_not_run_again_by_a_worker(env, tmp_path):
    path = tmp_path / "rank-0.json"
    path.write_bytes(kineto_rank_trace(0, steps=2, ops_per_step=20))
    job = _gpu_job(_ingest(path)["id"])
    from workers.tasks import run_analyses

    run_analyses([job.id])  # the message the ingest sent, delivered late
    again = _gpu_job(job.trace_id)
    assert again.status == JobStatus.SUCCEEDED and again.attempts == job.attempts and again.result == job.result
