"""Analysis jobs from the API's side: validate, reuse a finished identical job, or queue."""

from __future__ import annotations

from sqlalchemy.orm import Session

from backend.jobs import ANALYSIS_TASK, create_job, dispatch, find_reusable
from backend.models import Job, Trace
from backend.trace_data import available_columns
from workers.analysis.gpu_report import DEFAULTS as GPU_DEFAULTS
from workers.analysis.registry import ANALYSES, default_analyses, resolve_params

GPU_KIND = "gpu_timeline"
ANALYSIS_KINDS = (*ANALYSES, GPU_KIND)


def resolved_params(kind: str, params: dict) -> dict:
    """Defaults filled in (so equal requests share a key); ValueError names a bad field."""
    if kind == GPU_KIND:
        unknown = set(params) - set(GPU_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown parameter(s) for analysis '{kind}': {', '.join(sorted(unknown))}")
        return {**GPU_DEFAULTS, **params}
    if kind not in ANALYSES:
        raise ValueError(f"unknown analysis '{kind}'; known: {', '.join(ANALYSIS_KINDS)}")
    return resolve_params(kind, params)


def applicable(kind: str, trace: Trace) -> bool:
    if kind == GPU_KIND:
        return bool(trace.n_gpu_events)
    return ANALYSES[kind].applicable(available_columns(trace))


def request_analysis(session: Session, trace: Trace, kind: str, params: dict) -> tuple[Job, bool]:
    """(job, created): an identical queued/running/finished job is reused."""
    full = resolved_params(kind, params)
    if not applicable(kind, trace):
        raise ValueError(f"analysis '{kind}' does not apply to trace {trace.id}: it lacks the data it needs")
    existing = find_reusable(session, trace.id, kind, full)
    if existing is not None:
        return existing, False
    job = create_job(session, team_id=trace.team_id, trace_id=trace.id, kind=kind, params=full)
    session.commit()
    dispatch([job.id], ANALYSIS_TASK)
    return job, True


def queue_default_analyses(session: Session, trace: Trace) -> list[Job]:
    """The default set for a trace that just became ready, run as one task that reads the
    columns once for all of them."""
    kinds = default_analyses(available_columns(trace))
    if trace.n_gpu_events:
        kinds.append(GPU_KIND)
    jobs = []
    for kind in kinds:
        full = resolved_params(kind, {})
        if find_reusable(session, trace.id, kind, full) is None:
            jobs.append(create_job(session, team_id=trace.team_id, trace_id=trace.id, kind=kind, params=full))
    session.commit()
    if jobs:
        dispatch([j.id for j in jobs], ANALYSIS_TASK)
    return jobs
