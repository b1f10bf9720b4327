"""A callback that raises shows a message on the page (dashboard.app's `on_error`), and
the test servers' callback log records it (the browser suite's callback coverage)."""

from __future__ import annotations

import json

import pytest

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.app import CALLBACK_ERROR, CALLBACK_LOG_ENV, create_dash

NAV = "..top-nav.children...team-box.children.."


def _fire_nav(client):
    """The navigation bar's callback, as the renderer sends it on a page load."""
    body = {
        "output": NAV,
        "outputs": [{"id": "top-nav", "property": "children"}, {"id": "team-box", "property": "children"}],
        "inputs": [{"id": "_pages_location", "property": "pathname", "value": "/traces"}],
        "state": [],
        "changedPropIds": ["_pages_location.pathname"],
    }
    return client.post("/_dash-update-component", json=body)


def _message(response) -> str:
    """The text the page shows in its callback-error box (from the response's side update)."""
    alert = response.get_json()["sideUpdate"][CALLBACK_ERROR]["children"]
    assert alert["props"]["role"] == "alert" and "alert-error" in alert["props"]["className"]
    return alert["props"]["children"]


@pytest.mark.parametrize(
    ("error", "shown", "hidden"),
    [
        (RuntimeError("secret internals"), "an unexpected error on the server", "secret internals"),
        (ApiError(500, "the API is down"), "the API is down", "Traceback"),
    ],
)
def test_a_failing_callback_writes_a_message_on_the_page(monkeypatch, tmp_path, error, shown, hidden):
    log = tmp_path / "callbacks.jsonl"
    monkeypatch.setenv(CALLBACK_LOG_ENV, str(log))
    app = create_dash("http://api.test")
    client = app.server.test_client()
    # the box the message goes to is on every page, above the page's content
    assert f'"id": "{CALLBACK_ERROR}"' in json.dumps(client.get("/_dash-layout").get_json())

    def broken():
        raise error

    monkeypatch.setattr(session, "team_name", broken)
    r = _fire_nav(client)
    assert r.status_code == 200  # not a 500 the page would not show
    text = _message(r)
    assert "could not be updated" in text and shown in text and hidden not in text
    assert r.get_json()["response"] == {}  # the widgets keep what they showed
    recorded = [json.loads(line) for line in log.read_text().splitlines()]
    assert recorded[-1]["output"] == NAV and recorded[-1]["error"].startswith(type(error).__name__)
    assert recorded[-1]["updated"]  # (the message)

    # a callback that works: no message, and recorded without an error
    monkeypatch.setattr(session, "team_name", lambda: None)
    r = _fire_nav(client)
    assert r.status_code == 200 and "sideUpdate" not in r.get_json()
    assert json.loads(log.read_text().splitlines()[-1]) == {
        "output": NAV,
        "status": 200,
        "updated": True,
        "error": None,
    }


def test_a_failing_callback_of_one_output_writes_its_message_too(monkeypatch):
    client = create_dash("http://api.test").server.test_client()

    def broken():
        raise RuntimeError("no")

    monkeypatch.setattr(session, "sign_out", broken)
    body = {
        "output": "nav-redirect.href",
        "outputs": {"id": "nav-redirect", "property": "href"},
        "inputs": [{"id": "sign-out", "property": "n_clicks", "value": 1}],
        "state": [],
        "changedPropIds": ["sign-out.n_clicks"],
    }
    r = client.post("/_dash-update-component", json=body)
    assert r.status_code == 200 and "could not be updated" in _message(r)
