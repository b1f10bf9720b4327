"""Request dependencies: a DB session, the team behind the API key, and the one
ownership rule for ids.

The ownership rule: an id that names a team's object — in a path, a query, a JSON body
or a form field — is an integer in 1..2**31-1 (`backend.store.ids`; strictly typed in
bodies: 108.0 and "108" are a 422, never coerced), and it resolves to an object of the
caller's team or answers 404. Another team's object answers the same 404 as a missing
one, so ids cannot be enumerated. Routes take ids only through `TraceDep`,
`OptionalTraceQuery`, `owned_trace` (body fields) and `job_of_team`.

And the checks of an owned object's state that several routes share (`require_*`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Path, Query, Request, status
from pydantic import BeforeValidator
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from backend.auth import cached_caller, lookup_caller
from backend.settings import Settings, get_settings
from backend.store.db import new_session
from backend.store.ids import ID_MAX, ID_MIN, check_id
from backend.store.models import Job, JobStatus, Team, Trace, TraceStatus
from backend.store.queries import jobs, traces


async def get_session() -> AsyncIterator[Session]:
    """A session for the request. Made in the event loop (no I/O: a connection is taken
    at the first query) to save a sync dependency's hop to a worker thread and back on
    every request; closed in one (returning the connection rolls it back)."""
    session = new_session()
    try:
        yield session
    finally:
        await run_in_threadpool(_close, session)


def _close(session: Session) -> None:
    """Close the session; a connection the database dropped meanwhile (a restart) fails
    its rollback: the pool has discarded it, and the request has had its answer (a
    raise here would cut the answer off)."""
    try:
        session.close()
    except DBAPIError:
        pass


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def presented_key(x_api_key: str | None, authorization: str | None) -> str | None:
    """The key a request presents: X-API-Key, else `Authorization: Bearer`. Whitespace
    around it is not part of it (HTTP's optional whitespace), on either side alike."""
    key = x_api_key.strip() if x_api_key is not None else None
    if not key and authorization:
        scheme, _, rest = authorization.strip().partition(" ")
        key = rest.strip() if scheme.lower() == "bearer" else None
    return key or None


async def get_current_team(
    request: Request,
    x_api_key: Annotated[str | None, Header()] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> Team:
    """The key's team (the key's id goes on `request.state.api_key_id`). Async: a cached
    caller costs no thread hop and no query (backend/auth.py); a lookup runs in the
    thread pool. A revoked key is refused within `key_cache_s` on every process."""
    key = presented_key(x_api_key, authorization)
    caller = (cached_caller(key) or await run_in_threadpool(lookup_caller, key)) if key else None
    if caller is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail={"message": "missing, invalid or revoked API key (send it as X-API-Key)"},
            headers={"WWW-Authenticate": "Bearer"},
        )
    request.state.api_key_id = caller.key_id
    return caller.team


CurrentTeam = Annotated[Team, Depends(get_current_team)]


def _digits(value: Any) -> Any:
    """Path and query ids arrive as text: only plain decimal digits are an id ("108.0",
    "+108", " 108" and "1_08", which int() or pydantic would coerce, are refused)."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("must be an integer id (decimal digits)")
    return value


# Path/Query first and this check after it: so the bounds reach the OpenAPI document as
# JSON Schema's minimum/maximum (with the validator first they leaked out as ge/le).
ID_DIGITS = BeforeValidator(_digits)
TraceIdPath = Annotated[int, Path(ge=ID_MIN, le=ID_MAX, description="A trace of your team"), ID_DIGITS]
JobIdPath = Annotated[int, Path(ge=ID_MIN, le=ID_MAX, description="A job of your team"), ID_DIGITS]
TraceIdQuery = Annotated[
    int | None, Query(ge=ID_MIN, le=ID_MAX, description="Only jobs of this trace of your team"), ID_DIGITS
]


def trace_of_team(session: Session, team: Team, trace_id: int) -> Trace:
    """The team's trace, or 404 — also for another team's trace, whose existence is not revealed."""
    trace = traces.get_trace(session, team_id=team.id, trace_id=trace_id)
    if trace is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"trace {trace_id} not found"})
    return trace


def owned_trace(session: Session, team: Team, value: Any, field: str = "trace_id") -> Trace:
    """A trace id given in a body or form field: a strict integer id (else 422 naming the
    field), and the team's trace (else 404)."""
    try:
        trace_id = check_id(value, field)
    except ValueError as exc:
        raise HTTPException(422, detail={"message": str(exc), "field": field}) from exc
    return trace_of_team(session, team, trace_id)


def job_of_team(session: Session, team: Team, job_id: int, kind: str | None = None) -> Job:
    """The team's job (of this kind), or 404 (also for another team's job)."""
    job = jobs.get_job(session, team_id=team.id, job_id=job_id, kind=kind)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"{kind or 'job'} {job_id} not found"})
    return job


def get_trace(trace_id: TraceIdPath, session: SessionDep, team: CurrentTeam) -> Trace:
    return trace_of_team(session, team, trace_id)


def get_optional_trace(session: SessionDep, team: CurrentTeam, trace_id: TraceIdQuery = None) -> Trace | None:
    return None if trace_id is None else trace_of_team(session, team, trace_id)


TraceDep = Annotated[Trace, Depends(get_trace)]
OptionalTraceQuery = Annotated[Trace | None, Depends(get_optional_trace)]


def require_ready(trace: Trace) -> None:
    """The trace is ready (else 409 with its status and error)."""
    if trace.status != TraceStatus.READY:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail={
                "message": f"trace {trace.id} is {trace.status}, not ready"
                + (f": {trace.error}" if trace.error else "")
            },
        )


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


def require_succeeded(job: Job) -> None:
    """The job succeeded (else 409 with its status and error)."""
    if job.status != JobStatus.SUCCEEDED:
        detail = f"{job.kind} {job.id} is {job.status}" + (f": {job.error}" if job.error else "")
        raise HTTPException(status.HTTP_409_CONFLICT, detail={"message": detail})
