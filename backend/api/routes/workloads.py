"""Synthetic workloads: fit a trace and/or generate PolyTrace-style steps (202 + job),
fetch the job, download the generated files as a .zip."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from backend.api.deps import CurrentTeam, JobIdPath, SessionDep, job_of_team, owned_trace
from backend.api.errors import ERROR_RESPONSES
from backend.api.routes.jobs import IncludeResult, team_jobs
from backend.api.routes.simulations import TraceIdField, _unprocessable, require_replayable, require_succeeded
from backend.api.schemas import JobList, JobOut
from backend.jobs.contracts import WORKLOAD_KIND, workload_zip
from backend.jobs.simulations import queue_workload, workload_params

router = APIRouter(prefix="/workloads", tags=["workloads"], responses=ERROR_RESPONSES)


class WorkloadRequest(BaseModel):
    """Fields are checked by the generator's own validation (a 422 names the field)."""

    model_config = ConfigDict(extra="allow")
    trace_id: TraceIdField = Field(None, description="The team's trace to fit (or give `parameters`)")
    parameters: Any = Field(
        None, description="PolyTrace's fitted-parameter file JSON (enhanced_task_distribution_parameters)"
    )
    task: Any = Field(None, description="Task to generate: a fitted task name, or math | tool_calling")
    steps: Any = Field(None, description="Steps to generate (0 with a trace: fit report only)")
    groups: Any = Field(None, description="Prompt groups per step (a trace: as fitted when omitted)")
    samples_per_group: Any = Field(None, description="Samples per group (a trace: as fitted when omitted)")
    seed: Any = Field(None, description="Random seed (default 0)")
    formats: Any = Field(None, description='Files to write: ["packed", "compact", "multiturn"]')
    ingest: Any = Field(None, description="Ingest the generated workload as a new trace (default true)")
    name: Any = Field(None, description="Name of the new trace")
    dp_size: Any = Field(None, description="DP ranks the packed rows are dealt to (default 1)")


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={409: {"description": "The trace is not ready."}},
)
def create_workload(body: WorkloadRequest, session: SessionDep, team: CurrentTeam):
    """Queue a fit and/or generation; the result names the new trace and the files."""
    raw = body.model_dump(exclude_unset=True)
    multiturn = False
    if raw.get("trace_id") is not None:  # ownership first: another team's id is a 404
        trace = owned_trace(session, team, raw["trace_id"])
        require_replayable(trace)
        multiturn = bool(trace.n_turns)
    try:
        params = workload_params(raw, multiturn_trace=multiturn)
    except ValueError as exc:
        raise _unprocessable(exc) from exc
    return queue_workload(session, team.id, params)


@router.get("", response_model=JobList)
def list_workloads(
    session: SessionDep,
    team: CurrentTeam,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    include_result: IncludeResult = False,
):
    """The team's workload jobs, newest first (results only with `include_result=true`)."""
    return team_jobs(session, team, WORKLOAD_KIND, None, limit, include_result)


@router.get("/{job_id}", response_model=JobOut)
def get_workload(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    return job_of_team(session, team, job_id, WORKLOAD_KIND)


@router.get(
    "/{job_id}/download",
    response_class=FileResponse,
    responses={
        200: {"content": {"application/zip": {}}, "description": "The generated files"},
        409: {"description": "The job has not finished."},
    },
)
def download_workload(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    """A .zip of the generated files (per-step JSONL, compact JSON, fitted model)."""
    job = job_of_team(session, team, job_id, WORKLOAD_KIND)
    require_succeeded(job)
    path = workload_zip(job_id)
    if not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"the files of workload {job_id} are gone"})
    return FileResponse(path, media_type="application/zip", filename=f"workload-{job_id}.zip")
