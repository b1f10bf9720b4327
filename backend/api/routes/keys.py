"""The team's API keys: make one (shown once), list them (never the keys), revoke one.

A revoked key is refused (401) by every API process within `key_cache_s` (2 s by
default) and signs its dashboard sessions out. The team's last active key cannot be
revoked here (make another first; `rlvr-explorer keys revoke` on the server can)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request, Response, status
from pydantic import BaseModel, Field

from backend.api.deps import ID_DIGITS, CurrentTeam, SessionDep
from backend.api.errors import ERROR_RESPONSES
from backend.api.schemas import NO_NUL, UtcDatetime
from backend.auth import LastActiveKey, add_key, forget, revoke_key, team_keys
from backend.store.ids import ID_MAX, ID_MIN
from backend.store.models import ApiKey

router = APIRouter(prefix="/keys", tags=["keys"], responses=ERROR_RESPONSES)

KeyIdPath = Annotated[int, Path(ge=ID_MIN, le=ID_MAX, description="A key of your team"), ID_DIGITS]


class KeyIn(BaseModel):
    name: str = Field(min_length=1, max_length=100, pattern=NO_NUL, description="What the key is for")


class KeyOut(BaseModel):
    id: int
    name: str
    prefix: str | None = Field(description="The key's first characters (null: a key made before keys had names)")
    created_at: UtcDatetime
    last_used_at: UtcDatetime | None = Field(description="Last request with it (noted at most once a minute)")
    revoked_at: UtcDatetime | None
    active: bool
    current: bool = Field(False, description="The key this request was made with")


class KeyCreated(KeyOut):
    key: str = Field(description="The new key: shown only now (it is stored hashed)")


class KeyList(BaseModel):
    items: list[KeyOut]


def key_out(row: ApiKey, request: Request) -> KeyOut:
    return KeyOut(
        id=row.id,
        name=row.name,
        prefix=row.prefix,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        active=row.revoked_at is None,
        current=row.id == getattr(request.state, "api_key_id", None),
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
def create_key(body: KeyIn, request: Request, session: SessionDep, team: CurrentTeam):
    """A new key for the team; the response is the only place it is ever shown."""
    row, key = add_key(session, team.id, body.name)
    session.commit()
    return KeyCreated(**key_out(row, request).model_dump(), key=key)


@router.get("", response_model=KeyList)
def list_keys(request: Request, session: SessionDep, team: CurrentTeam):
    """The team's keys (active first, newest first): name, prefix, when made and last
    used, revoked or not. Never the keys themselves."""
    return KeyList(items=[key_out(row, request) for row in team_keys(session, team.id)])


@router.delete(
    "/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={409: {"description": "The team's last active key."}},
)
def delete_key(key_id: KeyIdPath, session: SessionDep, team: CurrentTeam) -> Response:
    """Revoke a key: refused everywhere within a few seconds. Revoking a revoked key
    changes nothing."""
    try:
        row = revoke_key(session, team.id, key_id)
    except LastActiveKey as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail={"message": str(exc)}) from exc
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"key {key_id} not found"})
    session.commit()
    forget(row.key_hash)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
