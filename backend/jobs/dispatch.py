"""Sending a job to the workers: by task name, through the shared queue configuration.

The job row is committed first; `dispatched_at` records that its message went out. A
job whose message could not be sent (the broker is down) stays queued with no
`dispatched_at`: the outbox, which the workers' sweeper sends once the broker is back
(backend.jobs.leases)."""

from __future__ import annotations

from sqlalchemy import update

from backend.jobs.broker import producer
from backend.jobs.contracts import task_name
from backend.store.models import Job, utcnow


class QueueUnavailable(RuntimeError):
    """The broker could not take the message (the job stays in the outbox)."""


def _errors() -> tuple[type[BaseException], ...]:
    from kombu.exceptions import OperationalError

    return (OperationalError, ConnectionError, TimeoutError, OSError)


def send(job_ids: int | list[int], job_kind: str, queue: str | None = None) -> None:
    """Publish the message only (to `queue`, default the configured one); raises
    QueueUnavailable when the broker is unreachable."""
    try:
        producer().send_task(task_name(job_kind), args=[job_ids], queue=queue)
    except _errors() as exc:
        raise QueueUnavailable(f"the job queue is unavailable: {exc}") from exc


def dispatch(job_ids: int | list[int], job_kind: str, queue: str | None = None) -> None:
    """Queue the job(s) (rows already committed) on the task for `job_kind` (to `queue`,
    default the configured one) and record that they were sent. On QueueUnavailable the
    rows are left for the outbox."""
    from backend.store.db import get_engine

    send(job_ids, job_kind, queue)
    ids = job_ids if isinstance(job_ids, list) else [job_ids]
    with get_engine().begin() as conn:
        conn.execute(update(Job).where(Job.id.in_(ids)).values(dispatched_at=utcnow()))
