"""The Origin check on state-changing dashboard requests (rlvr_explorer.server): the
deployment's configured origins (RLVR_PUBLIC_URL, RLVR_TRUSTED_ORIGINS) pass, and so does
the request's own origin — scheme as the request came (or as a proxy's X-Forwarded-Proto
says) and Host — when that host is one the deployment answers to (configured, loopback
or an IP address), never a name a foreign page chose (DNS rebinding); a foreign, null or
missing origin is a 403; reads and the key-authenticated API are not concerned."""

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
    monkeypatch.setenv("RLVR_PUBLIC_URL", "https://testserver/explorer")  # the test client's host
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
        {"Origin": "https://testserver", "Host": "127.0.0.1:8000"},  # a proxy that rewrites Host
        {"Origin": "http://127.0.0.1:8000", "Host": "127.0.0.1:8000"},
        {"Origin": "http://localhost:8050", "Host": "localhost:8050"},
        {"Origin": "http://[::1]:8000", "Host": "[::1]:8000"},
        {"Origin": "http://10.1.2.3:8000", "Host": "10.1.2.3:8000"},
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
        # DNS rebinding: a foreign name resolving to this server, sent as Host and Origin
        {"Origin": "http://evil.example:8000", "Host": "evil.example:8000"},
        {"Referer": "http://evil.example/x", "Host": "evil.example"},
        {"Origin": "http://127.0.0.1:8000", "Host": "evil.example"},
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


@pytest.mark.parametrize("method", ["TRACE", "PUT", "DELETE"])
def test_api_paths_never_meet_the_dashboards_guard(server, method):
    r = server.request(method, "/api/v1/traces")
    assert r.status_code == 405, r.text  # the API's answer, not the dashboard's 403
    assert r.headers["allow"] == "GET, POST"


def test_without_a_public_url_only_local_and_configured_hosts_pass(env, monkeypatch):
    from fastapi.testclient import TestClient

    from backend.store.db import reset_caches
    from rlvr_explorer.server import create_server

    monkeypatch.delenv("RLVR_PUBLIC_URL", raising=False)
    monkeypatch.delenv("RLVR_TRUSTED_ORIGINS", raising=False)
    reset_caches()
    with TestClient(create_server()) as c:
        named = c.post("/_dash-update-component", json=SIGN_OUT, headers={"Origin": "http://testserver"})
        assert named.status_code == 403, named.text
        assert "RLVR_PUBLIC_URL" in named.json()["detail"]["message"]
        local = {"Origin": "http://127.0.0.1:8000", "Host": "127.0.0.1:8000"}
        assert c.post("/_dash-update-component", json=SIGN_OUT, headers=local).status_code == 200


def test_a_public_url_that_is_not_a_url_is_refused_at_start(monkeypatch):
    from pydantic import ValidationError

    from backend.settings import Settings

    with pytest.raises(ValidationError, match="RLVR_PUBLIC_URL"):
        Settings(public_url="rlvr.example.com")
    assert Settings(public_url="https://RLVR.example.com/app/").trusted_origin_list == ["https://rlvr.example.com"]
