"""Job leases: a running job is held by one worker for a short time, renewed while it runs.

- `claim` takes a queued job, or a running one whose lease expired, for this process
  (a compare-and-set on the row, so of two messages for one job only one runs it);
- the heartbeat, a thread in every process that runs jobs, renews the leases it holds
  every `job_lease_s / 3` seconds (and touches `traces.updated_at` of inline ingestions);
- the sweeper, a thread in every worker, queues again the jobs whose lease expired (their
  worker was killed or its machine is gone), removing an abandoned ingestion's rows first,
  fails them with the reason after `job_max_attempts`, sends queued jobs whose message
  was never sent (the outbox: the broker was down) or was lost (the broker holds none
  for them: `broker.queued_job_ids`), and runs once at start.

Timestamps are compared in Python-computed UTC, so workers' clocks must roughly agree
(a skew of a few seconds only shortens or lengthens leases by as much).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from itertools import groupby

from sqlalchemy import and_, case, or_, select, update
from sqlalchemy.engine import Engine

from backend.ingest.pipeline import Abandoned, Fence, clear_trace_rows
from backend.jobs.contracts import INGEST_KIND, TASK_NAMES, task_name
from backend.settings import Settings, get_settings
from backend.store.deletion import delete_traces
from backend.store.models import Job, JobStatus, Trace, TraceStatus, utcnow

log = logging.getLogger(__name__)

# The API commits a job and then sends it: the sweeper leaves fresh outbox rows this long.
OUTBOX_GRACE_S = 3.0
# A message just sent, or just fetched by a worker about to claim its job, is given this
# long before its job counts as having lost it.
MESSAGE_GRACE_S = 5.0


def worker_id() -> str:
    """Who holds a lease: host, process (a pool child has its own) and thread (a
    threads pool runs several jobs in one process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _lease(settings: Settings) -> timedelta:
    return timedelta(seconds=settings.job_lease_s)


def _engine() -> Engine:
    from backend.store.db import get_engine

    return get_engine()


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
                    lease_until=now + _lease(settings),
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
    engine = engine or _engine()
    got = claim(engine, job_ids)
    _heartbeat().hold(got, owner=worker_id())
    try:
        yield got
    except Exception as exc:
        # Whatever went wrong (often the database), the lease is let go at once so the
        # job is retried by the sweeper (or Celery's retry) instead of in `job_lease_s`.
        _heartbeat().drop(got)
        expire(engine, got, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        _heartbeat().drop(got)


@contextmanager
def sharing(job_ids: list[int], engine: Engine | None = None) -> Iterator[None]:
    """Renew the leases of running jobs this process works on without owning them (a
    step-range part of an analysis job), and leave them a fan-out lease when done."""
    engine = engine or _engine()
    _heartbeat().hold(job_ids, owner=None)
    try:
        yield
    finally:
        _heartbeat().drop(job_ids)
        extend(engine, job_ids, fanout_lease_s())


def fanout_lease_s() -> float:
    """The lease of a job whose step-range parts wait in the queue: no part started or
    finished for this long means they were lost (the job is then planned again)."""
    settings = get_settings()
    return max(settings.job_lease_s, settings.job_requeue_s)


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
                .values(lease_until=_at_least(until))
            )
    except Exception as exc:
        log.warning("could not extend the leases of jobs %s: %s", job_ids, exc)


def _at_least(until: datetime):
    return case((Job.lease_until > until, Job.lease_until), else_=until)


@contextmanager
def touching_trace(trace_id: int) -> Iterator[None]:
    """Keep `updated_at` of a trace ingested in this process (inline, without a job)
    fresh, so a re-upload can tell a live ingestion from one whose process died."""
    _heartbeat().hold_trace(trace_id)
    try:
        yield
    finally:
        _heartbeat().drop_trace(trace_id)


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
            .values(lease_until=_at_least(utcnow() + _lease(get_settings())))
        ).rowcount
        if not held:
            raise LeaseLost(f"job {job_id}: its lease was taken over by another worker")

    return check


