"""The single-machine web server: the REST API with the dashboard mounted at `/`.

This is the one place (besides the CLI that calls it) that imports the dashboard; the
dashboard itself only talks to the API over HTTP, at `settings.api_url`.

State-changing dashboard requests (its callbacks: sign-in, uploads, deletions, replays)
must come from the deployment's own pages: their Origin (or, without one, their
Referer) must be one of the deployment's configured origins — `Settings.public_url`'s
and `Settings.trusted_origins` — or the origin the request was sent to (scheme: https
when the request came over TLS or a proxy says so in X-Forwarded-Proto) when its host is
one the deployment answers to: the public URL's or a trusted origin's host, a loopback
name or an IP address. The request's Host alone is not trusted: a foreign page whose
name resolves to this server (DNS rebinding) sends its own name as both Host and Origin.
Anything else is a 403, so a foreign page cannot replay a signed-in session's callbacks,
whatever the cookie's SameSite rule or a proxy's CORS headers. The API is not concerned:
it authenticates each request by its key header, which a browser never adds by itself.
"""

from __future__ import annotations

import ipaddress
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


LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def _host_name(netloc: str) -> str:
    """The host of `host[:port]` (IPv6 in brackets), lower case."""
    return (urlsplit(f"//{netloc}").hostname or "").lower()


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class SameOriginWrites:
    """ASGI middleware: a request with a state-changing method is let through only when
    its Origin (else its Referer) is one of the deployment's origins (module docstring)."""

    def __init__(self, app: ASGIApp, trusted: list[str]):
        self.app, self.trusted = app, frozenset(trusted)
        # host names a request's own origin may carry: those of the configured origins
        self.hosts = LOOPBACK_NAMES | {_host_name(urlsplit(o).netloc) for o in trusted}

    def _answers_to(self, host: str) -> bool:
        return host in self.hosts or host.endswith(".localhost") or _is_ip(host)

    def refusal(self, scope: Scope) -> str | None:
        """Why the request is refused, or None when it may go on."""
        headers = Headers(scope=scope)
        sent = headers.get("origin") or headers.get("referer")
        if not sent:
            return "a state-changing dashboard request needs an Origin or Referer header"
        origin = _origin_of(sent)
        host = headers.get("host", "")
        own = f"{'https' if is_https(scope) else 'http'}://{host}".lower()
        if origin is not None and (origin in self.trusted or (origin == own and self._answers_to(_host_name(host)))):
            return None
        return (
            f"cross-origin request refused: {sent[:100]!r} is not one of this deployment's origins; "
            "set RLVR_PUBLIC_URL to the URL the dashboard is opened at (other origins: RLVR_TRUSTED_ORIGINS)"
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
