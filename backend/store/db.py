"""Engine and sessions. SQLite gets WAL and a busy timeout so the API and the worker
process can share the file; Postgres connections use psycopg 3 (for COPY)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import orjson
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from backend.settings import get_settings


def json_loads(text: str | bytes):
    """JSON columns decoded with orjson (several times faster than the standard library on
    per-step summaries and results, a tenth of a read's CPU); the standard library for
    what orjson refuses (NaN, which the standard library writes)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        settings = get_settings()
        engine = create_engine(
            url,
            json_deserializer=json_loads,
            connect_args={"timeout": 60, "check_same_thread": False},
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            pool_timeout=settings.db_pool_timeout_s,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.close()

        return engine
    settings = get_settings()
    return create_engine(
        url,
        json_deserializer=json_loads,
        pool_pre_ping=True,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_s,
    )


@lru_cache
def get_engine() -> Engine:
    return make_engine(get_settings().db_url)


@lru_cache
def _session_factory() -> sessionmaker[Session]:
    return sessionmaker(get_engine(), expire_on_commit=False)


def new_session() -> Session:
    return _session_factory()()


@contextmanager
def session_scope() -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    session = new_session()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def reset_caches() -> None:
    """Forget the cached settings/engine (tests switch databases between modules)."""
    from backend import settings

    if _session_factory.cache_info().currsize:
        get_engine().dispose()
    _session_factory.cache_clear()
    get_engine.cache_clear()
    settings.get_settings.cache_clear()
