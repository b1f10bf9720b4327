"""Team API keys: random, shown once, stored as a SHA-256 hash (keys are 256-bit random,
so a fast hash is enough; there is nothing to brute-force). A team has several named
keys (`ApiKey`); a revoked key is refused everywhere within `Settings.key_cache_s`."""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from backend.jobs.lease_terms import aware
from backend.settings import get_settings
from backend.store.db import get_engine, new_session
from backend.store.models import ApiKey, Team, utcnow

log = logging.getLogger(__name__)

KEY_PREFIX = "rlvr_"
# Characters of a key kept in clear to tell keys apart in lists ("rlvr_" and 7 more).
SHOWN_CHARS = 12
FIRST_KEY_NAME = "first key"
# `last_used_at` is written at most this often per key and process (a write per request
# would cost more than the request).
LAST_USED_EVERY_S = 60.0


@dataclass(frozen=True)
class Caller:
    """Who a request is: the team (detached, its columns only) and which of its keys."""

    team: Team
    key_id: int


# Callers by key, kept for `key_cache_s` in each API process: every request names its
# team, and looking it up was one of a read's three queries. Short, so that a key
# revoked by another process is refused within that time; the process that revokes a
# key forgets it at once. Only hits are kept (an unknown key asks the database each time).
_CACHE_MAX = 10_000
_cache: dict[tuple[str, str], tuple[float, Caller]] = {}
_cache_lock = threading.Lock()
_touched: dict[tuple[str, int], float] = {}  # (database, key id) -> when this process noted a use


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def add_key(session: Session, team_id: int, name: str, key: str | None = None) -> tuple[ApiKey, str]:
    """A new key for the team: the row and the key itself (shown once, never stored)."""
    key = key or new_api_key()
    row = ApiKey(team_id=team_id, name=name, prefix=key[:SHOWN_CHARS], key_hash=hash_key(key))
    session.add(row)
    session.flush()
    return row, key


def create_team(session: Session, name: str, key: str | None = None) -> tuple[Team, str]:
    """A team and its first key."""
    team = Team(name=name)
    session.add(team)
    session.flush()
    _row, key = add_key(session, team.id, FIRST_KEY_NAME, key)
    return team, key


def active_key(session: Session, key: str) -> ApiKey | None:
    """The key's row when it is a key and not revoked."""
    return session.scalars(select(ApiKey).where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))).first()


def team_for_key(session: Session, key: str) -> Team | None:
    row = active_key(session, key)
    return None if row is None else session.get(Team, row.team_id)


def team_keys(session: Session, team_id: int) -> list[ApiKey]:
    """The team's keys, active ones first, newest first."""
    query = select(ApiKey).where(ApiKey.team_id == team_id)
    return list(session.scalars(query.order_by(ApiKey.revoked_at.is_not(None), ApiKey.id.desc())))


class LastActiveKey(ValueError):
    """Revoking this key would leave the team without any."""


def revoke_key(session: Session, team_id: int, key_id: int, *, allow_last: bool = False) -> ApiKey | None:
    """Revoke one of the team's keys (None: the team has no such key; revoking twice
    changes nothing). The team's last active key is kept unless `allow_last`. Once
    committed, `forget(row.key_hash)` drops it from this process' cache at once."""
    row = session.scalars(select(ApiKey).where(ApiKey.id == key_id, ApiKey.team_id == team_id)).first()
    if row is None or row.revoked_at is not None:
        return row
    active = session.scalar(
        select(func.count()).select_from(ApiKey).where(ApiKey.team_id == team_id, ApiKey.revoked_at.is_(None))
    )
    if active == 1 and not allow_last:
        raise LastActiveKey(f"key {key_id} is the team's last active key: make another first")
    row.revoked_at = utcnow()
    session.flush()
    return row


# --------------------------------------------------------------------------- the cache


def _cache_entry(key_hash: str) -> tuple[str, str]:
    return str(get_engine().url), key_hash


def cached_caller(key: str) -> Caller | None:
    """The key's caller if a lookup found it within `key_cache_s` (no I/O: fine on the event loop)."""
    hit = _cache.get(_cache_entry(hash_key(key)))
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def lookup_caller(key: str) -> Caller | None:
    """The key's caller from the database (the team detached: its columns only), cached;
    notes when the key was used (at most every LAST_USED_EVERY_S, off the request)."""
    with new_session() as session:
        row = active_key(session, key)
        if row is None:
            return None
        team = session.get(Team, row.team_id)
        if team is None:
            return None
        session.expunge(team)
        caller, last_used = Caller(team, row.id), row.last_used_at
    _note_use(caller.key_id, last_used)
    with _cache_lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[_cache_entry(hash_key(key))] = (time.monotonic() + get_settings().key_cache_s, caller)
    return caller


def forget(key_hash: str) -> None:
    """Drop a (revoked) key from this process' cache."""
    with _cache_lock:
        _cache.pop(_cache_entry(key_hash), None)


def _note_use(key_id: int, last_used) -> None:
    now, entry = time.monotonic(), (str(get_engine().url), key_id)
    if now - _touched.get(entry, -LAST_USED_EVERY_S) < LAST_USED_EVERY_S:
        return
    fresh = last_used is not None and aware(last_used) > utcnow() - timedelta(seconds=LAST_USED_EVERY_S)
    if len(_touched) >= _CACHE_MAX:
        _touched.clear()
    _touched[entry] = now
    if not fresh:
        # a thread of its own: on SQLite the write may wait for an ingestion's lock
        threading.Thread(target=_write_last_used, args=(key_id,), name="key-last-used", daemon=True).start()


def _write_last_used(key_id: int) -> None:
    try:
        with get_engine().begin() as conn:
            conn.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=utcnow()))
    except Exception as exc:  # best effort: the request it notes has been served
        log.info("could not note the use of key %s: %s", key_id, exc)
