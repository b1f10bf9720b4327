"""The single-machine web server: the REST API with the dashboard mounted at `/`.

This is the one place (besides the CLI that calls it) that imports the dashboard; the
dashboard itself only talks to the API over HTTP, at `settings.api_url`.

State-changing dashboard requests (its callbacks: sign-in, uploads, deletions, replays)
must come from the deployment's own pages: their Origin (or, without one, their
Referer) must be the origin the request was sent to — scheme (https when the request
came over TLS or a proxy says so in X-Forwarded-Proto) and Host — or one of
`Settings.trusted_origins` (a proxy that rewrites Host). Anything else is a 403, so a
foreign page cannot replay a signed-in session's callbacks, whatever the cookie's
SameSite rule or a proxy's CORS headers. The API is not concerned: it authenticates
each request by its key header, which a browser never adds by itself.
"""

from __future__ import annotations

from typing import cast
from urllib.parse import urlsplit

from a2wsgi import WSGIMiddleware
from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from backend.api import create_app
from backend.api.security import is_https
from backend.settings import get_settings
from dashboard.app import create_dash

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


class SameOriginWrites:
    """ASGI middleware: a request with a state-changing method is let through only when
    its Origin (else its Referer) is this deployment's origin or a trusted one."""

    def __init__(self, app: ASGIApp, trusted: list[str]):
        self.app, self.trusted = app, frozenset(trusted)

    def refusal(self, scope: Scope) -> str | None:
        """Why the request is refused, or None when it may go on."""
        headers = Headers(scope=scope)
        sent = headers.get("origin") or headers.get("referer")
        if not sent:
            return "a state-changing dashboard request needs an Origin or Referer header"
        origin = _origin_of(sent)
        own = f"{'https' if is_https(scope) else 'http'}://{headers.get('host', '')}".lower()
        if origin is not None and (origin == own or origin in self.trusted):
            return None
        return (
            f"cross-origin request refused: {sent[:100]!r} is not this deployment's origin ({own}); "
            "behind a proxy, list the public origin in RLVR_TRUSTED_ORIGINS"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method", "GET") not in SAFE_METHODS:
            reason = self.refusal(scope)
            if reason is not None:
                await JSONResponse({"detail": {"message": reason}}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_server(*, with_dashboard: bool = True) -> FastAPI:
    """The API, and (by default) the Dash app (a Flask WSGI app) served at the root."""
    app = create_app()
    if with_dashboard:
        settings = get_settings()
        dash_app = create_dash(settings.api_url, secret_key=settings.session_secret())
        # a2wsgi types its ASGI scope and events as TypedDicts, starlette as plain mappings
        dash_asgi = cast(ASGIApp, WSGIMiddleware(dash_app.server))
        app.mount("/", SameOriginWrites(dash_asgi, settings.trusted_origin_list))
    return app


def create_api_server() -> FastAPI:
    """The API alone (a factory for `uvicorn --factory`, as `api --workers N --no-dashboard` runs it)."""
    return create_server(with_dashboard=False)
