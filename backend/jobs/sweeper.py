"""The sweeper, a thread in every worker: queues again the jobs whose lease expired
(their worker was killed or its machine is gone), removing an abandoned ingestion's rows
first, fails them with the reason after `job_max_attempts`, sends queued jobs whose
message was never sent (the outbox: the broker was down) or was lost (the broker holds
none for them: `broker.queued_job_ids`), and runs once at start."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from itertools import groupby
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.engine import Engine

from backend.jobs import presence
from backend.jobs.contracts import INGEST_KIND, TASK_NAMES, task_name, upload_folder
from backend.jobs.lease_terms import aware, jobs_engine, lease_length, worker_id
from backend.settings import Settings, get_settings
from backend.store.deletion import clear_trace_rows, delete_traces
from backend.store.models import Job, JobStatus, Trace, TraceStatus, utcnow

log = logging.getLogger(__name__)


# The API commits a job and then sends it: the sweeper leaves fresh outbox rows this long.
OUTBOX_GRACE_S = 3.0
# A message just sent, or just fetched by a worker about to claim its job, is given this
# long before its job counts as having lost it.
MESSAGE_GRACE_S = 5.0


def sweep(engine: Engine | None = None, settings: Settings | None = None, requeue_s: float | None = None) -> dict:
    """One pass: requeue (or fail) jobs with expired leases, send the outbox, resend
    queued jobs whose message went out more than `requeue_s` ago. Safe to run in every
    worker at once: each change is a compare-and-set on the job row."""
    engine = engine or jobs_engine()
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
                    and_(Job.lease_until.is_(None), Job.started_at < now - lease_length(settings)),
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
    folder = upload_folder(row.params or {}, get_settings()) if row.kind == INGEST_KIND else None
    if give_up and folder is not None:
        shutil.rmtree(folder, ignore_errors=True)  # the stored upload, kept for retries until now
    log.warning("job %s (%s) %s", row.id, row.kind, "failed: " + reason if give_up else "requeued")
    return "failed" if give_up else "requeued"


def _drop_dead_inline(engine: Engine, settings: Settings) -> int:
    """Delete traces ingested inline (no job) whose process stopped touching them two
    leases ago (it died, or its database connection did): their upload is gone with the
    request, so there is nothing to resume; their rows go with them. Staleness is judged
    by the DELETE itself, under the write lock (SQLite) or on the row as committed
    (Postgres): an ingestion whose commit touched its trace while this waited is kept."""
    cutoff = utcnow() - 2 * lease_length(settings)
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


def _send(engine: Engine, rows: Sequence[Any], condition_of: Callable[[Any], ColumnElement[bool]]) -> int:
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
                    presence.mark_alive(settings, worker_id())
                except Exception as exc:
                    log.warning("job sweep failed: %s", exc)
                self.stop_event.wait(settings.job_sweep_s)
        finally:
            presence.mark_gone(settings, worker_id())
            engine.dispose()
