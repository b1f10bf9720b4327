"""Simulator replays: queue one (202 + job), list the team's, fetch one, download its
timeline as Chrome trace JSON, and the presets a form is built from."""

import gzip
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Header, HTTPException, Query, Response, status

from backend.api.deps import CurrentTeam, JobIdPath, OptionalTraceQuery, SessionDep, job_of_team, require_succeeded
from backend.api.errors import ERROR_RESPONSES
from backend.api.params import IncludeResult
from backend.api.replay_requests import queue_from_request
from backend.api.schemas import JobList, JobOut
from backend.api.schemas_replay import replay_models
from backend.api.views import team_jobs
from backend.jobs.contracts import SIMULATION_KIND, chrome_trace_path
from backend.jobs.simulations import presets, queue_simulation, simulation_request
from core.simulator.model_guess import model_proposal
from core.simulator.result import chrome_trace_from_result


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
