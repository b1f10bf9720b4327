"""The signed-in team, kept in Flask's signed session cookie, and an API client for it.

The cookie is HTTP-only and signed with the server's secret key (env
`RLVR_SECRET_KEY`, else a random one per process: sessions then end on restart). It
holds the team's API key and name; it is signed, not encrypted, which is fine for a
key the user typed into this browser, and the page's JavaScript never sees it.
"""

from __future__ import annotations

import flask

from dashboard.api.client import ApiClient

API_BASE_URL = "RLVR_API_BASE_URL"
API_HTTP_CLIENT = "RLVR_API_HTTP_CLIENT"


def api_key() -> str | None:
    return flask.session.get("api_key")


def team_name() -> str | None:
    return flask.session.get("team_name")


def sign_in(key: str, team: dict) -> None:
    flask.session.clear()
    flask.session["api_key"] = key
    flask.session["team_name"] = team.get("name") or str(team.get("id", ""))
    flask.session.permanent = True


def sign_out() -> None:
    flask.session.clear()


def client_for(key: str | None) -> ApiClient:
    """An API client for the app serving this request, acting with `key`."""
    cfg = flask.current_app.config
    return ApiClient(cfg[API_BASE_URL], key, http=cfg.get(API_HTTP_CLIENT))


def api() -> ApiClient:
    """An API client acting as the signed-in team (callbacks and layouts only)."""
    return client_for(api_key())