def lost(job_id: int) -> bool:
    """Whether this process held the job's lease and another worker took it over."""
    return job_id in _heartbeat().lost


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


# --------------------------------------------------------------------------- heartbeat


class _Heartbeat:
    """One thread per process renewing the leases it holds."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.jobs: dict[int, str | None] = {}  # job id -> the claimant, None: shared
        self.traces: set[int] = set()
        self.lost: set[int] = set()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def _ensure_thread(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._run, name="job-lease-heartbeat", daemon=True)
            # it sleeps and renews leases in the database; a child forked beside it for pure
            # work (core.forking) never uses the database, so none of its locks
            self.thread.fork_safe = True  # type: ignore[attr-defined]
            self.thread.start()

    def hold(self, job_ids: list[int], owner: str | None) -> None:
        with self.lock:
            for job_id in job_ids:
                self.jobs[job_id] = owner
                self.lost.discard(job_id)
            if job_ids:
                self._ensure_thread()

    def drop(self, job_ids: list[int]) -> None:
        with self.lock:
            for job_id in job_ids:
                self.jobs.pop(job_id, None)
                self.lost.discard(job_id)

    def hold_trace(self, trace_id: int) -> None:
        with self.lock:
            self.traces.add(trace_id)
            self._ensure_thread()

    def drop_trace(self, trace_id: int) -> None:
        with self.lock:
            self.traces.discard(trace_id)

    def _run(self) -> None:
        while True:
            self.wake.wait(max(0.2, get_settings().job_lease_s / 3))
            self.wake.clear()
            try:
                self.renew()
            except Exception as exc:
                log.warning("lease heartbeat failed: %s", exc)

    def renew(self) -> None:
        with self.lock:
            owned = {j: o for j, o in self.jobs.items() if o is not None}
            shared = [j for j, o in self.jobs.items() if o is None]
            traces = list(self.traces)
        if not (owned or shared or traces):
            return
        now = utcnow()
        until = now + _lease(get_settings())
        shared_until = now + timedelta(seconds=fanout_lease_s())
        with _engine().begin() as conn:
            kept: set[int] = set()
            for owner in set(owned.values()):
                kept.update(
                    conn.execute(
                        update(Job)
                        .where(
                            Job.id.in_([j for j, o in owned.items() if o == owner]),
                            Job.status == JobStatus.RUNNING,
                            Job.worker == owner,
                        )
                        .values(lease_until=_at_least(until))
                        .returning(Job.id)
                    ).scalars()
                )
            gone = set(owned) - kept
            if gone:
                log.warning("lost the lease of jobs %s (taken over or finished)", sorted(gone))
                with self.lock:
                    self.lost.update(j for j in gone if j in self.jobs)
            if shared:
                conn.execute(
                    update(Job)
                    .where(Job.id.in_(shared), Job.status == JobStatus.RUNNING)
                    .values(lease_until=_at_least(shared_until))
                )
            if traces:
                conn.execute(update(Trace).where(Trace.id.in_(traces)).values(updated_at=now))


_heartbeats: dict[int, _Heartbeat] = {}
_heartbeats_lock = threading.Lock()


def _heartbeat() -> _Heartbeat:
    """This process's heartbeat (a forked pool child gets its own: threads do not fork)."""
    pid = os.getpid()
    with _heartbeats_lock:
        if pid not in _heartbeats:
            _heartbeats.clear()
            _heartbeats[pid] = _Heartbeat()
        return _heartbeats[pid]


# --------------------------------------------------------------------------- sweeper


