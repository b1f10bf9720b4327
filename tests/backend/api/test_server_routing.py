"""The single-machine server (API + dashboard at /): an unknown API path is a 404, a
known one asked with another method a 405 naming its own methods in `Allow` — the
dashboard's mount, which matches every path and method, never answers for /api/."""

from __future__ import annotations

import pytest


@pytest.fixture()
def server(env):
    from fastapi.testclient import TestClient

    from rlvr_explorer.server import create_server

    with TestClient(create_server()) as c:
        yield c


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE", "TRACE"])
@pytest.mark.parametrize("path", ["/api/v1/no-such-thing", "/api/v1/traces/1/nothing/here", "/api/v2/traces"])
def test_unknown_api_paths_are_404_for_every_method(server, method, path):
    r = server.request(method, path, headers={"Origin": "http://evil.example"})
    assert r.status_code == 404, (r.status_code, r.headers.get("allow"), r.text)
    assert "allow" not in r.headers
    assert r.headers["content-type"].startswith("application/json")
    assert path in r.json()["detail"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/api/v1/traces", "GET, POST"),
        ("DELETE", "/api/v1/health", "GET"),
        ("POST", "/api/v1/me", "GET"),
        ("TRACE", "/api/v1/traces", "GET, POST"),
        ("TRACE", "/api/v1/me", "GET"),
        ("TRACE", "/api/v1/traces/1", None),
    ],
)
def test_known_api_paths_with_another_method_are_405_with_their_methods(server, team_key, method, path, allowed):
    r = server.request(method, path, headers={"X-API-Key": team_key})
    assert r.status_code == 405, r.text  # TRACE too: not the dashboard's origin guard (403)
    methods = r.headers["allow"].split(", ")
    if allowed is not None:
        assert r.headers["allow"] == allowed
    assert "TRACE" not in methods and method not in methods
    assert method in r.json()["detail"]["message"]


def test_the_dashboard_still_answers_its_own_paths(server):
    assert server.get("/traces").status_code == 200
    assert server.get("/api/v1/health").json() == {"status": "ok"}
