"""Who am I: the team behind the API key (the dashboard checks a key with it)."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.deps import CurrentTeam
from backend.api.errors import ERROR_RESPONSES
from backend.api.schemas import MeOut, TeamOut

router = APIRouter(tags=["auth"], responses=ERROR_RESPONSES)


@router.get("/me", response_model=MeOut)
def me(team: CurrentTeam):
    return MeOut(team=TeamOut.model_validate(team))