def sweep(engine: Engine | None = None, settings: Settings | None = None, requeue_s: float | None = None) -> dict:
    """One pass: requeue (or fail) jobs with expired leases, send the outbox, resend
    queued jobs whose message went out more than `requeue_s` ago. Safe to run in every
    worker at once: each change is a compare-and-set on the job row."""
    engine = engine or _engine()
    settings = settings or get_settings()
    stats = {"requeued": 0, "failed": 0, "sent": 0, "resent": 0, "dropped": 0}
    now = utcnow()
    with engine.connect() as conn:
        expired = conn.execute(
            select(
                Job.id, Job.kind, Job.trace_id, Job.attempts, Job.worker, Job.lease_until, Job.message, Job.params
            ).where(
                Job.status == JobStatus.RUNNING,
                or_(
                    Job.lease_until < now,
                    and_(Job.lease_until.is_(None), Job.started_at < now - _lease(settings)),
                ),
            )
        ).all()
    for row in expired:
        outcome = _requeue_or_fail(engine, settings, row, now)
        if outcome:
            stats[outcome] += 1
    stats["dropped"] = _drop_dead_inline(engine, settings)
    stats["sent"] = _send_outbox(engine)
    stats["resent"] = _resend_lost(engine, settings, requeue_s if requeue_s is not None else settings.job_requeue_s)
    if any(stats.values()):
        log.info("job sweep: %s", stats)
    return stats


def _requeue_or_fail(engine: Engine, settings: Settings, row, now: datetime) -> str | None:
    still_expired = and_(
        Job.id == row.id,
        Job.status == JobStatus.RUNNING,
        Job.lease_until.is_(None) if row.lease_until is None else Job.lease_until == row.lease_until,
    )
    give_up = row.attempts >= settings.job_max_attempts
    reason = (
        f"abandoned after {row.attempts} attempts (job_max_attempts={settings.job_max_attempts}): "
        f"the last worker ({row.worker or 'unknown'}) stopped renewing its lease"
    )
    if row.message and row.message.startswith("attempt stopped: "):
        reason += f"; {row.message}"
    with engine.begin() as conn:
        if give_up:
            values = {"status": JobStatus.FAILED, "error": reason, "finished_at": now, "lease_until": None}
        else:
            values = {
                "status": JobStatus.QUEUED,
                "worker": None,
                "lease_until": None,
                "dispatched_at": None,
                "message": f"requeued: worker {row.worker or 'unknown'} lost (attempt {row.attempts})",
            }
        if not conn.execute(update(Job).where(still_expired).values(**values)).rowcount:
            return None  # another sweeper, or the worker itself, got there first
        if row.kind == INGEST_KIND and row.trace_id is not None:
            # The abandoned attempt's rows go now (SQLite commits per batch; Postgres
            # rolled them back already), so nothing half-loaded is ever read.
            clear_trace_rows(conn, row.trace_id)
            conn.execute(
                update(Trace)
                .where(Trace.id == row.trace_id)
                .values(
                    status=TraceStatus.FAILED if give_up else TraceStatus.PENDING,
                    error=reason if give_up else None,
                )
            )
    if give_up and row.kind == INGEST_KIND:
        from backend.ingest.uploads import discard, upload_folder

        discard(upload_folder(row.params or {}, get_settings()))  # the stored upload, kept for retries until now
    log.warning("job %s (%s) %s", row.id, row.kind, "failed: " + reason if give_up else "requeued")
    return "failed" if give_up else "requeued"


def _drop_dead_inline(engine: Engine, settings: Settings) -> int:
    """Delete traces ingested inline (no job) whose process stopped touching them two
    leases ago (it died, or its database connection did): their upload is gone with the
    request, so there is nothing to resume; their rows go with them."""
    cutoff = utcnow() - 2 * _lease(settings)
    no_job = ~select(Job.id).where(Job.trace_id == Trace.id, Job.kind == INGEST_KIND).exists()
    dead = and_(
        Trace.status.in_([TraceStatus.PENDING, TraceStatus.INGESTING]),
        Trace.updated_at < cutoff,
        no_job,
    )
    with engine.begin() as conn:
        ids = delete_traces(conn, dead)
        if ids:
            log.warning("dropped traces %s: their inline ingestion stopped", ids)
    return len(ids)


