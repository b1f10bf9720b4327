"""`ingest` of a small GPU trace runs its default analyses in its own process: starting a
worker's interpreter and imports costs more than the analyses themselves. The jobs stay
ordinary queued jobs (already sent to the queue), claimed here like a worker would, so a
worker that gets their message first runs them instead and one that gets it after finds
them done."""

from __future__ import annotations

from backend.settings import Settings


def is_small(n_gpu_events: int, n_samples: int, settings: Settings) -> bool:
    """A GPU trace whose analyses are quicker here than in a worker (and never split
    into step-range parts, which only workers run)."""
    return 0 < n_gpu_events <= settings.inline_analyses_max_gpu_events and n_samples <= settings.analysis_part_samples


def run_queued_here(trace_id: int, settings: Settings) -> list[str]:
    """Run the small trace's queued analysis jobs here; the kinds that succeeded."""
    from sqlalchemy import select

    from backend.jobs import leases
    from backend.store.db import new_session
    from backend.store.models import Job, JobStatus, Trace
    from core.analysis.registry import ANALYSES
    from workers.runners.analyses import plan_and_run

    with new_session() as session:
        trace = session.get(Trace, trace_id)
        if trace is None or not is_small(trace.n_gpu_events or 0, trace.n_samples or 0, settings):
            return []
        ids = list(
            session.scalars(
                select(Job.id).where(
                    Job.trace_id == trace_id, Job.kind.in_(tuple(ANALYSES)), Job.status == JobStatus.QUEUED
                )
            )
        )
    if not ids:
        return []
    with leases.running(ids) as claimed:
        if claimed:
            plan_and_run(claimed, send_part=_no_parts)
    with new_session() as session:
        done = session.scalars(select(Job.kind).where(Job.id.in_(ids), Job.status == JobStatus.SUCCEEDED))
        return list(dict.fromkeys(done))


def _no_parts(*_args, **_kwargs) -> None:
    # is_small keeps to one part; a split would have been sent by a worker
    raise RuntimeError("a small trace's analyses do not split into parts")
