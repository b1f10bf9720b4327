"""Analyses of a trace: request one (202 + job), list them, fetch the latest of a kind."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status

from backend.api.deps import SessionDep, TraceDep, require_ready
from backend.api.errors import ERROR_RESPONSES
from backend.api.params import IncludeResult, ResultView, StepLimit, StepOffset, ViewLoad
from backend.api.schemas import AnalysisRequest, JobList, JobOut
from backend.api.views import job_list, job_view
from backend.jobs.analyses import NotApplicable, request_analysis
from backend.jobs.state import params_key
from backend.store.models import JobStatus
from backend.store.queries import jobs as job_queries
from core.analysis.page_views import STEPS_PAGE_MAX
from core.analysis.registry import ANALYSES, resolve_params

router = APIRouter(prefix="/traces/{trace_id}/analyses", tags=["analyses"], responses=ERROR_RESPONSES)


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={200: {"model": JobOut, "description": "An identical analysis exists: that job."}},
    # the kinds from the analysis registry, never a list kept by hand
    description=f"Queue an analysis (the kinds a trace has the data for: its `analyses`; all kinds: "
    f"{', '.join(ANALYSES)}). The same kind and parameters return the existing job (200).",
)
def create_analysis(body: AnalysisRequest, session: SessionDep, trace: TraceDep, response: Response):
    """Queue an analysis of the trace (see the route's description)."""
    require_ready(trace)
    try:
        job, created = request_analysis(session, trace, body.kind, body.params)
    except NotApplicable as exc:
        raise HTTPException(422, detail={"message": str(exc), "field": "kind"}) from exc
    except ValueError as exc:
        field = "kind" if str(exc).startswith("unknown analysis") else "params"
        raise HTTPException(422, detail={"message": str(exc), "field": field}) from exc
    if not created:
        response.status_code = status.HTTP_200_OK
    return job


@router.get("", response_model=JobList)
def list_analyses(session: SessionDep, trace: TraceDep, include_result: IncludeResult = False):
    """The trace's analysis jobs, newest first (results only with `include_result=true`)."""
    jobs = job_queries.list_jobs(
        session, team_id=trace.team_id, trace_id=trace.id, kinds=ANALYSES, include_result=include_result
    )
    return job_list(jobs, include_result)


@router.get("/{kind}", response_model=JobOut)
def latest_analysis(
    kind: str,
    session: SessionDep,
    trace: TraceDep,
    view: ResultView = "full",
    load: ViewLoad = "tokens",
    step_offset: StepOffset = 0,
    step_limit: StepLimit = STEPS_PAGE_MAX,
):
    """The newest job of this kind with default parameters (else any parameters),
    preferring a finished one (`view=page`: its result as the dashboard pages draw it;
    `view=steps`: a page of its step entries)."""
    if kind not in ANALYSES:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"unknown analysis '{kind}'"})
    # results deferred: only the chosen job's result is read
    jobs = job_queries.trace_jobs_of_kind(session, team_id=trace.team_id, trace_id=trace.id, kind=kind)
    if not jobs:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"no '{kind}' analysis for trace {trace.id}"})
    default_key = params_key(kind, resolve_params(kind, {}))
    jobs.sort(key=lambda j: (j.params_key != default_key, j.status != JobStatus.SUCCEEDED))
    return job_view(jobs[0], view, load, step_offset, step_limit)
