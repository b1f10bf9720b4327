"""The create shape of the jobs that replay a trace (replays, advice, workloads)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import HTTPException, Response, status
from pydantic import BaseModel
from sqlalchemy.orm import Session

from backend.api.deps import owned_trace, require_replayable
from backend.jobs.simulations import error_field
from backend.store.models import Job, Team


def unprocessable(exc: ValueError) -> HTTPException:
    """A request's ValueError as the 422 naming its field."""
    return HTTPException(422, detail={"message": str(exc), "field": error_field(exc)})


def queue_from_request(
    body: BaseModel,
    session: Session,
    team: Team,
    response: Response,
    to_request: Callable[[dict], Any],
    queue: Callable[[Session, int, Any], tuple[Job, bool]],
) -> Job:
    """The trace's ownership first (another team's id is a 404), then `to_request` on the
    body (the typed request, checked once; a ValueError is a 422 naming the field), then
    `queue`; an identical job that exists already is answered 200 instead of 202."""
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
