"""Engine profiles in the database (backend.store.models.EngineProfile), team-scoped."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.store.models import EngineProfile


def profile_dict(p: EngineProfile) -> dict:
    return {
        "id": p.id,
        "engine": p.engine,
        "device": p.device,
        "arch": p.arch,
        "tp": p.tp,
        "coefficients": dict(p.coefficients),
        "fit": dict(p.fit),
        "limits": dict(p.limits),
        "created_at": p.created_at.isoformat() if p.created_at else None,
    }


def save_profile(session: Session, team_id: int, profile: dict) -> dict:
    row = EngineProfile(
        team_id=team_id,
        engine=profile["engine"],
        device=profile["device"],
        arch=profile["arch"],
        tp=profile.get("tp", 1),
        coefficients=profile["coefficients"],
        fit=profile["fit"],
        limits=profile["limits"],
    )
    session.add(row)
    session.flush()
    return profile_dict(row)


def get_profile(session: Session, team_id: int, profile_id: int) -> dict:
    row = session.get(EngineProfile, profile_id)
    if row is None or row.team_id != team_id:
        raise ValueError(f"--profile {profile_id}: no engine profile with this id for this team")
    return profile_dict(row)


def latest_profile(session: Session, team_id: int, engine: str, device: str, arch: str) -> dict | None:
    """The team's newest profile of this engine, device and architecture."""
    row = session.scalars(
        select(EngineProfile)
        .where(
            EngineProfile.team_id == team_id,
            EngineProfile.engine == engine,
            EngineProfile.device == device,
            EngineProfile.arch == arch,
        )
        .order_by(EngineProfile.id.desc())
        .limit(1)
    ).first()
    return profile_dict(row) if row is not None else None
