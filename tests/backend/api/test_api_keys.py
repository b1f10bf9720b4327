"""Named API keys (both databases): made with POST /keys (the key shown once), listed
without the key, revoked with DELETE /keys/{id} (401 at once in this process, within
`key_cache_s` everywhere: tests/backend/api/test_service_processes.py runs two API processes);
the team's last key stays; when a key was last used is noted; keys of before the named
keys (migration 0009) keep working as the team's "first key"; the CLI's `keys` group."""

from __future__ import annotations

import time
import uuid

import pytest
import sqlalchemy as sa
from alembic import command
from typer.testing import CliRunner

from backend.store.migrate import alembic_config, upgrade
from rlvr_explorer.cli import app
from tests.conftest import _create_pg_database, _drop_pg_database


def test_made_listed_and_revoked(api, client, team_key):
    made = api.post("/api/v1/keys", json={"name": "ci runner"})
    assert made.status_code == 201, made.text
    body = made.json()
    key, key_id = body["key"], body["id"]
    assert key.startswith("rlvr_") and key != team_key and body["prefix"] == key[:12] and body["active"]
    assert client.get("/api/v1/me", headers={"X-API-Key": key}).json() == api.get("/api/v1/me").json()

    listed = api.get("/api/v1/keys").json()["items"]
    assert {k["name"] for k in listed} == {"first key", "ci runner"}
    assert all("key" not in k and key not in str(k) and team_key not in str(k) for k in listed)
    assert [k["current"] for k in listed if k["name"] == "first key"] == [True]

    assert api.delete(f"/api/v1/keys/{key_id}").status_code == 204
    refused = client.get("/api/v1/me", headers={"X-API-Key": key})
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]["message"]
    bearer = {"X-API-Key": "", "Authorization": f"Bearer {key}"}  # (the client sends the team's key otherwise)
    assert client.get("/api/v1/traces", headers=bearer).status_code == 401
    assert api.get("/api/v1/me").status_code == 200  # the other key goes on
    again = api.get("/api/v1/keys").json()["items"]
    revoked = next(k for k in again if k["id"] == key_id)
    assert not revoked["active"] and revoked["revoked_at"]
    assert api.delete(f"/api/v1/keys/{key_id}").status_code == 204  # revoking twice changes nothing


def test_revoked_key_is_refused_once_its_cache_entry_expires(api, client, env, monkeypatch):
    """Another process revoking: this one's cached entry lasts at most key_cache_s."""
    from backend.auth import revoke_key
    from backend.store.db import reset_caches, session_scope

    monkeypatch.setenv("RLVR_KEY_CACHE_S", "0.5")
    reset_caches()
    made = api.post("/api/v1/keys", json={"name": "elsewhere"}).json()
    headers = {"X-API-Key": made["key"]}
    assert client.get("/api/v1/me", headers=headers).status_code == 200  # now cached here
    with session_scope() as s:  # as the other process does (no forget() in this one)
        team_id = client.get("/api/v1/me", headers=headers).json()["team"]["id"]
        revoke_key(s, team_id, made["id"])
    deadline = time.monotonic() + 5
    while client.get("/api/v1/me", headers=headers).status_code != 401:
        assert time.monotonic() < deadline, "a revoked key was still accepted after 5 s"
        time.sleep(0.1)


def test_last_active_key_stays_and_other_teams_keys_are_404(api, client, env):
    from backend.auth import create_team
    from backend.store.db import session_scope

    (mine,) = api.get("/api/v1/keys").json()["items"]
    refused = api.delete(f"/api/v1/keys/{mine['id']}")
    assert refused.status_code == 409 and "last active key" in refused.json()["detail"]["message"]
    assert api.get("/api/v1/me").status_code == 200
    with session_scope() as s:
        _team, other_key = create_team(s, f"other-{uuid.uuid4().hex[:8]}")
    theirs = client.get("/api/v1/keys", headers={"X-API-Key": other_key}).json()["items"][0]
    assert api.delete(f"/api/v1/keys/{theirs['id']}").status_code == 404
    assert client.get("/api/v1/me", headers={"X-API-Key": other_key}).status_code == 200


