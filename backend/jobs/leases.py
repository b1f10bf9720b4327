"""Job leases: a running job is held by one worker for a short time, renewed while it runs.

- `claim` takes a queued job, or a running one whose lease expired, for this process
  (a compare-and-set on the row, so of two messages for one job only one runs it);
- `running` / `sharing` hold leases for a block (the heartbeat, heartbeat.py, renews them
  every `job_lease_s / 3` seconds), `fence` checks ownership inside a transaction;
- the sweeper (sweeper.py) queues again the jobs whose lease expired, fails them after
  `job_max_attempts`, and sends the outbox.

Timestamps are compared in Python-computed UTC, so workers' clocks must roughly agree
(a skew of a few seconds only shortens or lengthens leases by as much).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import and_, or_, update
from sqlalchemy.engine import Engine

from backend.jobs.fence import Abandoned, Fence
from backend.jobs.heartbeat import heartbeat
from backend.jobs.lease_terms import at_least, fanout_lease_s, jobs_engine, lease_length, worker_id
from backend.settings import get_settings
from backend.store.models import Job, JobStatus, utcnow

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- claiming


class LeaseLost(Abandoned):
    """Another worker took the job over (this one stopped renewing in time): stop."""


def claim(engine: Engine, job_ids: list[int]) -> list[int]:
    """Mark the jobs running under this process's lease; returns those it got (a job that
    finished, failed, or runs under another worker's live lease is left alone)."""
    settings = get_settings()
    me = worker_id()
    got = []
    for job_id in job_ids:
        now = utcnow()
        claimable = or_(
            Job.status == JobStatus.QUEUED,
            and_(
                Job.status == JobStatus.RUNNING,
                or_(Job.lease_until.is_(None), Job.lease_until < now, Job.worker == me),
            ),
        )
        with engine.begin() as conn:
            n = conn.execute(
                update(Job)
                .where(Job.id == job_id, claimable)
                .values(
                    status=JobStatus.RUNNING,
                    started_at=now,
                    attempts=Job.attempts + 1,
                    error=None,
                    worker=me,
                    lease_until=now + lease_length(settings),
                )
            ).rowcount
        if n:
            got.append(job_id)
        else:
            log.info("job %s not claimed (finished, or held by another worker)", job_id)
    return got


@contextmanager
def running(job_ids: list[int], engine: Engine | None = None) -> Iterator[list[int]]:
    """Claim the jobs and hold their leases for the block; yields the claimed ids."""
    engine = engine or jobs_engine()
    got = claim(engine, job_ids)
    heartbeat().hold(got, owner=worker_id())
    try:
        yield got
    except Exception as exc:
        # Whatever went wrong (often the database), the lease is let go at once so the
        # job is retried by the sweeper (or Celery's retry) instead of in `job_lease_s`.
        heartbeat().drop(got)
        expire(engine, got, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        heartbeat().drop(got)


@contextmanager
def sharing(job_ids: list[int], engine: Engine | None = None) -> Iterator[None]:
    """Renew the leases of running jobs this process works on without owning them (a
    step-range part of an analysis job), and leave them a fan-out lease when done."""
    engine = engine or jobs_engine()
    heartbeat().hold(job_ids, owner=None)
    try:
        yield
    finally:
        heartbeat().drop(job_ids)
        extend(engine, job_ids, fanout_lease_s())


def extend(engine: Engine, job_ids: list[int], seconds: float) -> None:
    """Make running jobs' leases last at least `seconds` from now (never shortened)."""
    if not job_ids:
        return
    until = utcnow() + timedelta(seconds=seconds)
    try:
        with engine.begin() as conn:
            conn.execute(
                update(Job)
                .where(Job.id.in_(job_ids), Job.status == JobStatus.RUNNING)
                .values(lease_until=at_least(until))
            )
    except Exception as exc:
        log.warning("could not extend the leases of jobs %s: %s", job_ids, exc)


@contextmanager
def touching_trace(trace_id: int) -> Iterator[None]:
    """Keep `updated_at` of a trace ingested in this process (inline, without a job)
    fresh, so a re-upload can tell a live ingestion from one whose process died."""
    heartbeat().hold_trace(trace_id)
    try:
        yield
    finally:
        heartbeat().drop_trace(trace_id)


def fence(job_id: int) -> Fence:
    """A fence for work this thread does under the job's lease: in a transaction, it
    renews the lease if still held and raises LeaseLost if not, so that transaction
    commits only while the job is this worker's (and the sweeper, which compares the
    lease it saw expire, cannot requeue it meanwhile)."""
    me = worker_id()

    def check(conn) -> None:
        held = conn.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.RUNNING, Job.worker == me)
            .values(lease_until=at_least(utcnow() + lease_length(get_settings())))
        ).rowcount
        if not held:
            raise LeaseLost(f"job {job_id}: its lease was taken over by another worker")

    return check


def lost(job_id: int) -> bool:
    """Whether this process held the job's lease and another worker took it over."""
    return job_id in heartbeat().lost


def expire(engine: Engine, job_ids: list[int], why: str | None = None) -> None:
    """Let go of running jobs' leases now, noting why in `message` (best effort: the
    database may be the trouble)."""
    if not job_ids:
        return
    try:
        with engine.begin() as conn:
            conn.execute(
                update(Job)
                .where(Job.id.in_(job_ids), Job.status == JobStatus.RUNNING, Job.worker == worker_id())
                .values(lease_until=utcnow(), message=f"attempt stopped: {why}"[:2000] if why else Job.message)
            )
    except Exception as exc:
        log.warning("could not release the leases of jobs %s: %s", job_ids, exc)
