"""The Origin check on state-changing dashboard requests (rlvr_explorer.server): the
deployment's own origin — scheme as the request came (or as a proxy's X-Forwarded-Proto
says) and Host — passes, as do RLVR_TRUSTED_ORIGINS; a foreign, null or missing origin
is a 403; reads and the key-authenticated API are not concerned."""

from __future__ import annotations

import pytest

SIGN_OUT = {
    "output": "nav-redirect.href",
    "outputs": {"id": "nav-redirect", "property": "href"},
    "inputs": [{"id": "sign-out", "property": "n_clicks", "value": 1}],
    "state": [],
    "changedPropIds": ["sign-out.n_clicks"],
}


@pytest.fixture()
def server(env, monkeypatch):
    from fastapi.testclient import TestClient

    from backend.store.db import reset_caches
    from rlvr_explorer.server import create_server

    monkeypatch.setenv("RLVR_TRUSTED_ORIGINS", "https://explorer.lab, https://other.lab/")
    reset_caches()
    with TestClient(create_server()) as c:  # base URL http://testserver
        yield c


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://testserver"},
        {"Referer": "http://testserver/traces?q=1"},
        {"Origin": "https://testserver", "X-Forwarded-Proto": "https"},
        {"Origin": "https://explorer.lab"},
        {"Origin": "https://OTHER.lab"},
    ],
    ids=str,
)
def test_own_and_trusted_origins_pass(server, headers):
    r = server.post("/_dash-update-component", json=SIGN_OUT, headers=headers)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://testserver.evil.example"},
        {"Origin": "http://testserver", "X-Forwarded-Proto": "https"},  # http page, https deployment
        {"Origin": "https://explorer.lab.evil.example"},
        {"Referer": "http://evil.example/http://testserver/"},
        {"Origin": "http://evil.example", "Referer": "http://testserver/traces"},  # Origin wins
        {},
    ],
    ids=str,
)
def test_foreign_null_or_missing_origins_are_refused(server, headers):
    r = server.post("/_dash-update-component", json=SIGN_OUT, headers=headers)
    assert r.status_code == 403, r.text
    assert r.json()["detail"]["message"]


def test_reads_and_the_api_are_not_concerned(server, team_key):
    assert server.get("/traces", headers={"Origin": "http://evil.example"}).status_code == 200
    r = server.post(
        "/api/v1/keys", json={"name": "x"}, headers={"X-API-Key": team_key, "Origin": "http://evil.example"}
    )
    assert r.status_code == 201  # authenticated by its key header, which a foreign page cannot add
