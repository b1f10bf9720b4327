"""Response payloads several routers build: traces with their ingest job and analyses,
and job lists (without results unless asked)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from backend.api.schemas import JobList, JobOut, TraceOut, TruncationOut
from backend.ingest.truncation import trace_truncation
from backend.jobs.analyses import applicable_analyses
from backend.jobs.contracts import INGEST_KIND
from backend.store.models import Job, Team, Trace
from backend.store.queries import jobs as job_queries
from core.analysis.page_views import STEPS_PAGE_MAX, page_view, steps_page

_SUMMARY_FIELDS = tuple(f for f in JobOut.model_fields if f != "result")


def traces_out(session: Session, traces: list[Trace]) -> list[TraceOut]:
    """Traces with the id of their (latest) ingest job (one query for the page) and the
    analyses that apply to them."""
    ingest_jobs: dict[int, int] = {}
    for team_id in {t.team_id for t in traces}:  # one team: a page is one team's
        ids = [t.id for t in traces if t.team_id == team_id]
        ingest_jobs |= job_queries.latest_job_per_trace(session, team_id=team_id, trace_ids=ids, kind=INGEST_KIND)
    return [
        TraceOut.model_validate(t).model_copy(
            update={
                "job_id": ingest_jobs.get(t.id),
                "analyses": applicable_analyses(t),
                "truncation": TruncationOut(**trace_truncation(t).as_dict()) if t.n_samples else None,
            }
        )
        for t in traces
    ]


def trace_out(session: Session, trace: Trace) -> TraceOut:
    return traces_out(session, [trace])[0]


def job_list(jobs: Iterable[Job], include_result: bool) -> JobList:
    """The list payload; without results each item's `result` is null."""
    if include_result:
        return JobList(items=[JobOut.model_validate(j) for j in jobs])
    return JobList(items=[JobOut(**{f: getattr(j, f) for f in _SUMMARY_FIELDS}, result=None) for j in jobs])


def job_view(
    job: Job, view: str = "full", load: str = "tokens", step_offset: int = 0, step_limit: int = STEPS_PAGE_MAX
) -> Job | JobOut:
    """One job as `GET /jobs/{id}?view&load&step_offset&step_limit` answers it: as stored,
    with the page view of its result, or with one page of its step entries
    (core.analysis.page_views; the stored result is left as it is)."""
    if view == "full":
        return job
    fields = {f: getattr(job, f) for f in _SUMMARY_FIELDS}
    if view == "steps":
        return JobOut(**fields, result=steps_page(job.result, step_offset, step_limit))
    return JobOut(**fields, result=page_view(job.kind, job.result, load=load))


def team_jobs(
    session: Session, team: Team, kind: str, trace: Trace | None, limit: int, include_result: bool
) -> JobList:
    """The team's jobs of one kind (of one trace, when given), newest first: the list
    endpoints of replays, advice and workloads."""
    found = job_queries.list_jobs(
        session,
        team_id=team.id,
        kind=kind,
        trace_id=None if trace is None else trace.id,
        limit=limit,
        include_result=include_result,
    )
    return job_list(found, include_result)
