"""Issue 32, item 5, against a stub API: revoking the key the session is signed in with
asks first, naming it as this session's key; confirmed, the key is revoked, the session
cookie cleared and the browser sent to the sign-in page, which says why. Any 401 a
callback meets does the same, never showing the API's raw wording."""

from __future__ import annotations

import json

import httpx

from tests.dashboard.test_dashboard_client import _callback
from tests.dashboard.test_dashboard_team import client, output_of, stub, team_page  # noqa: F401

OWN = {"index": 1, "type": "key-revoke"}


def _side(r) -> dict:
    """The props a callback set outside its outputs (dash.set_props)."""
    return r.get_json().get("sideUpdate") or {}


def test_revoking_the_sessions_key_asks_then_signs_out(client, stub):  # noqa: F811
    team_page(client)
    stub.routes[("DELETE", "/api/v1/keys/1")] = httpx.Response(204)
    r = _callback(
        client,
        output_of(client, '{"index":["ALL"],"type":"key-revoke"}'),
        [{"id": OWN, "property": "n_clicks", "value": 1}],
        [{"id": "team-refresh", "property": "data", "value": 0}],
        ['{"index":1,"type":"key-revoke"}.n_clicks'],
    )
    resp = {k.split("@")[0]: v for k, v in r.get_json()["response"].items()}
    assert resp["key-revoke-confirm"]["displayed"] is True
    assert "key of this session" in resp["key-revoke-confirm"]["message"]
    assert resp["key-revoke-pending"]["data"] == 1
    assert not any(q.method == "DELETE" for q in stub.requests)  # nothing revoked before the confirmation

    r = _callback(
        client,
        output_of(client, "key-revoke-confirm"),
        [{"id": "key-revoke-confirm", "property": "submit_n_clicks", "value": 1}],
        [{"id": "key-revoke-pending", "property": "data", "value": 1}],
        ["key-revoke-confirm.submit_n_clicks"],
    )
    assert stub.requests[-1].method == "DELETE" and stub.requests[-1].url.path == "/api/v1/keys/1"
    assert _side(r)["session-ended"]["data"].startswith("/sign-in?ended=revoked")
    assert "rlvr_session=;" in r.headers.get("Set-Cookie", "")  # the cookie cleared


def test_a_401_in_a_callback_sends_the_browser_to_sign_in(client, stub):  # noqa: F811
    team_page(client)
    stub.routes[("GET", "/api/v1/keys")] = httpx.Response(
        401, json={"detail": {"message": "missing, invalid or revoked API key (send it as X-API-Key)"}}
    )
    r = client.post(
        "/_dash-update-component",
        json={
            "output": output_of(client, "team-refresh"),
            "outputs": [
                {"id": "team-keys", "property": "children"},
                {"id": "team-storage", "property": "children"},
            ],
            "inputs": [{"id": "team-refresh", "property": "data", "value": 1}],
            "state": [],
            "changedPropIds": ["team-refresh.data"],
        },
        headers={"Referer": "http://localhost/team"},
    )
    assert _side(r)["session-ended"]["data"] == "/sign-in?ended=refused&next=%2Fteam"
    assert "revoked API key" not in json.dumps(r.get_json()["response"])
    assert "rlvr_session=;" in r.headers.get("Set-Cookie", "")


def test_the_sign_in_page_says_why_the_session_ended(client):  # noqa: F811
    _r, page = team_page(client, "/sign-in")
    assert "session has ended" not in json.dumps(page)
    r = _callback(
        client,
        ".._pages_content.children..._pages_store.data..",
        [
            {"id": "_pages_location", "property": "pathname", "value": "/sign-in"},
            {"id": "_pages_location", "property": "search", "value": "?ended=revoked&next=%2Fteam"},
        ],
        changed=["_pages_location.pathname"],
    )
    text = json.dumps(r.get_json()["response"]["_pages_content"]["children"])
    assert "You revoked the API key this session was signed in with" in text
