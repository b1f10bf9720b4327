"""Jobs: rows in the Job table that a Celery worker runs. The row is the source of
truth for status, progress, error and result; Celery only carries the job id."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from backend.settings import get_settings
from backend.store.models import Job, JobStatus, utcnow


def params_key(kind: str, params: dict[str, Any]) -> str:
    blob = json.dumps({"kind": kind, "params": params}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def create_job(session: Session, *, team_id: int, trace_id: int | None, kind: str, params: dict | None = None) -> Job:
    params = params or {}
    job = Job(
        team_id=team_id,
        trace_id=trace_id,
        kind=kind,
        params=params,
        params_key=params_key(kind, params),
        status=JobStatus.QUEUED,
        progress=0.0,
        queue=get_settings().queue_name,
    )
    session.add(job)
    session.flush()
    return job


def find_reusable(session: Session, trace_id: int, kind: str, params: dict) -> Job | None:
    """A queued, running or succeeded job with the same kind and parameters."""
    return session.scalars(
        select(Job)
        .where(
            Job.trace_id == trace_id,
            Job.kind == kind,
            Job.params_key == params_key(kind, params),
            Job.status != JobStatus.FAILED,
        )
        .order_by(Job.id.desc())
    ).first()


def _set(engine: Engine, job_id: int, **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(update(Job).where(Job.id == job_id).values(**values))


def set_progress(engine: Engine, job_id: int, progress: float, message: str | None = None) -> None:
    _set(engine, job_id, progress=float(progress), message=message)


def mark_succeeded(engine: Engine, job_id: int, result: dict | None, message: str | None = None) -> None:
    _set(
        engine,
        job_id,
        status=JobStatus.SUCCEEDED,
        progress=1.0,
        result=result,
        message=message,
        finished_at=utcnow(),
    )


def mark_failed(engine: Engine, job_id: int, error: str) -> None:
    _set(engine, job_id, status=JobStatus.FAILED, error=error, finished_at=utcnow())
