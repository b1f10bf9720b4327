"""The in-worker path of analysis jobs: step-range chunks read in a background thread,
analysed as they arrive and reduced, give the result of one whole-trace run."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from backend.ingest.service import accept_upload
from backend.ingest.uploads import local_files
from backend.jobs.state import create_job
from backend.settings import get_settings
from backend.store.db import get_engine, new_session, session_scope
from backend.store.models import Job, Trace
from backend.store.trace_tables import load_trace_data
from core.analysis.registry import ANALYSES, resolve_params, run_analysis
from core.jsonable import json_safe
from tests.helpers import synthetic_rows, write_packed_dir
from workers.runners import analyses as analysis_runner


@pytest.fixture()
def trace(team_key, tmp_path) -> Trace:
    from backend.auth import team_for_key

    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=7, groups=12, n=4))
    with session_scope() as session:
        team_id = team_for_key(session, team_key).id
        outcome = accept_upload(
            session,
            get_settings(),
            team_id=team_id,
            stored=local_files([folder]),
            name="runner",
            forced_format=None,
            max_response_len=None,
            inline=True,
        )
        session.expunge(outcome.trace)
    return outcome.trace


def test_chunked_run_in_one_worker_equals_whole_run(trace, monkeypatch):
    kinds = ["lengths", "longtail", "imbalance"]
    with session_scope() as session:
        jobs = [
            create_job(session, team_id=trace.team_id, trace_id=trace.id, kind=k, params=resolve_params(k, {}))
            for k in kinds
        ]
        for job in jobs:
            session.expunge(job)
    # 7 steps x 48 samples in chunks of ~100 samples: several reads overlapped with analyses.
    monkeypatch.setattr(analysis_runner, "PIPELINE_CHUNK_SAMPLES", 100)
    steps, shared = analysis_runner._steps_and_shared_params(jobs, trace)
    analysis_runner._run_here(jobs, trace, steps, shared)
    with new_session() as session:
        stored = {j.kind: j for j in session.scalars(select(Job).where(Job.id.in_([j.id for j in jobs])))}
    for kind in kinds:
        job = stored[kind]
        assert job.status == "succeeded", job.error
        assert job.progress == 1.0
        with get_engine().connect() as conn:
            data = load_trace_data(conn, trace, ANALYSES[kind].tables)
        direct = json_safe(run_analysis(kind, data, shared[str(job.id)]))
        assert job.result == direct, kind
