"""Jobs (ingestion, analyses, replays): status, progress, errors and results.

Lists leave `result` out (null) unless asked with `include_result=true`: an analysis or
replay result can be megabytes, and a list is mostly read for status and progress.
Fetch one job (`GET /jobs/{id}`) for its result. Without results the column is not
even read from the database (`backend.store.queries.jobs.jobs_query`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status

from backend.api.deps import CurrentTeam, JobIdPath, OptionalTraceQuery, SessionDep, job_of_team
from backend.api.errors import ERROR_RESPONSES
from backend.api.params import IncludeResult, ResultView, StepLimit, StepOffset, ViewLoad
from backend.api.schemas import NO_NUL, AnalysisKindOut, JobKindsOut, JobList, JobOut
from backend.api.views import job_list, job_view
from backend.jobs.contracts import job_kinds, remove_artefacts
from backend.store.models import JobStatus
from backend.store.queries import jobs as job_queries
from core.analysis.page_views import STEPS_PAGE_MAX
from core.analysis.registry import ANALYSES

router = APIRouter(prefix="/jobs", tags=["jobs"], responses=ERROR_RESPONSES)


@router.get("", response_model=JobList)
def list_jobs(
    session: SessionDep,
    team: CurrentTeam,
    trace: OptionalTraceQuery,
    status_: Annotated[str | None, Query(alias="status", max_length=20, pattern=NO_NUL)] = None,
    kind: Annotated[str | None, Query(max_length=50, pattern=NO_NUL)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1, description="Jobs to skip (paging)")] = 0,
    include_result: IncludeResult = False,
):
    """The team's jobs, newest first (results only with `include_result=true`), paged
    with `limit` and `offset`."""
    jobs = job_queries.list_jobs(
        session,
        team_id=team.id,
        trace_id=None if trace is None else trace.id,
        status=status_,
        kind=kind or None,
        limit=limit,
        offset=offset,
        include_result=include_result,
    )
    return job_list(jobs, include_result)


@router.get("/kinds", response_model=JobKindsOut)
def list_job_kinds(team: CurrentTeam) -> JobKindsOut:
    """Every job kind, and the analyses with their parameters' defaults and where the
    dashboard shows them (the registry's)."""
    analyses = [
        AnalysisKindOut(
            kind=k,
            title=spec.title,
            defaults=spec.defaults,
            default=spec.default,
            live_series=spec.live_series,
            shows=list(spec.shows),
        )
        for k, spec in ANALYSES.items()
    ]
    return JobKindsOut(kinds=job_kinds(), analyses=analyses)


@router.get("/{job_id}", response_model=JobOut)
def get_job(
    job_id: JobIdPath,
    session: SessionDep,
    team: CurrentTeam,
    view: ResultView = "full",
    load: ViewLoad = "tokens",
    step_offset: StepOffset = 0,
    step_limit: StepLimit = STEPS_PAGE_MAX,
):
    """One job with its result (`view=page`: a longtail or imbalance result as the
    dashboard pages draw it, bounded in size; `view=steps`: a page of its step entries)."""
    return job_view(job_of_team(session, team, job_id), view, load, step_offset, step_limit)


@router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT, responses={409: {"description": "Not finished."}})
def delete_job(job_id: JobIdPath, session: SessionDep, team: CurrentTeam) -> Response:
    """Delete a finished job, its parts and the files it wrote (a replay's timelines, a
    workload's files). A generated trace is not deleted with it: delete it on its own."""
    job = job_of_team(session, team, job_id)
    if job.status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail={"message": f"job {job_id} is {job.status}: delete it when it has finished"},
        )
    kind = job.kind
    job_queries.delete_job(session, team_id=team.id, job_id=job_id)
    session.commit()
    remove_artefacts([(kind, job_id)])
    return Response(status_code=status.HTTP_204_NO_CONTENT)
