"""Simulator replays: queue one (202 + job), list the team's, fetch one, download its
timeline as Chrome trace JSON, and the presets a form is built from."""

import gzip
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Header, HTTPException, Query, Response, status
from pydantic import BaseModel

from backend.api.deps import CurrentTeam, JobIdPath, OptionalTraceQuery, SessionDep, job_of_team, owned_trace
from backend.api.errors import ERROR_RESPONSES
from backend.api.routes.jobs import IncludeResult, team_jobs
from backend.api.routes.trace_data import require_ready
from backend.api.schemas import JobList, JobOut
from backend.api.schemas_replay import replay_models
from backend.jobs.contracts import SIMULATION_KIND, chrome_trace_path
from backend.jobs.simulations import error_field, presets, queue_simulation, simulation_request
from backend.store.models import Job, JobStatus, Trace
from core.simulator.model_guess import model_proposal
from core.simulator.result import chrome_trace_from_result


def unprocessable(exc: ValueError) -> HTTPException:
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


def make_router() -> APIRouter:
    """The replay routes, the request body typed from the policy registry as it is now."""
    router = APIRouter(prefix="/simulations", tags=["simulations"], responses=ERROR_RESPONSES)
    request = replay_models().simulation

    def create_simulation(body: request, session: SessionDep, team: CurrentTeam, response: Response):  # type: ignore[valid-type]
        """Queue a replay of a trace under `policy` (and `compare_policy`)."""
        return queue_from_request(body, session, team, response, simulation_request, queue_simulation)

    router.get("/presets")(simulation_presets)
    router.post(
        "",
        status_code=status.HTTP_202_ACCEPTED,
        response_model=JobOut,
        responses={
            200: {"model": JobOut, "description": "An identical replay of this trace exists: that job."},
            409: {"description": "The trace is not ready."},
        },
    )(create_simulation)
    router.get("", response_model=JobList)(list_simulations)
    router.get("/{job_id}", response_model=JobOut)(get_simulation)
    router.get(
        "/{job_id}/chrome-trace",
        responses={
            200: {"content": {"application/json": {}}, "description": "Chrome trace JSON (opens in Perfetto)"},
            409: {"description": "The replay has not finished."},
        },
    )(simulation_chrome_trace)
    return router


def simulation_presets(_team: CurrentTeam, trace: OptionalTraceQuery) -> dict:
    """GPU and model presets, policy kinds (with each one's help, paper and parameters),
    balancing and dispatch modes, and the default of every config field (the dashboard
    builds its forms from this). With `trace_id`: `proposed_model`, the preset the trace's
    name or metadata names (or null), which is then the model default."""
    out = presets()
    if trace is not None:
        proposal = model_proposal(trace.name, trace.meta)
        out["proposed_model"] = proposal
        if proposal is not None:
            out["defaults"] = {**out["defaults"], "model": proposal["model"]}
    return out


def queue_from_request(body: BaseModel, session, team, response: Response, to_request, queue) -> Job:
    """The create shape of the jobs that replay a trace (replays, advice): the trace's
    ownership first (another team's id is a 404), then `to_request` on the body (the
    typed request, checked once; a ValueError is a 422 naming the field), then `queue`;
    an identical job that exists already is answered 200 instead of 202."""
    raw = body.model_dump(exclude_unset=True)
    if raw.get("trace_id") is not None:
        require_replayable(owned_trace(session, team, raw["trace_id"]))
    try:
        request = to_request(raw)
    except ValueError as exc:
        raise unprocessable(exc) from exc
    job, created = queue(session, team.id, request)
    if not created:
        response.status_code = status.HTTP_200_OK
    return job


def list_simulations(
    session: SessionDep,
    team: CurrentTeam,
    trace: OptionalTraceQuery,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    include_result: IncludeResult = False,
):
    """The team's replays, newest first (results only with `include_result=true`)."""
    return team_jobs(session, team, SIMULATION_KIND, trace, limit, include_result)


def get_simulation(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    return job_of_team(session, team, job_id, SIMULATION_KIND)


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
    result = (job.result or {}).get(policy)
    if result is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, detail={"message": f"simulation {job_id} has no policy {policy}"}
        )
    path = chrome_trace_path(job_id, policy)
    if path.is_file():
        packed = path.read_bytes()
    else:  # no shared data folder: rebuild from the stored (possibly truncated) timeline
        packed = gzip.compress(orjson.dumps(chrome_trace_from_result(result)))
    headers = {"Content-Disposition": f'attachment; filename="simulation-{job_id}-{policy}.json"'}
    if accept_encoding and "gzip" in accept_encoding.lower():
        headers["Content-Encoding"] = "gzip"
        return Response(packed, media_type="application/json", headers=headers)
    return Response(gzip.decompress(packed), media_type="application/json", headers=headers)
