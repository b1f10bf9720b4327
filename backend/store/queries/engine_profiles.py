"""A team's engine profiles (`engine/profiles.py` makes them)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.store.models import EngineProfile


def engine_profiles_by_id(session: Session, *, team_id: int, ids: Iterable[int]) -> dict[int, EngineProfile]:
    """The team's profiles among `ids`, by id (another team's are left out)."""
    wanted = list(ids)
    if not wanted:
        return {}
    rows = session.scalars(select(EngineProfile).where(EngineProfile.id.in_(wanted), EngineProfile.team_id == team_id))
    return {row.id: row for row in rows}
