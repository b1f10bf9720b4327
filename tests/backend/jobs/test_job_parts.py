"""A job's parts (backend/jobs/parts.py), on both databases: a part delivered twice
counts once, the last one gets every result in index order with its host, a failed job
reduces nothing, and planning again starts the count over."""

from __future__ import annotations

import socket

from backend.jobs.parts import complete_part, open_parts, part_span
from backend.jobs.state import mark_failed
from backend.store.db import get_engine, new_session, session_scope
from backend.store.models import Job


def _job(team_key) -> int:
    from backend.auth import team_for_key
    from backend.jobs.state import create_job

    with session_scope() as session:
        team = team_for_key(session, team_key)
        return create_job(session, team_id=team.id, trace_id=None, kind="advice", params={}).id


def _count(job_id: int) -> tuple[int, int, float, str | None]:
    with new_session() as session:
        job = session.get_one(Job, job_id)
        return job.parts_done, job.parts_total, job.progress, job.message


def test_parts_count_once_and_reduce_in_order(team_key):
    job_id = _job(team_key)
    open_parts([job_id], [(0, 1), (1, 2), (2, 3)])
    assert part_span(job_id, 1) == (1, 2) and _count(job_id)[:2] == (0, 3)
    assert complete_part(job_id, 2, {"rows": [2]}) is None
    assert complete_part(job_id, 2, {"rows": ["again"]}) is None  # redelivered: not counted
    assert complete_part(job_id, 0, {"rows": [0]}, "parts of the sweep") is None
    done_, total, progress, message = _count(job_id)
    assert (done_, total, message) == (2, 3, "2 of 3 parts of the sweep done") and abs(progress - 2 / 3) < 1e-9
    done = complete_part(job_id, 1, {"rows": [1]})
    assert done is not None
    assert done.results == [{"rows": [0]}, {"rows": [1]}, {"rows": [2]}]
    assert done.workers == [socket.gethostname()] * 3
    assert complete_part(job_id, 1, {"rows": [1]}) is None  # the count is complete once
    # planned again (its lease expired): the count starts over
    open_parts([job_id], [(0, 1), (1, 2)])
    assert _count(job_id)[:2] == (0, 2)
    assert complete_part(job_id, 0, {"rows": [0]}) is None


def test_a_failed_job_reduces_nothing(team_key):
    job_id = _job(team_key)
    open_parts([job_id], [(0, 1), (1, 2)])
    assert complete_part(job_id, 0, {}) is None
    mark_failed(get_engine(), job_id, "part 1 crashed")
    assert complete_part(job_id, 1, {}) is None
