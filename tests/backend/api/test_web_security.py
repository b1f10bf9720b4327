"""Web hardening: same-origin redirects after sign-in, session cookies that carry no API
key (sealed with the deployment's persisted secret, Secure over HTTPS), security headers
on every answer, API docs served without a CDN, FastAPI's own 422s in the ErrorResponse
shape, and `q` matching literally (LIKE wildcards escaped)."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import uuid

import httpx
import pytest

from dashboard.api import session
from tests.dashboard.test_dashboard_client import KEY, StubApi, _callback, _find

# -- redirects ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "/\\evil.example",
        "/%5Cevil.example",
        "/%5cevil.example",
        "/\\/evil.example",
        "//evil.example",
        "/%2F%2Fevil.example",
        "/%2f/evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        "/\t/evil.example",
        "/\n/evil.example",
        "/x\\y",
        "evil.example",
        "",
        None,
    ],
)
def test_sign_in_never_redirects_off_origin(target):
    assert session.safe_next(target) == "/traces"


@pytest.mark.parametrize("target", ["/traces/7", "/traces/7/gpu", "/traces?q=run%20a", "/compare?a=1&b=2"])
def test_sign_in_keeps_same_origin_paths(target):
    assert session.safe_next(target) == target


# -- sessions ----------------------------------------------------------------------------


@pytest.fixture
def stub():
    s = StubApi()
    s.routes[("GET", "/api/v1/me")] = httpx.Response(200, json={"team": {"id": 1, "name": "infra"}})
    s.routes[("GET", "/api/v1/traces")] = lambda r: httpx.Response(200, json={"items": [], "total": 0})
    return s


def dash_app(stub, secret="test-secret-" + "x" * 32):
    from dashboard.app import create_dash

    return create_dash(
        "http://api.test", http_client=httpx.Client(transport=httpx.MockTransport(stub)), secret_key=secret
    )


def sign_in(client, headers=None, **kwargs):
    return client.post(
        "/_dash-update-component",
        json={
            "output": "..sign-in-message.children...sign-in-redirect.href..",
            "outputs": [
                {"id": "sign-in-message", "property": "children"},
                {"id": "sign-in-redirect", "property": "href"},
            ],
            "inputs": [
                {"id": "sign-in-submit", "property": "n_clicks", "value": 1},
                {"id": "sign-in-key", "property": "n_submit", "value": 0},
            ],
            "state": [
                {"id": "sign-in-key", "property": "value", "value": KEY},
                {"id": "sign-in-next", "property": "data", "value": "/%5Cevil.example"},
            ],
            "changedPropIds": ["sign-in-submit.n_clicks"],
        },
        headers=headers or {},
        **kwargs,
    )


def test_sign_in_page_drops_a_foreign_next(stub):
    app = dash_app(stub)
    client = app.server.test_client()
    client.get("/_dash-layout")
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": "/sign-in"},
            {"id": "_pages_location", "property": "search", "value": "?next=/%5Cevil.example"},
        ],
        changed=["_pages_location.pathname"],
    )
    page = r.get_json()["response"]["_pages_content"]["children"]
    assert _find(page, "sign-in-next")["props"]["data"] == "/traces"
    r = sign_in(client)
    assert r.get_json()["response"]["sign-in-redirect"]["href"] == "/traces"


def test_cookie_carries_a_sealed_key_not_the_key(stub):
    app = dash_app(stub)
    client = app.server.test_client()
    client.get("/_dash-layout")
    r = sign_in(client)
    cookie = r.headers["Set-Cookie"]
    assert "rlvr_session=" in cookie and "HttpOnly" in cookie and "Secure" not in cookie
    value = cookie.split("rlvr_session=", 1)[1].split(";", 1)[0]
    payload = app.server.session_interface.get_signing_serializer(app.server).loads(value)
    assert KEY not in value and KEY not in json.dumps(payload)
    assert session.KEY_FIELD in payload and "api_key" not in payload
    with app.server.test_request_context():
        assert session.open_key(payload[session.KEY_FIELD]) == KEY
        # tampered or raw tokens open to nothing
        token = payload[session.KEY_FIELD]
        assert session.open_key(token[:-4] + ("AAAA" if token[-4:] != "AAAA" else "BBBB")) is None
        assert session.open_key(KEY) is None
    # the signed-in session works, and a server with another secret cannot open it
    assert client.get("/download/simulations/5/chrome-trace").status_code != 401
    other = dash_app(stub, secret="another-secret-" + "y" * 32)
    with other.server.test_request_context():
        assert session.open_key(payload[session.KEY_FIELD]) is None


def test_cookie_is_secure_over_https(stub):
    app = dash_app(stub)
    client = app.server.test_client()
    client.get("/_dash-layout")
    assert "Secure" in sign_in(client, {"X-Forwarded-Proto": "https"}).headers["Set-Cookie"]  # behind a proxy
    assert "Secure" in sign_in(client, base_url="https://localhost").headers["Set-Cookie"]  # served over TLS
    assert "Secure" not in sign_in(client).headers["Set-Cookie"]


def test_session_secret_is_persisted_0600_and_shared(tmp_path):
    from backend.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", secret_key=None)
    secrets_seen: list[str] = []
    threads = [
        threading.Thread(target=lambda: secrets_seen.append(Settings(data_dir=tmp_path / "data").session_secret()))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(secrets_seen)) == 1 and len(secrets_seen[0]) >= 32  # concurrent first starts agree
    assert settings.session_secret() == secrets_seen[0]  # a restart reads the same
    mode = stat.S_IMODE(os.stat(settings.secret_key_file).st_mode)
    assert mode == 0o600, oct(mode)
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["secret_key"]  # no temporary left
    assert Settings(data_dir=tmp_path / "data", secret_key="s" * 40).session_secret() == "s" * 40


def test_server_signs_with_the_settings_secret(env, monkeypatch):
    from backend.settings import get_settings
    from rlvr_explorer.server import create_server

    monkeypatch.delenv("RLVR_SECRET_KEY", raising=False)
    get_settings.cache_clear()
    expected = get_settings().session_secret()
    app = create_server()
    mount = next(r for r in app.routes if getattr(r, "path", None) == "")
    flask_app = mount.app.app.app  # the Origin check, around a2wsgi's WSGIMiddleware, around the Flask app
    assert flask_app.secret_key == expected
    assert create_server().routes[-1].app.app.app.secret_key == expected  # a second process agrees


# -- headers and docs ---------------------------------------------------------------------


@pytest.fixture()
def server_client(env):
    from fastapi.testclient import TestClient

    from rlvr_explorer.server import create_server

    with TestClient(create_server()) as c:
        yield c


def test_security_headers_on_api_docs_and_dashboard(server_client):
    for path in ("/api/v1/health", "/api/v1/docs", "/api/v1/traces", "/sign-in", "/_dash-layout", "/nope"):
        r = server_client.get(path)
        h = r.headers
        csp = h.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, (path, csp)
        assert "'unsafe-eval'" in csp  # Dash's plotly bundle needs it
        assert h.get("x-frame-options") == "DENY" and h.get("x-content-type-options") == "nosniff", path
        assert h.get("referrer-policy") == "same-origin", path
        assert "strict-transport-security" not in h
    r = server_client.get("/api/v1/health", headers={"X-Forwarded-Proto": "https"})
    assert r.headers["strict-transport-security"].startswith("max-age=")


def test_docs_pages_load_their_assets_from_the_app(server_client):
    for path in ("/api/v1/docs", "/api/v1/redoc"):
        page = server_client.get(path)
        assert page.status_code == 200
        urls = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert urls and all(u.startswith("/api/v1/") for u in urls), urls  # nothing from a CDN
        for u in urls:
            asset = server_client.get(u)
            assert asset.status_code == 200 and len(asset.content) > 500, u
    assert "openapi" in server_client.get("/api/v1/openapi.json").json()


# -- FastAPI's own validation errors, LIKE wildcards -----------------------------------------


@pytest.mark.parametrize(
    "method, path, kwargs, field",
    [
        ("GET", "/api/v1/traces", {"params": {"limit": "many"}}, "limit"),
        ("GET", "/api/v1/traces", {"params": {"offset": "-1"}}, "offset"),
        ("GET", "/api/v1/traces/abc", {}, "trace_id"),
        (
            "POST",
            "/api/v1/simulations",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            "body",
        ),
        ("POST", "/api/v1/simulations", {"json": {"trace_id": "1"}}, "trace_id"),
        ("POST", "/api/v1/traces", {"data": {"name": "x"}}, "files"),
    ],
)
def test_validation_errors_follow_the_error_schema(api, method, path, kwargs, field):
    r = api.request(method, path, **kwargs)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, dict) and set(detail) <= {"message", "file", "line", "field"}, detail
    assert detail["field"] == field and field in detail["message"], detail


def test_q_matches_percent_and_underscore_literally(api, tmp_path):
    from tests.helpers import jsonl, synthetic_rows

    names = ["100% done", "1000 done", "a_b", "axb"]
    for i, name in enumerate(names):
        rows = synthetic_rows(steps=1, groups=2, n=2, seed=i + 1)[0]
        r = api.post(
            "/api/v1/traces",
            files=[("files", ("packed_lengths_step_0.jsonl", jsonl(rows), "application/octet-stream"))],
            data={"name": name},
        )
        assert r.status_code == 201, r.text

    def found(q):
        return sorted(t["name"] for t in api.get("/api/v1/traces", params={"q": q}).json()["items"])

    assert found("%") == ["100% done"]
    assert found("_") == ["a_b"]
    assert found("0% d") == ["100% done"]
    assert found("a_") == ["a_b"]
    assert found("\\") == []
    assert found("done") == ["100% done", "1000 done"]
    assert found(uuid.uuid4().hex) == []


def test_a_team_found_by_key_is_cached_and_an_unknown_key_is_not(env):
    """GET requests name their team with every call: a found team is kept for
    key_cache_s (no query), an unknown key asks the database every time."""
    from backend.auth import cached_caller, create_team, lookup_caller
    from backend.store.db import session_scope

    with session_scope() as s:
        team, key = create_team(s, f"cached-{uuid.uuid4().hex[:8]}")
        team_id = team.id
    assert cached_caller(key) is None
    found = lookup_caller(key)
    assert found is not None and found.team.id == team_id
    again = cached_caller(key)
    assert again is found and again.team.name.startswith("cached-")
    assert lookup_caller("rlvr_not-a-key") is None and cached_caller("rlvr_not-a-key") is None
