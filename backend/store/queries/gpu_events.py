"""GPU events of a trace (with their kernel names), its kernel name table, and the
per-rank stage timings."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from backend.store.models import GpuEvent, GpuKernelName, RankTiming
from backend.store.queries.scope import owned_trace


def gpu_event_window(
    session: Session,
    *,
    team_id: int,
    trace_id: int,
    rank: int | None = None,
    step: int | None = None,
    start_us: float | None = None,
    end_us: float | None = None,
    name_contains: str | None = None,
    limit: int,
) -> list[tuple[GpuEvent, str]]:
    """(event, kernel name) of the events overlapping [start_us, end_us) whose name
    holds `name_contains` (case-insensitive), in (rank, start) order: at most `limit`."""
    where = [GpuEvent.trace_id == trace_id, owned_trace(team_id, trace_id)]
    if rank is not None:
        where.append(GpuEvent.rank == rank)
    if step is not None:
        where.append(GpuEvent.step == step)
    if end_us is not None:
        where.append(GpuEvent.start_us < end_us)
    if start_us is not None:
        where.append(GpuEvent.start_us + GpuEvent.dur_us > start_us)
    if name_contains:
        where.append(func.lower(GpuKernelName.name).contains(name_contains.lower(), autoescape=True))
    rows = session.execute(
        select(GpuEvent, GpuKernelName.name)
        .join(
            GpuKernelName,
            (GpuKernelName.trace_id == GpuEvent.trace_id) & (GpuKernelName.name_id == GpuEvent.name_id),
        )
        .where(*where)
        .order_by(GpuEvent.rank, GpuEvent.start_us)
        .limit(limit)
    )
    return [(event, name) for event, name in rows]


def kernel_names(session: Session | Connection, *, team_id: int, trace_id: int) -> dict[int, str]:
    """{name id: kernel name} of the trace's GPU events (a worker's load asks it on its
    connection)."""
    where = (GpuKernelName.trace_id == trace_id, owned_trace(team_id, trace_id))
    return {
        name_id: name
        for name_id, name in session.execute(select(GpuKernelName.name_id, GpuKernelName.name).where(*where))
    }


def rank_timings(session: Session, *, team_id: int, trace_id: int, step: int | None = None) -> list[RankTiming]:
    """The trace's per-rank stage timings (of one step), in (step, rank) order."""
    where = [RankTiming.trace_id == trace_id, owned_trace(team_id, trace_id)]
    if step is not None:
        where.append(RankTiming.step == step)
    return list(session.scalars(select(RankTiming).where(*where).order_by(RankTiming.step, RankTiming.rank)))
