"""Jobs (ingestion, analyses, replays): status, progress, errors and results."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import select

from backend.api.deps import CurrentTeam, SessionDep
from backend.api.errors import ERROR_RESPONSES
from backend.api.schemas import JobList, JobOut
from backend.models import Job

router = APIRouter(prefix="/jobs", tags=["jobs"], responses=ERROR_RESPONSES)


@router.get("", response_model=JobList)
def list_jobs(
    session: SessionDep,
    team: CurrentTeam,
    trace_id: int | None = None,
    status_: Annotated[str | None, Query(alias="status")] = None,
    kind: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    where = [Job.team_id == team.id]
    if trace_id is not None:
        where.append(Job.trace_id == trace_id)
    if status_:
        where.append(Job.status == status_)
    if kind:
        where.append(Job.kind == kind)
    jobs = session.scalars(select(Job).where(*where).order_by(Job.id.desc()).limit(limit))
    return JobList(items=list(jobs))


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: int, session: SessionDep, team: CurrentTeam):
    job = session.scalars(select(Job).where(Job.id == job_id, Job.team_id == team.id)).first()
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"job {job_id} not found"})
    return job
