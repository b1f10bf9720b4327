"""The Team page against a stub API: storage against the quota, the keys (never a key
itself in the table), a new key shown once, revoking, names escaped; a 401 (the key
revoked) ends the session."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.dashboard.test_dashboard_client import KEY, StubApi, _callback, _find

KEYS = [
    {
        "id": 3,
        "name": "<script>alert(1)</script>",
        "prefix": "rlvr_AbCdEfG",
        "created_at": "2026-12-01T10:00:00Z",
        "last_used_at": None,
        "revoked_at": None,
        "active": True,
        "current": False,
    },
    {
        "id": 1,
        "name": "first key",
        "prefix": None,
        "created_at": "2026-11-01T10:00:00Z",
        "last_used_at": "2026-12-02T09:00:00Z",
        "revoked_at": None,
        "active": True,
        "current": True,
    },
]


@pytest.fixture
def stub():
    s = StubApi()
    s.routes[("GET", "/api/v1/me")] = httpx.Response(200, json={"team": {"id": 1, "name": "infra"}})
    s.routes[("GET", "/api/v1/keys")] = lambda r: httpx.Response(200, json={"items": KEYS})
    s.routes[("GET", "/api/v1/storage")] = httpx.Response(
        200, json={"used_bytes": 3 * 1024**3, "quota_bytes": 4 * 1024**3, "remaining_bytes": 1024**3, "traces": 7}
    )
    return s


@pytest.fixture
def client(stub):
    from dashboard.app import create_dash

    app = create_dash("http://api.test", http_client=httpx.Client(transport=httpx.MockTransport(stub)))
    c = app.server.test_client()
    r = _callback(
        c,
        "..sign-in-message.children...sign-in-redirect.href..",
        [
            {"id": "sign-in-submit", "property": "n_clicks", "value": 1},
            {"id": "sign-in-key", "property": "n_submit", "value": 0},
        ],
        [
            {"id": "sign-in-key", "property": "value", "value": KEY},
            {"id": "sign-in-next", "property": "data", "value": "/team"},
        ],
        ["sign-in-submit.n_clicks"],
    )
    assert r.get_json()["response"]["sign-in-redirect"]["href"] == "/team"
    return c


def team_page(client, path: str = "/team"):
    """The page at `path` (the Team page by default) as the browser gets it."""
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": path},
            {"id": "_pages_location", "property": "search", "value": ""},
        ],
        changed=["_pages_location.pathname"],
    )
    return r, r.get_json()["response"]["_pages_content"]["children"]


def test_page_shows_storage_and_keys_not_the_keys(client):
    _r, page = team_page(client)
    text = json.dumps(page, ensure_ascii=False)
    assert "3.0 GB used by 7 trace(s) of a 4.0 GB quota" in text
    keys = _find(page, "team-keys")
    rows = [r for r in json.loads(json.dumps(keys))["props"]["children"]["props"]["children"][1]["props"]["children"]]
    assert [r["props"]["data-key-id"] for r in rows] == ["3", "1"]
    assert "<script>alert(1)</script>" in text  # a text child, which React escapes
    assert "this session" in text and "rlvr_AbCdEfG…" in text and KEY not in text


def output_of(client, input_id) -> str:
    """A callback's registered output (allow_duplicate outputs carry a suffix)."""
    deps = client.get("/_dash-dependencies").get_json()
    return next(d["output"] for d in deps if any(i["id"] == input_id for i in d["inputs"]))


def test_new_key_is_shown_once_and_revoking_refreshes(client, stub):
    made = {**KEYS[0], "id": 9, "name": "ci", "key": "rlvr_the-new-key"}
    stub.routes[("POST", "/api/v1/keys")] = lambda r: httpx.Response(201, json=made)
    stub.routes[("DELETE", "/api/v1/keys/3")] = httpx.Response(204)
    team_page(client)
    r = _callback(
        client,
        output_of(client, "key-create"),
        [{"id": "key-create", "property": "n_clicks", "value": 1}],
        [
            {"id": "key-name", "property": "value", "value": " ci "},
            {"id": "team-refresh", "property": "data", "value": 0},
        ],
        ["key-create.n_clicks"],
    )
    resp = r.get_json()["response"]
    refresh = next(v for k, v in resp.items() if k.startswith("team-refresh"))
    assert "rlvr_the-new-key" in json.dumps(resp["key-new"]) and refresh["data"] == 1
    assert json.loads(stub.requests[-1].content) == {"name": "ci"}
    r = _callback(
        client,
        output_of(client, '{"index":["ALL"],"type":"key-revoke"}'),
        [{"id": {"type": "key-revoke", "index": 3}, "property": "n_clicks", "value": 1}],
        [{"id": "team-refresh", "property": "data", "value": 1}],
        ['{"index":3,"type":"key-revoke"}.n_clicks'],
    )
    resp = r.get_json()["response"]
    message, refresh = (next(v for k, v in resp.items() if k.startswith(p)) for p in ("key-message", "team-refresh"))
    assert "Key 3 revoked" in json.dumps(message) and refresh["data"] == 2
    assert stub.requests[-1].method == "DELETE" and stub.requests[-1].url.path == "/api/v1/keys/3"


def test_a_revoked_key_ends_the_session(client, stub):
    stub.routes[("GET", "/api/v1/storage")] = httpx.Response(401, json={"detail": {"message": "revoked API key"}})
    r, page = team_page(client)
    assert "sign-in?next=" in json.dumps(page)
    assert "rlvr_session=;" in r.headers.get("Set-Cookie", "")  # the cookie cleared
    stub.routes[("GET", "/api/v1/storage")] = httpx.Response(200, json={"used_bytes": 0, "quota_bytes": None})
    _r, again = team_page(client)
    assert "sign-in?next=" in json.dumps(again)  # signed out: no API call made
