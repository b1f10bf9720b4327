"""The single-machine web server: the REST API with the dashboard mounted at `/`.

This is the one place (besides the CLI that calls it) that imports the dashboard; the
dashboard itself only talks to the API over HTTP, at `settings.api_url`."""

from __future__ import annotations

from a2wsgi import WSGIMiddleware
from fastapi import FastAPI

from backend.api import create_app
from backend.settings import get_settings
from dashboard.app import create_dash


def create_server(*, with_dashboard: bool = True) -> FastAPI:
    """The API, and (by default) the Dash app (a Flask WSGI app) served at the root."""
    app = create_app()
    if with_dashboard:
        settings = get_settings()
        dash_app = create_dash(settings.api_url, secret_key=settings.session_secret())
        app.mount("/", WSGIMiddleware(dash_app.server))
    return app


def create_api_server() -> FastAPI:
    """The API alone (a factory for `uvicorn --factory`, as `api --workers N --no-dashboard` runs it)."""
    return create_server(with_dashboard=False)
