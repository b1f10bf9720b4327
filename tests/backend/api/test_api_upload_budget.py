"""Uploads cannot take what reads need: the pool is sized from the settings, no
connection is held while an upload is copied and hashed, and inline ingestions are
bounded (beyond the slots an upload goes to a worker: 202)."""

from __future__ import annotations

import time

import pytest

from backend.settings import get_settings
from backend.store.db import get_engine
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder


def post(api, archive: bytes, name: str):
    return api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))], data={"name": name})


@pytest.mark.parametrize("backend_env", ["postgres"], indirect=True)
def test_pool_is_sized_from_the_settings(env, monkeypatch):
    from backend.store.db import reset_caches

    monkeypatch.setenv("RLVR_DB_POOL_SIZE", "17")
    monkeypatch.setenv("RLVR_DB_MAX_OVERFLOW", "3")
    monkeypatch.setenv("RLVR_DB_POOL_TIMEOUT_S", "7")
    reset_caches()
    pool = get_engine().pool
    assert (pool.size(), pool._max_overflow, pool._timeout) == (17, 3, 7.0)


def test_no_connection_is_held_while_an_upload_is_stored(api, monkeypatch, tmp_path):
    import backend.api.routes.traces as routes

    held = []
    store = routes.store_upload

    def watched(files, settings, *quota):
        # the least over 0.2 s: a connection this request held would stay checked out
        # throughout, one of a background thread (a lease heartbeat) comes and goes
        counts = []
        for _ in range(20):
            counts.append(get_engine().pool.checkedout())
            time.sleep(0.01)
        held.append(min(counts))
        return store(files, settings, *quota)

    monkeypatch.setattr(routes, "store_upload", watched)
    archive = zip_folder(write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2)))
    assert post(api, archive, "watched").status_code == 201
    assert held == [0]


def test_inline_ingestions_are_bounded_beyond_them_a_worker_job(api, tmp_path):
    from backend.ingest.service import _inline_slot

    settings = get_settings()
    assert settings.inline_ingest_concurrency >= 1
    slot = _inline_slot(settings)
    taken = 0
    while slot.acquire(blocking=False):  # every slot busy, as with concurrent uploads
        taken += 1
    assert taken == settings.inline_ingest_concurrency
    try:
        busy = zip_folder(write_packed_dir(tmp_path / "a", synthetic_rows(steps=2, groups=4, n=2, seed=5)))
        r = post(api, busy, "while busy")
        assert r.status_code == 202, r.text
        assert r.json()["job"]["kind"] == "ingest" and r.json()["trace"]["status"] == "pending"
    finally:
        for _ in range(taken):
            slot.release()
    free = zip_folder(write_packed_dir(tmp_path / "b", synthetic_rows(steps=2, groups=4, n=2, seed=6)))
    r = post(api, free, "slot free")
    assert r.status_code == 201 and r.json()["status"] == "ready", r.text
    # the slot was given back
    assert slot.acquire(blocking=False)
    slot.release()


def test_large_uploads_default_to_a_worker():
    # a single 12 MB line took its request 50-69 s inline: above a few MB, a worker ingests
    assert get_settings().inline_ingest_max_bytes <= 4 * 1024**2


def test_requests_in_progress_stay_below_the_pool_and_the_threads():
    """More requests than connections in progress at once could deadlock the pool
    against the thread pool (backend/api/limits.py): the middleware lets N in at once."""
    import asyncio

    from backend.api.limits import THREADPOOL_TOKENS, ConcurrencyLimit, request_limit

    settings = get_settings()
    limit = request_limit(settings.db_pool_size, settings.db_max_overflow, settings.api_max_concurrent_requests)
    assert limit < settings.db_pool_size + settings.db_max_overflow and limit < THREADPOOL_TOKENS
    assert request_limit(5, 10, 32) == 13

    state = {"now": 0, "most": 0}

    async def app(scope, receive, send):
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        await asyncio.sleep(0.01)
        state["now"] -= 1

    limited = ConcurrencyLimit(app, limit=3, prefix="/api/")

    async def run():
        scope = {"type": "http", "path": "/api/v1/traces"}
        await asyncio.gather(*(limited(scope, None, None) for _ in range(20)))
        assert state["most"] == 3
        state["most"] = 0
        # the dashboard's pages and the health check are not counted
        await asyncio.gather(*(limited({"type": "http", "path": "/traces"}, None, None) for _ in range(20)))
        assert state["most"] == 20
        # reads have a lane of their own inside the limit; writes are not held up by it
        lanes = ConcurrencyLimit(app, limit=5, prefix="/api/", reads=2)
        state["most"] = 0
        read = {"type": "http", "method": "GET", "path": "/api/v1/traces"}
        await asyncio.gather(*(lanes(read, None, None) for _ in range(20)))
        assert state["most"] == 2
        state["most"] = 0
        write = {**read, "method": "POST"}
        await asyncio.gather(*(lanes(s, None, None) for s in [read] * 10 + [write] * 10))
        assert state["most"] == 5

    asyncio.run(run())


def test_the_api_has_the_limit(client):
    from backend.api.limits import ConcurrencyLimit

    assert any(m.cls is ConcurrencyLimit for m in client.app.user_middleware)