@pytest.mark.parametrize("body", [{"name": ""}, {"name": "a\u0000b"}, {"name": "x" * 101}, {}, {"name": 5}], ids=str)
def test_bad_key_requests_are_422(api, body):
    r = api.post("/api/v1/keys", json=body)
    assert r.status_code == 422 and r.json()["detail"]["field"] == "name", r.text
    assert len(api.get("/api/v1/keys").json()["items"]) == 1


def test_last_use_is_noted(api):
    made = api.post("/api/v1/keys", json={"name": "used"}).json()
    assert made["last_used_at"] is None
    deadline = time.monotonic() + 10
    while True:  # noted off the request, in a thread of its own
        first = next(k for k in api.get("/api/v1/keys").json()["items"] if k["name"] == "first key")
        if first["last_used_at"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert first["last_used_at"], first
    assert next(k for k in api.get("/api/v1/keys").json()["items"] if k["name"] == "used")["last_used_at"] is None


@pytest.mark.parametrize("shape", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_keys_of_before_become_first_keys(shape, tmp_path):
    """A database at 0008 (one key per team, in teams.api_key_hash) upgraded to head:
    the same key finds the same team, listed as its "first key"."""
    from backend.auth import hash_key, team_for_key, team_keys
    from backend.store.db import make_engine
    from backend.store.models import Trace

    pg_name = None
    if shape == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    else:
        pg_name, url = _create_pg_database()
    try:
        command.upgrade(alembic_config(url), "0008")
        engine = make_engine(url)
        with engine.begin() as conn:
            team_id = conn.execute(
                sa.text(
                    "INSERT INTO teams (name, api_key_hash, created_at) VALUES ('old', :h, CURRENT_TIMESTAMP) "
                    "RETURNING id"
                ),
                {"h": hash_key("rlvr_old-key")},
            ).scalar_one()
            conn.execute(
                sa.text(
                    "INSERT INTO traces (team_id, name, status, content_hash, size_bytes, n_steps, n_samples, n_turns,"
                    " n_tool_calls, n_rank_timings, n_gpu_events, tasks, meta, live, created_at, updated_at) VALUES"
                    " (:t, 'kept', 'ready', 'h', 1234, 0, 0, 0, 0, 0, 0, '[]', '{}', false, CURRENT_TIMESTAMP,"
                    " CURRENT_TIMESTAMP)"
                ),
                {"t": team_id},
            )
        upgrade(url)
        with sa.orm.Session(engine) as s:
            team = team_for_key(s, "rlvr_old-key")
            assert team is not None and team.name == "old"
            (key,) = team_keys(s, team.id)
            assert key.name == "first key" and key.prefix is None and key.revoked_at is None
            # the team's rows survive the table's rebuild (SQLite copies it)
            (trace,) = s.scalars(sa.select(Trace).where(Trace.team_id == team.id)).all()
            assert trace.name == "kept" and trace.stored_bytes == 1234
        engine.dispose()
    finally:
        if pg_name:
            _drop_pg_database(pg_name)


def test_cli_keys_list_create_revoke(env, team_key):
    from backend.auth import team_for_key
    from backend.store.db import session_scope

    runner = CliRunner()
    with session_scope() as s:
        team = team_for_key(s, team_key).name
    made = runner.invoke(app, ["keys", "create", team, "--name", "nightly", "--json"])
    assert made.exit_code == 0, made.output
    record = __import__("orjson").loads(made.output)
    listed = runner.invoke(app, ["keys", "list", team])
    assert listed.exit_code == 0 and "nightly" in listed.output and "2 active key(s) of 2" in listed.output
    assert record["api_key"] not in listed.output and team_key not in listed.output
    revoked = runner.invoke(app, ["keys", "revoke", team, str(record["id"])])
    assert revoked.exit_code == 0 and "revoked key" in revoked.output, revoked.output
    with session_scope() as s:
        assert team_for_key(s, record["api_key"]) is None and team_for_key(s, team_key) is not None
    unknown = runner.invoke(app, ["keys", "revoke", team, "999999"])
    assert unknown.exit_code == 2 and "no key 999999" in unknown.output
