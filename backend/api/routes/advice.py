"""The configuration advisor: queue a sweep over a trace (202 + job), list and fetch."""

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from backend.api.deps import CurrentTeam, JobIdPath, OptionalTraceQuery, SessionDep, job_of_team
from backend.api.errors import ERROR_RESPONSES
from backend.api.params import IncludeResult
from backend.api.replay_requests import queue_from_request
from backend.api.schemas import JobList, JobOut
from backend.api.schemas_replay import replay_models
from backend.api.views import team_jobs
from backend.jobs.advice import advice_request, queue_advice
from backend.jobs.contracts import ADVICE_KIND


def make_router() -> APIRouter:
    """The advisor's routes, the request body typed from the policy registry as it is now."""
    router = APIRouter(prefix="/advice", tags=["advice"], responses=ERROR_RESPONSES)
    request = replay_models().advice

    def create_advice(body: request, session: SessionDep, team: CurrentTeam, response: Response):  # type: ignore[valid-type]
        """Queue the advisor's sweep: configurations ranked by predicted step time."""
        return queue_from_request(body, session, team, response, advice_request, queue_advice)

    router.post(
        "",
        status_code=status.HTTP_202_ACCEPTED,
        response_model=JobOut,
        responses={200: {"model": JobOut, "description": "An identical advice exists: that job."}},
    )(create_advice)
    router.get("", response_model=JobList)(list_advice)
    router.get("/{job_id}", response_model=JobOut)(get_advice)
    return router


def list_advice(
    session: SessionDep,
    team: CurrentTeam,
    trace: OptionalTraceQuery,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    include_result: IncludeResult = False,
):
    """The team's advisor jobs, newest first (results only with `include_result=true`)."""
    return team_jobs(session, team, ADVICE_KIND, trace, limit, include_result)


def get_advice(job_id: JobIdPath, session: SessionDep, team: CurrentTeam):
    return job_of_team(session, team, job_id, ADVICE_KIND)
