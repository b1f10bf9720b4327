"""Jobs (ingestion, analyses, replays): status, progress, errors and results.

Lists leave `result` out (null) unless asked with `include_result=true`: an analysis or
replay result can be megabytes, and a list is mostly read for status and progress.
Fetch one job (`GET /jobs/{id}`) for its result. Without results the column is not
even read from the database (`job_list_query`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status
from sqlalchemy import Select, delete, select
from sqlalchemy.orm import defer

from backend.api.deps import CurrentTeam, JobIdPath, OptionalTraceQuery, SessionDep, job_of_team
from backend.api.errors import ERROR_RESPONSES
from backend.api.schemas import NO_NUL, AnalysisKindOut, JobKindsOut, JobList, JobOut
from backend.jobs.contracts import job_kinds, remove_artefacts
from backend.store.models import Job, JobStatus
from core.analysis.registry import ANALYSES

router = APIRouter(prefix="/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

IncludeResult = Annotated[bool, Query(description="Include each job's result (can be megabytes per job)")]
_SUMMARY_FIELDS = tuple(f for f in JobOut.model_fields if f != "result")


def job_list_query(*where, include_result: bool) -> Select:
    """Jobs matching `where`, newest first; the result column is loaded only when asked."""
    query = select(Job).where(*where).order_by(Job.id.desc())
    return query if include_result else query.options(defer(Job.result, raiseload=True))


def job_list(jobs, include_result: bool) -> JobList:
    """The list payload; without results each item's `result` is null."""
    if include_result:
        return JobList(items=[JobOut.model_validate(j) for j in jobs])
    return JobList(items=[JobOut(**{f: getattr(j, f) for f in _SUMMARY_FIELDS}, result=None) for j in jobs])


def team_jobs(session, team, kind: str, trace, limit: int, include_result: bool) -> JobList:
    """The team's jobs of one kind (of one trace, when given), newest first: the list
    endpoints of replays, advice and workloads."""
    where = [Job.team_id == team.id, Job.kind == kind]
    if trace is not None:
        where.append(Job.trace_id == trace.id)
    return job_list(session.scalars(job_list_query(*where, include_result=include_result).limit(limit)), include_result)


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
    where = [Job.team_id == team.id]
    if trace is not None:
        where.append(Job.trace_id == trace.id)
    if status_:
        where.append(Job.status == status_)
    if kind:
        where.append(Job.kind == kind)
    jobs = session.scalars(job_list_query(*where, include_result=include_result).limit(limit).offset(offset))
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
def get_job(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    return job_of_team(session, team, job_id)


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
    session.execute(delete(Job).where(Job.id == job_id))
    session.commit()
    remove_artefacts([(kind, job_id)])
    return Response(status_code=status.HTTP_204_NO_CONTENT)
