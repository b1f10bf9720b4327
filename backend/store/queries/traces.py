"""Traces of a team: one, a filtered page, and a new live trace."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.store.models import Trace, TraceStatus


def get_trace(session: Session, *, team_id: int, trace_id: int) -> Trace | None:
    """The team's trace, or None (also for another team's)."""
    return session.scalars(select(Trace).where(Trace.id == trace_id, Trace.team_id == team_id)).first()


def escape_like(text: str) -> str:
    """`text` for a LIKE pattern with ESCAPE '\\': its %, _ and \\ match themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _where(team_id: int, status: str | None, name_contains: str | None) -> list:
    where = [Trace.team_id == team_id]
    if status:
        where.append(Trace.status == status)
    if name_contains:
        where.append(Trace.name.ilike(f"%{escape_like(name_contains)}%", escape="\\"))
    return where


def count_traces(session: Session, *, team_id: int, status: str | None = None, name_contains: str | None = None) -> int:
    """How many of the team's traces have this status and a name holding this literal
    substring (case-insensitive)."""
    where = _where(team_id, status, name_contains)
    return session.scalar(select(func.count()).select_from(Trace).where(*where)) or 0


def list_traces(
    session: Session, *, team_id: int, status: str | None, name_contains: str | None, limit: int, offset: int
) -> tuple[int, list[Trace]]:
    """(total, page): the team's traces `count_traces` counts, newest first."""
    total = count_traces(session, team_id=team_id, status=status, name_contains=name_contains)
    where = _where(team_id, status, name_contains)
    page = session.scalars(select(Trace).where(*where).order_by(Trace.id.desc()).limit(limit).offset(offset))
    return total, list(page)


def add_live_trace(session: Session, *, team_id: int, name: str, meta: dict[str, Any]) -> Trace:
    """A new empty trace of the team, ready and marked live (steps stream into it); the
    caller commits."""
    trace = Trace(
        team_id=team_id,
        name=name,
        status=TraceStatus.READY,
        content_hash="live-" + uuid.uuid4().hex,
        size_bytes=0,
        meta=meta,
        live=True,
    )
    session.add(trace)
    return trace
