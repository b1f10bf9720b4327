"""Synthetic workloads: fit a trace and/or generate PolyTrace-style steps (202 + job),
fetch the job, download the generated files as a .zip."""

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import FileResponse
from pydantic import BaseModel

from backend.api.deps import (
    CurrentTeam,
    JobIdPath,
    SessionDep,
    job_of_team,
    owned_trace,
    require_replayable,
    require_succeeded,
)
from backend.api.errors import ERROR_RESPONSES
from backend.api.params import IncludeResult
from backend.api.replay_requests import unprocessable
from backend.api.schemas import JobList, JobOut
from backend.api.schemas_replay import replay_models
from backend.api.views import team_jobs
from backend.jobs.contracts import WORKLOAD_KIND, workload_zip
from backend.jobs.simulations import queue_workload, workload_params


def make_router() -> APIRouter:
    """The workload routes (a router per app, like the other replay routes)."""
    router = APIRouter(prefix="/workloads", tags=["workloads"], responses=ERROR_RESPONSES)
    request = replay_models().workload

    def create_workload(body: request, session: SessionDep, team: CurrentTeam):  # type: ignore[valid-type]
        """Queue a fit and/or generation; the result names the new trace and the files."""
        return queue_workload_request(body, session, team)

    router.post(
        "",
        status_code=status.HTTP_202_ACCEPTED,
        response_model=JobOut,
        responses={409: {"description": "The trace is not ready."}},
    )(create_workload)
    router.get("", response_model=JobList)(list_workloads)
    router.get("/{job_id}", response_model=JobOut)(get_workload)
    router.get(
        "/{job_id}/download",
        response_class=FileResponse,
        responses={
            200: {"content": {"application/zip": {}}, "description": "The generated files"},
            409: {"description": "The job has not finished."},
        },
    )(download_workload)
    return router


def queue_workload_request(body: BaseModel, session, team):
    """The trace's ownership first (another team's id is a 404), then the job's checks."""
    raw = body.model_dump(exclude_unset=True)
    multiturn = False
    if raw.get("trace_id") is not None:
        trace = owned_trace(session, team, raw["trace_id"])
        require_replayable(trace)
        multiturn = bool(trace.n_turns)
    try:
        params = workload_params(raw, multiturn_trace=multiturn)
    except ValueError as exc:
        raise unprocessable(exc) from exc
    return queue_workload(session, team.id, params)


def list_workloads(
    session: SessionDep,
    team: CurrentTeam,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    include_result: IncludeResult = False,
):
    """The team's workload jobs, newest first (results only with `include_result=true`)."""
    return team_jobs(session, team, WORKLOAD_KIND, None, limit, include_result)


def get_workload(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    return job_of_team(session, team, job_id, WORKLOAD_KIND)


def download_workload(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    """A .zip of the generated files (per-step JSONL, compact JSON, fitted model)."""
    job = job_of_team(session, team, job_id, WORKLOAD_KIND)
    require_succeeded(job)
    path = workload_zip(job_id)
    if not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"the files of workload {job_id} are gone"})
    return FileResponse(path, media_type="application/zip", filename=f"workload-{job_id}.zip")
