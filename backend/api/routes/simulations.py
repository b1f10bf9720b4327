"""Simulator replays: queue one (202 + job), list the team's, fetch one, download its
timeline as Chrome trace JSON, and the presets a form is built from."""

from __future__ import annotations

import gzip
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Header, HTTPException, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from backend.api.deps import CurrentTeam, JobIdPath, OptionalTraceQuery, SessionDep, job_of_team, owned_trace
from backend.api.errors import ERROR_RESPONSES
from backend.api.routes.jobs import IncludeResult, team_jobs
from backend.api.routes.trace_data import require_ready
from backend.api.schemas import BodyId, JobList, JobOut
from backend.jobs.contracts import SIMULATION_KIND, chrome_trace_path
from backend.jobs.simulations import error_field, presets, queue_simulation, simulation_params
from backend.store.models import Job, JobStatus, Trace
from core.simulator.result import chrome_trace_from_result

TraceIdField = BodyId | None

router = APIRouter(prefix="/simulations", tags=["simulations"], responses=ERROR_RESPONSES)


class SimulationRequest(BaseModel):
    """Fields are checked by the simulator's own validation (a 422 names the field)."""

    model_config = ConfigDict(extra="allow")
    trace_id: TraceIdField = Field(None, description="The team's trace to replay (or give `workload`)")
    workload: Any = Field(
        None,
        description="A synthetic source: {parameters (PolyTrace parameter file), task, steps, groups, samples_per_group, seed}",
    )
    cluster: Any = Field(
        None,
        description='ClusterConfig fields, e.g. {"gpu": "H100", "n_gpus": 16, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8}',
    )
    model: Any = Field(None, description='A model preset name ("Qwen2.5-7B") or {"preset", ...overrides}')
    limits: Any = Field(None, description="EngineLimits fields (max_running_seqs, kv_cache_tokens, ...)")
    policy: Any = Field(None, description='Policy A: a kind ("sync") or Policy fields')
    compare_policy: Any = Field(None, description="Policy B, replayed on the same workload and compared with A")
    calibrate: Any = Field(None, description='null: when the trace has measured timings; false; or {"fit_steps": [0]}')
    steps: Any = Field(None, description="[first, end) step range; all steps when omitted")
    forecast: Any = Field(
        None,
        description='Forecast the steps after the calibration steps from earlier workloads only: true or {"workloads": J}',
    )
    rolling_origin: Any = Field(
        None, description='Also evaluate accuracy by rolling origin: true or {"window": W (null: all earlier steps)}'
    )
    uncertainty: Any = Field(
        None,
        description='Monte-Carlo replay of the calibrated residual noise: {"runs": N (default: by a convergence check), "seed": 0}, or false',
    )


def _unprocessable(exc: ValueError) -> HTTPException:
    return HTTPException(422, detail={"message": str(exc), "field": error_field(exc)})


def require_succeeded(job: Job) -> None:
    if job.status != JobStatus.SUCCEEDED:
        detail = f"{job.kind} {job.id} is {job.status}" + (f": {job.error}" if job.error else "")
        raise HTTPException(status.HTTP_409_CONFLICT, detail={"message": detail})


def require_replayable(trace: Trace) -> None:
    """Ready (else 409) and with samples (else 422: e.g. a GPU-profile-only trace)."""
    require_ready(trace)
    if not trace.n_samples:
        raise HTTPException(
            422,
            detail={
                "message": f"trace_id: trace {trace.id} has no samples (rollout lengths) to replay or fit",
                "field": "trace_id",
            },
        )


@router.get("/presets")
def simulation_presets(_team: CurrentTeam) -> dict:
    """GPU and model presets, policy kinds, balancing and dispatch modes, and the
    default of every config field (the dashboard builds its form from this)."""
    return presets()


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={
        200: {"model": JobOut, "description": "An identical replay of this trace exists: that job."},
        409: {"description": "The trace is not ready."},
    },
)
def create_simulation(body: SimulationRequest, session: SessionDep, team: CurrentTeam, response: Response):
    """Queue a replay of a trace under `policy` (and `compare_policy`)."""
    return queue_from_request(body, session, team, response, simulation_params, queue_simulation)


def queue_from_request(body: BaseModel, session, team, response: Response, to_params, queue) -> Job:
    """The create shape of the jobs that replay a trace (replays, advice): the trace's
    ownership first (another team's id is a 404), then `to_params` on the request (a
    ValueError is a 422 naming the field), then `queue`; an identical job that exists
    already is answered 200 instead of 202."""
    raw = body.model_dump(exclude_unset=True)
    if raw.get("trace_id") is not None:
        require_replayable(owned_trace(session, team, raw["trace_id"]))
    try:
        params = to_params(raw)
    except ValueError as exc:
        raise _unprocessable(exc) from exc
    job, created = queue(session, team.id, params)
    if not created:
        response.status_code = status.HTTP_200_OK
    return job


@router.get("", response_model=JobList)
def list_simulations(
    session: SessionDep,
    team: CurrentTeam,
    trace: OptionalTraceQuery,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    include_result: IncludeResult = False,
):
    """The team's replays, newest first (results only with `include_result=true`)."""
    return team_jobs(session, team, SIMULATION_KIND, trace, limit, include_result)


@router.get("/{job_id}", response_model=JobOut)
def get_simulation(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    return job_of_team(session, team, job_id, SIMULATION_KIND)


@router.get(
    "/{job_id}/chrome-trace",
    responses={
        200: {"content": {"application/json": {}}, "description": "Chrome trace JSON (opens in Perfetto)"},
        409: {"description": "The replay has not finished."},
    },
)
def simulation_chrome_trace(
    job_id: JobIdPath,
    session: SessionDep,
    team: CurrentTeam,
    policy: Literal["a", "b"] = "a",
    accept_encoding: Annotated[str | None, Header()] = None,
):
    """The simulated GPU timeline of policy `a` or `b` as a Chrome-trace download."""
    job = job_of_team(session, team, job_id, SIMULATION_KIND)
    require_succeeded(job)
    if (job.result or {}).get(policy) is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, detail={"message": f"simulation {job_id} has no policy {policy}"}
        )
    path = chrome_trace_path(job_id, policy)
    if path.is_file():
        packed = path.read_bytes()
    else:  # no shared data folder: rebuild from the stored (possibly truncated) timeline
        packed = gzip.compress(orjson.dumps(chrome_trace_from_result(job.result[policy])))
    headers = {"Content-Disposition": f'attachment; filename="simulation-{job_id}-{policy}.json"'}
    if accept_encoding and "gzip" in accept_encoding.lower():
        headers["Content-Encoding"] = "gzip"
        return Response(packed, media_type="application/json", headers=headers)
    return Response(gzip.decompress(packed), media_type="application/json", headers=headers)
