"""Jobs of a team: lists (without their results unless asked), one, deletion, and the
jobs of a trace."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Select, delete, func, select
from sqlalchemy.orm import Session, defer

from backend.store.models import Job, JobStatus


def jobs_query(
    *,
    team_id: int,
    trace_id: int | None = None,
    kind: str | None = None,
    kinds: Iterable[str] | None = None,
    status: str | None = None,
    include_result: bool,
) -> Select[Job]:
    """The team's jobs matching every given filter, newest first; the result column is
    loaded only when asked (a result can be megabytes; reading it by mistake raises)."""
    where = [Job.team_id == team_id]
    if trace_id is not None:
        where.append(Job.trace_id == trace_id)
    if kind is not None:
        where.append(Job.kind == kind)
    if kinds is not None:
        where.append(Job.kind.in_(list(kinds)))
    if status:
        where.append(Job.status == status)
    query = select(Job).where(*where).order_by(Job.id.desc())
    return query if include_result else query.options(defer(Job.result, raiseload=True))


def list_jobs(
    session: Session,
    *,
    team_id: int,
    trace_id: int | None = None,
    kind: str | None = None,
    kinds: Iterable[str] | None = None,
    status: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    include_result: bool,
) -> list[Job]:
    """A page of `jobs_query`."""
    query = jobs_query(
        team_id=team_id, trace_id=trace_id, kind=kind, kinds=kinds, status=status, include_result=include_result
    )
    return list(session.scalars(query.limit(limit).offset(offset)))


def get_job(session: Session, *, team_id: int, job_id: int, kind: str | None = None) -> Job | None:
    """The team's job (of this kind), or None (also for another team's)."""
    where = [Job.id == job_id, Job.team_id == team_id]
    if kind is not None:
        where.append(Job.kind == kind)
    return session.scalars(select(Job).where(*where)).first()


def delete_job(session: Session, *, team_id: int, job_id: int) -> None:
    """Delete the team's job (its parts go with it); the caller commits."""
    session.execute(delete(Job).where(Job.id == job_id, Job.team_id == team_id))


def trace_jobs_of_kind(session: Session, *, team_id: int, trace_id: int, kind: str) -> list[Job]:
    """The trace's jobs of one kind, newest first, their results deferred (read when
    touched: only the one chosen is)."""
    query = select(Job).where(Job.team_id == team_id, Job.trace_id == trace_id, Job.kind == kind)
    return list(session.scalars(query.order_by(Job.id.desc()).options(defer(Job.result))))


def latest_succeeded_job_id(session: Session, *, team_id: int, trace_id: int, kind: str, params_key: str) -> int | None:
    """The newest succeeded job of the trace with this kind and parameters."""
    return session.scalars(
        select(Job.id)
        .where(
            Job.team_id == team_id,
            Job.trace_id == trace_id,
            Job.kind == kind,
            Job.status == JobStatus.SUCCEEDED,
            Job.params_key == params_key,
        )
        .order_by(Job.id.desc())
        .limit(1)
    ).first()


def job_result(session: Session, *, team_id: int, job_id: int) -> dict[str, Any] | None:
    """The result of the team's job (None: none, or no such job)."""
    return session.scalar(select(Job.result).where(Job.id == job_id, Job.team_id == team_id))


def latest_job_per_trace(session: Session, *, team_id: int, trace_ids: Iterable[int], kind: str) -> dict[int, int]:
    """{trace id: the id of its latest job of this kind} (one query for a page of traces)."""
    rows = session.execute(
        select(Job.trace_id, func.max(Job.id))
        .where(Job.team_id == team_id, Job.trace_id.in_(list(trace_ids)), Job.kind == kind)
        .group_by(Job.trace_id)
    )
    return {trace_id: job_id for trace_id, job_id in rows if trace_id is not None}


def recent_job_params(session: Session, *, team_id: int, kind: str, limit: int) -> list[dict[str, Any] | None]:
    """The parameters of the team's latest jobs of this kind, newest first."""
    query = select(Job.params).where(Job.team_id == team_id, Job.kind == kind)
    return list(session.scalars(query.order_by(Job.id.desc()).limit(limit)))


def trace_job_refs(session: Session, *, team_id: int, trace_id: int) -> Sequence[tuple[str, int]]:
    """(kind, id) of every job of the trace: what names the files they wrote."""
    rows = session.execute(select(Job.kind, Job.id).where(Job.team_id == team_id, Job.trace_id == trace_id))
    return [(kind, job_id) for kind, job_id in rows]
