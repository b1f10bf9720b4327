"""The Dash app: a multi-page client of the REST API.

    dash_app = create_dash("http://127.0.0.1:8000")       # API root (with or without /api/v1)
    dash_app.server                                        # the Flask WSGI app to mount

Pages live in `dashboard/pages/` (one module each, `dash.register_page`); navigation is
generated from the page registry (see `dashboard.views.components`). The app never opens
the database: every figure is built from API payloads fetched with the signed-in
team's key (sealed in Flask's session cookie, see `dashboard.api.session`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from datetime import timedelta
from pathlib import Path

import dash
import flask
import httpx
from dash import dcc, html

from dashboard import callbacks
from dashboard.api.client import ApiError
from dashboard.api.session import API_BASE_URL, API_HTTP_CLIENT, SESSION_ENDED, SessionInterface
from dashboard.server import compression, downloads
from dashboard.views import components

HERE = Path(__file__).resolve().parent
LOG = logging.getLogger(__name__)
# Where a failed callback says so: above the page, cleared when the page changes.
CALLBACK_ERROR = "callback-error"
# A file to which each callback request's output id and outcome is appended (one JSON
# line each): the browser suite's callback coverage (tests/dashboard/browser/test_browser_callbacks_coverage.py).
CALLBACK_LOG_ENV = "RLVR_DASH_CALLBACK_LOG"


def _layout():
    # A function, so each full page load renders with the current session.
    return html.Div(
        [
            dcc.Location(id="nav-redirect", refresh=True),
            # a sign-in URL put here (the API refused the session's key) is opened at once
            dcc.Store(id=SESSION_ENDED),
            html.Div(id=f"{SESSION_ENDED}-redirect", hidden=True),
            html.Header(
                className="topbar",
                children=[
                    dcc.Link("RLVR Explorer", href=components.href("/traces"), className="brand"),
                    html.Nav(id="top-nav", className="top-nav"),
                    html.Div(id="team-box", className="team-box"),
                ],
            ),
            html.Main(
                [
                    html.Div(id=CALLBACK_ERROR, className="callback-error"),
                    dash.page_container,
                ],
                className="content",
            ),
        ]
    )


def create_dash(
    api_base_url: str,
    *,
    requests_pathname_prefix: str = "/",
    server: flask.Flask | bool | None = None,
    http_client: httpx.Client | None = None,
    secret_key: str | None = None,
) -> dash.Dash:
    """Build the dashboard.

    api_base_url: where the REST API answers (e.g. http://127.0.0.1:8000).
    requests_pathname_prefix: the URL prefix the browser sees when the app is mounted
        under a path (routes are still served at "/" of the WSGI app).
    server: an existing Flask app to attach to (default: a new one).
    http_client: an httpx.Client for the API (tests pass one with a MockTransport).
    secret_key: signs the session cookie and seals the API key in it; the server passes
        the deployment's (`Settings.session_secret`), shared by restarts and processes.
        Without one: RLVR_SECRET_KEY, else a random one (sessions end with the process).
    """
    flask_server = server if isinstance(server, flask.Flask) else flask.Flask("dashboard")
    flask_server.secret_key = (
        secret_key or os.environ.get("RLVR_SECRET_KEY") or flask_server.secret_key or secrets.token_hex(32)
    )
    flask_server.session_interface = SessionInterface()
    flask_server.config.update(
        SESSION_COOKIE_NAME="rlvr_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=12),
    )
    flask_server.config[API_BASE_URL] = api_base_url
    flask_server.config[API_HTTP_CLIENT] = http_client

    prefix = requests_pathname_prefix if requests_pathname_prefix.endswith("/") else requests_pathname_prefix + "/"
    app = dash.Dash(
        "dashboard",
        server=flask_server,  # type: ignore[arg-type]  # Dash documents a Flask app here; its annotation omits it
        use_pages=True,
        pages_folder=str(HERE / "pages"),
        assets_folder=str(HERE / "assets"),
        requests_pathname_prefix=prefix,
        routes_pathname_prefix="/",
        suppress_callback_exceptions=True,
        title="RLVR Explorer",
        update_title="",  # the tab title stays as it is while callbacks run
        on_error=_on_callback_error,
    )
    # The browser must not call plotly's version server (no internet, and no console errors).
    app._dev_tools["disable_version_check"] = True
    app.layout = _layout
    _most_specific_templates_first()
    callbacks.register(app)
    # a failed callback's message belongs to the page it was on
    app.clientside_callback(
        "function(_path) { return null; }",
        dash.Output(CALLBACK_ERROR, "children"),
        dash.Input("_pages_location", "pathname"),
    )
    downloads.register(flask_server)
    compression.register(flask_server)
    if os.environ.get(CALLBACK_LOG_ENV):
        _record_callbacks(flask_server, Path(os.environ[CALLBACK_LOG_ENV]))
    _register_component_assets(app)
    return app


def _on_callback_error(exc: Exception) -> None:
    """A callback that raised: the page says so above its content (a widget is never left
    empty without a word, nor a request answered 500 that the page does not show); the
    server log keeps the traceback. Its outputs stay as they were."""
    outputs = [o["id"] for o in _flat(dash.ctx.outputs_list)]
    LOG.error("dashboard callback for %s failed", outputs, exc_info=exc)
    if flask.has_request_context():
        flask.g.dash_callback_error = f"{type(exc).__name__}: {exc}"
    why = exc.message if isinstance(exc, ApiError) else "an unexpected error on the server (its log has the details)"
    dash.set_props(
        CALLBACK_ERROR,
        {"children": components.alert(f"Part of this page could not be updated: {why}. Reload the page to try again.")},
    )


def _flat(outputs) -> list[dict]:
    """Dash's outputs_list: one dict (one output), or a list of dicts and lists (pattern-matched)."""
    items = [outputs] if isinstance(outputs, dict) else outputs or []
    return [o for item in items for o in (item if isinstance(item, list) else [item])]


def _record_callbacks(server: flask.Flask, path: Path) -> None:
    """Append each callback request's output id, HTTP status, whether it changed anything
    on the page and any error the callback raised (set by `_on_callback_error`) to `path`."""
    lock = threading.Lock()

    @server.after_request
    def record(response: flask.Response) -> flask.Response:
        if flask.request.path.endswith("/_dash-update-component"):
            body = flask.request.get_json(silent=True) or {}
            answer = response.get_json(silent=True) if response.is_json else None
            line = {
                "output": body.get("output"),
                "status": response.status_code,
                "updated": bool(answer and (answer.get("response") or answer.get("sideUpdate"))),
                "error": flask.g.get("dash_callback_error"),
            }
            with lock, path.open("a") as f:
                f.write(json.dumps(line) + "\n")
        return response


def _register_component_assets(app: dash.Dash) -> None:
    """Serve the index page once now: Dash sets itself up on its first request and
    registers the component libraries' scripts then, refusing meanwhile to serve a
    script it has not registered. With several server processes a browser's first
    script requests can be a fresh process's first, concurrent requests (one answered
    500 "dash is not a registered library" in the compose check)."""
    response = app.server.test_client().get("/")
    if response.status_code != 200 or not app.registered_paths:
        raise RuntimeError(f"the dashboard's index did not render ({response.status_code})")


def _most_specific_templates_first() -> None:
    """Dash matches `path_template`s in registry order with fnmatch, whose `*` also
    matches "/", so "/traces/<trace_id>" would swallow "/traces/1/gpu". Longer
    templates go first."""
    registry = dash.page_registry
    ordered = sorted(registry.items(), key=lambda kv: -(kv[1].get("path_template") or "").count("/"))
    registry.clear()
    registry.update(ordered)