def _send(engine: Engine, rows: list, condition_of) -> int:
    """Send jobs (grouped per task and trace, as the API sends analyses) after marking
    them sent with a compare-and-set, so two sweepers do not both send one."""
    from backend.jobs.dispatch import QueueUnavailable, send

    sent = 0

    def key(r) -> tuple[str, str, int]:
        # Analyses of one trace go as one task (it reads the columns once for all), to
        # the queue the job was made for (its deployment's).
        task = task_name(r.kind)
        return (
            (r.queue or "", task, r.trace_id or 0) if task == TASK_NAMES["analyses"] else (r.queue or "", task, -r.id)
        )

    for _key, group in groupby(sorted(rows, key=key), key=key):
        group = list(group)
        now = utcnow()
        mine = []
        with engine.begin() as conn:
            for r in group:
                if conn.execute(update(Job).where(condition_of(r)).values(dispatched_at=now)).rowcount:
                    mine.append(r)
        if not mine:
            continue
        try:
            send([r.id for r in mine], mine[0].kind, mine[0].queue)
        except QueueUnavailable as exc:
            log.warning("job queue unavailable, jobs %s stay in the outbox: %s", [r.id for r in mine], exc)
            with engine.begin() as conn:
                conn.execute(
                    update(Job)
                    .where(Job.id.in_([r.id for r in mine]), Job.dispatched_at == now)
                    .values(dispatched_at=None)
                )
            return sent
        sent += len(mine)
    return sent


def _send_outbox(engine: Engine) -> int:
    cutoff = utcnow() - timedelta(seconds=OUTBOX_GRACE_S)
    with engine.connect() as conn:
        rows = conn.execute(
            select(Job.id, Job.kind, Job.trace_id, Job.queue).where(
                Job.status == JobStatus.QUEUED,
                Job.dispatched_at.is_(None),
                or_(Job.created_at < cutoff, Job.attempts > 0),
            )
        ).all()
    return _send(
        engine, rows, lambda r: and_(Job.id == r.id, Job.status == JobStatus.QUEUED, Job.dispatched_at.is_(None))
    )


def _resend_lost(engine: Engine, settings: Settings, requeue_s: float) -> int:
    """Send again queued jobs whose message is gone. On this deployment's queue, when the
    broker can be inspected: those it holds no message for, sent over MESSAGE_GRACE_S
    ago. Otherwise (another queue, or no inspection): those sent over `requeue_s` ago."""
    from backend.jobs.broker import queued_job_ids

    now = utcnow()
    with engine.connect() as conn:
        rows = conn.execute(
            select(Job.id, Job.kind, Job.trace_id, Job.dispatched_at, Job.queue).where(
                Job.status == JobStatus.QUEUED, Job.dispatched_at < now - timedelta(seconds=MESSAGE_GRACE_S)
            )
        ).all()
    if not rows:
        return 0
    ours = {None, settings.queue_name}
    held = queued_job_ids(settings) if any(r.queue in ours for r in rows) else None
    stale = now - timedelta(seconds=requeue_s)

    def lost(r) -> bool:
        if held is not None and r.queue in ours:
            return r.id not in held
        return aware(r.dispatched_at) < stale

    return _send(
        engine,
        [r for r in rows if lost(r)],
        lambda r: and_(Job.id == r.id, Job.status == JobStatus.QUEUED, Job.dispatched_at == r.dispatched_at),
    )


def aware(t: datetime) -> datetime:
    """A timestamp read back from the database as aware UTC (SQLite returns it naive)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


class Sweeper:
    """The periodic sweep in a worker's main process: once at start (a queued job whose
    message was lost with a dead worker is sent again then), then every `job_sweep_s`."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="job-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()

    def _run(self) -> None:
        from backend.store.db import make_engine

        settings = get_settings()
        # An engine of its own: pool processes forked later from this one (a replaced
        # pool child) must not inherit connections in use here, as the cached one would.
        engine = make_engine(settings.db_url)
        first = True
        try:
            while not self.stop_event.is_set():
                try:
                    # At start, anything queued and sent before this worker existed may
                    # have lost its message: resend what is older than one lease.
                    requeue_s = min(settings.job_lease_s, settings.job_requeue_s) if first else None
                    sweep(engine, settings, requeue_s=requeue_s)
                    first = False
                except Exception as exc:
                    log.warning("job sweep failed: %s", exc)
                self.stop_event.wait(settings.job_sweep_s)
        finally:
            engine.dispose()
