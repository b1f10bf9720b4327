"""Request dependencies: a DB session, the team behind the API key, a team's trace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, HTTPException, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.auth import team_for_key
from backend.settings import Settings, get_settings
from backend.store.db import new_session
from backend.store.models import Team, Trace


def get_session() -> Iterator[Session]:
    session = new_session()
    try:
        yield session
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_current_team(
    session: SessionDep,
    x_api_key: Annotated[str | None, Header()] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> Team:
    key = x_api_key
    if key is None and authorization and authorization.lower().startswith("bearer "):
        key = authorization[7:].strip()
    team = team_for_key(session, key) if key else None
    if team is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail={"message": "missing or invalid API key (send it as X-API-Key)"},
            headers={"WWW-Authenticate": "Bearer"},
        )
    return team


CurrentTeam = Annotated[Team, Depends(get_current_team)]


def trace_of_team(session: Session, team: Team, trace_id: int) -> Trace:
    """The team's trace, or 404 — also for another team's trace, whose existence is not revealed."""
    trace = session.scalars(select(Trace).where(Trace.id == trace_id, Trace.team_id == team.id)).first()
    if trace is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"trace {trace_id} not found"})
    return trace


def get_trace(trace_id: int, session: SessionDep, team: CurrentTeam) -> Trace:
    return trace_of_team(session, team, trace_id)


TraceDep = Annotated[Trace, Depends(get_trace)]
