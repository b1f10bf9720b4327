"""The configuration advisor: queue a sweep over a trace (202 + job), list and fetch."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from backend.api.deps import CurrentTeam, JobIdPath, OptionalTraceQuery, SessionDep, job_of_team, owned_trace
from backend.api.errors import ERROR_RESPONSES
from backend.api.routes.jobs import IncludeResult, job_list, job_list_query
from backend.api.routes.simulations import require_replayable
from backend.api.schemas import BodyId, JobList, JobOut
from backend.jobs.advice import advice_params, queue_advice
from backend.jobs.contracts import ADVICE_KIND
from backend.jobs.simulations import error_field
from backend.store.models import Job

router = APIRouter(prefix="/advice", tags=["advice"], responses=ERROR_RESPONSES)


class AdviceRequest(BaseModel):
    """Fields are checked by the advisor's validation (a 422 names the field)."""

    model_config = ConfigDict(extra="allow")
    trace_id: BodyId | None = Field(None, description="The team's trace to advise on")
    gpu: Any = Field(None, description='GPU preset, e.g. "H100"')
    n_gpus: Any = Field(None, description="The GPU budget every configuration uses")
    model: Any = Field(None, description='Model preset, e.g. "Qwen2.5-7B"')
    policies: Any = Field(None, description="Policy kinds to sweep (default: all)")
    balancing: Any = Field(None, description='DP balancing modes (default ["none", "kk"])')
    concurrency: Any = Field(
        None, description="Running-sequence limits per replica (null: calibrated); default [null, 256]"
    )
    calibrate: Any = Field(None, description='null: when measured; false; or {"fit_steps": [0]}')
    steps: Any = Field(None, description="[first, end) step range")
    runs: Any = Field(None, description="Monte-Carlo runs per layout and step (default 200)")
    seed: Any = Field(None, description="Monte-Carlo seed")


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={200: {"model": JobOut, "description": "An identical advice exists: that job."}},
)
def create_advice(body: AdviceRequest, session: SessionDep, team: CurrentTeam, response: Response):
    """Queue the advisor's sweep: configurations ranked by predicted step time."""
    raw = body.model_dump(exclude_unset=True)
    if raw.get("trace_id") is not None:  # ownership first: another team's id is a 404
        require_replayable(owned_trace(session, team, raw["trace_id"]))
    try:
        params = advice_params(raw)
    except ValueError as exc:
        raise HTTPException(422, detail={"message": str(exc), "field": error_field(exc)}) from exc
    job, created = queue_advice(session, team.id, params)
    if not created:
        response.status_code = status.HTTP_200_OK
    return job


@router.get("", response_model=JobList)
def list_advice(
    session: SessionDep,
    team: CurrentTeam,
    trace: OptionalTraceQuery,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    include_result: IncludeResult = False,
):
    """The team's advisor jobs, newest first (results only with `include_result=true`)."""
    where = [Job.team_id == team.id, Job.kind == ADVICE_KIND]
    if trace is not None:
        where.append(Job.trace_id == trace.id)
    return job_list(session.scalars(job_list_query(*where, include_result=include_result).limit(limit)), include_result)


@router.get("/{job_id}", response_model=JobOut)
def get_advice(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    return job_of_team(session, team, job_id, ADVICE_KIND)
