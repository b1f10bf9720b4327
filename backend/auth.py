"""Team API keys: random, shown once, stored as a SHA-256 hash (keys are 256-bit random,
so a fast hash is enough; there is nothing to brute-force)."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.store.models import Team


def new_api_key() -> str:
    return "rlvr_" + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_team(session: Session, name: str, key: str | None = None) -> tuple[Team, str]:
    key = key or new_api_key()
    team = Team(name=name, api_key_hash=hash_key(key))
    session.add(team)
    session.flush()
    return team, key


def team_for_key(session: Session, key: str) -> Team | None:
    return session.scalars(select(Team).where(Team.api_key_hash == hash_key(key))).first()
