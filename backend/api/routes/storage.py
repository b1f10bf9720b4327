"""The team's storage against its quota (the dashboard's team page shows it)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from backend.api.deps import CurrentTeam, SessionDep, SettingsDep
from backend.api.errors import ERROR_RESPONSES
from backend.ingest.quota import team_usage

router = APIRouter(tags=["auth"], responses=ERROR_RESPONSES)


class StorageOut(BaseModel):
    used_bytes: int = Field(
        description="The team's traces: each upload's bytes as uploaded, or what it expanded to once "
        "ingested when that is more (archives, .gz)"
    )
    quota_bytes: int | None = Field(description="The team's quota (null: no limit)")
    remaining_bytes: int | None = Field(description="What uploads may still take (null: no limit)")
    traces: int


@router.get("/storage", response_model=StorageOut)
def storage(session: SessionDep, team: CurrentTeam, settings: SettingsDep):
    """Storage used by the team's traces and its quota; an upload past it is a 413."""
    usage = team_usage(session, team.id, settings)
    return StorageOut(
        used_bytes=usage.used_bytes,
        quota_bytes=usage.quota_bytes,
        remaining_bytes=usage.remaining,
        traces=usage.traces,
    )
