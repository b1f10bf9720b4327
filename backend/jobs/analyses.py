"""Analysis jobs from the API's side: validate, reuse a finished identical job, or queue.

Which analyses exist, what they read and whether they apply to a trace is the registry's
word (core.analysis.registry); this module only turns that into job rows."""

from __future__ import annotations

import logging

from sqlalchemy import func
from sqlalchemy.orm import Session

from backend.formats.registry import files_carrying
from backend.jobs.dispatch import QueueUnavailable, dispatch
from backend.jobs.state import create_job, find_reusable
from backend.store.models import Job, Trace
from backend.store.trace_tables import available_columns
from core.analysis.registry import ANALYSES, default_analyses, resolve_params

log = logging.getLogger(__name__)


class NotApplicable(ValueError):
    """The trace lacks the data an analysis needs (the message says which files would
    bring it; `needs` is that part alone)."""

    def __init__(self, message: str, needs: str):
        super().__init__(message)
        self.needs = needs


def applicable_analyses(trace: Trace) -> list[str]:
    """The analysis kinds this trace has the data for."""
    available = available_columns(trace)
    return [kind for kind, spec in ANALYSES.items() if spec.applicable(available)]


def check_applicable(kind: str, trace: Trace) -> None:
    spec = ANALYSES[kind]
    available = available_columns(trace)
    if not spec.applicable(available):
        needs = files_carrying(spec.missing_columns(available), present=available)
        raise NotApplicable(
            f"analysis '{kind}' does not apply to trace {trace.id}: the uploaded files lack its data, "
            f"which {needs} would bring (attach them to the trace; docs/formats.md)",
            needs,
        )


def request_analysis(session: Session, trace: Trace, kind: str, params: dict) -> tuple[Job, bool]:
    """(job, created): an identical queued/running/finished job is reused."""
    full = resolve_params(kind, params)
    check_applicable(kind, trace)
    existing = find_reusable(session, trace.id, kind, full)
    if existing is not None:
        return existing, False
    job = create_job(session, team_id=trace.team_id, trace_id=trace.id, kind=kind, params=full)
    session.commit()
    dispatch([job.id], kind)
    return job, True


def queue_default_analyses(session: Session, trace: Trace) -> list[Job]:
    """The default set for a trace that just became ready, run as one task that reads the
    columns once for all of them."""
    jobs = []
    for kind in default_analyses(available_columns(trace)):
        full = resolve_params(kind, {})
        if find_reusable(session, trace.id, kind, full) is None:
            jobs.append(create_job(session, team_id=trace.team_id, trace_id=trace.id, kind=kind, params=full))
    session.commit()
    if jobs:
        try:
            dispatch([j.id for j in jobs], jobs[0].kind)
        except QueueUnavailable as exc:  # the trace is ready; the outbox sends them later
            log.warning("default analyses of trace %s wait for the job queue: %s", trace.id, exc)
    return jobs


def invalidate_analyses(session: Session, trace_id: int, tables: set[str] | list[str]) -> list[str]:
    """Keep results of analysis kinds that read any of `tables` from being reused (their
    data changed): their jobs keep their rows but lose their reuse key. Returns the kinds."""
    from sqlalchemy import update

    changed = set(tables)
    kinds = [kind for kind, spec in ANALYSES.items() if changed & set(spec.tables)]
    if kinds:
        session.execute(
            update(Job)
            .where(Job.trace_id == trace_id, Job.kind.in_(kinds), ~Job.params_key.startswith("stale-"))
            .values(params_key="stale-" + func.substr(Job.params_key, 1, 58))
        )
        session.commit()
    return kinds
