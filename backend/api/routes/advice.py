"""The configuration advisor: queue a sweep over a trace (202 + job), list and fetch."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from backend.api.deps import CurrentTeam, JobIdPath, OptionalTraceQuery, SessionDep, job_of_team
from backend.api.errors import ERROR_RESPONSES
from backend.api.routes.jobs import IncludeResult, team_jobs
from backend.api.routes.simulations import queue_from_request
from backend.api.schemas import BodyId, JobList, JobOut
from backend.jobs.advice import advice_params, queue_advice
from backend.jobs.contracts import ADVICE_KIND

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
    return queue_from_request(body, session, team, response, advice_params, queue_advice)


@router.get("", response_model=JobList)
def list_advice(
    session: SessionDep,
    team: CurrentTeam,
    trace: OptionalTraceQuery,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    include_result: IncludeResult = False,
):
    """The team's advisor jobs, newest first (results only with `include_result=true`)."""
    return team_jobs(session, team, ADVICE_KIND, trace, limit, include_result)


@router.get("/{job_id}", response_model=JobOut)
def get_advice(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    return job_of_team(session, team, job_id, ADVICE_KIND)
