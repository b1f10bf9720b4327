"""Team API keys: random, shown once, stored as a SHA-256 hash (keys are 256-bit random,
so a fast hash is enough; there is nothing to brute-force)."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.store.db import get_engine, new_session
from backend.store.models import Team

# Teams by key, kept for a while in each API process: every request names its team, and
# looking it up was one of a read's three queries. Keys are never rotated or revoked
# (a team lives as long as the deployment), so a cached answer cannot go stale; only
# hits are kept (an unknown key asks the database every time).
TEAM_CACHE_S = 60.0
_TEAM_CACHE_MAX = 10_000
_team_cache: dict[tuple[str, str], tuple[float, Team]] = {}
_team_cache_lock = threading.Lock()


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


def _cache_entry(key: str) -> tuple[str, str]:
    return str(get_engine().url), hash_key(key)


def cached_team(key: str) -> Team | None:
    """The key's team if a lookup found it recently (no I/O: fine on the event loop)."""
    hit = _team_cache.get(_cache_entry(key))
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def lookup_team(key: str) -> Team | None:
    """The key's team from the database (detached: its columns only), cached."""
    with new_session() as session:
        team = team_for_key(session, key)
        if team is None:
            return None
        session.expunge(team)
    with _team_cache_lock:
        if len(_team_cache) >= _TEAM_CACHE_MAX:
            _team_cache.clear()
        _team_cache[_cache_entry(key)] = (time.monotonic() + TEAM_CACHE_S, team)
    return team
