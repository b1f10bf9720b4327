"""Security headers on every answer (API, docs pages and the mounted dashboard), and the
API docs pages served with assets of the app's own (they work offline, under the CSP).

The Content-Security-Policy allows only this origin. Dash renders with inline scripts
and its plotly bundle evaluates code, so scripts need 'unsafe-inline' and 'unsafe-eval';
styles need 'unsafe-inline' (Dash and Swagger UI set style attributes); plotly's image
export and ReDoc use data:/blob: URLs and a blob: worker. No page may be framed by
another origin (frame-ancestors + X-Frame-Options)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).resolve().parent / "static"

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline' 'unsafe-eval'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=()",
}
HSTS = "max-age=31536000"


def is_https(scope: Scope) -> bool:
    """Served over HTTPS: the request's scheme, or a proxy's X-Forwarded-Proto."""
    if scope.get("scheme") == "https":
        return True
    for name, value in scope.get("headers") or ():
        if name == b"x-forwarded-proto":
            return value.split(b",")[0].strip().lower() == b"https"
    return False


class SecurityHeaders:
    """Pure ASGI middleware: adds the headers a response did not set itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        https = is_https(scope)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
                if https and "strict-transport-security" not in headers:
                    headers["strict-transport-security"] = HSTS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install_docs(app: FastAPI, prefix: str) -> None:
    """Swagger UI at {prefix}/docs and ReDoc at {prefix}/redoc, their assets from
    {prefix}/docs-assets (vendored, see static/README): no CDN, so they work offline."""
    assets = f"{prefix}/docs-assets"
    app.mount(assets, StaticFiles(directory=STATIC_DIR), name="docs-assets")
    openapi_url = app.openapi_url or f"{prefix}/openapi.json"

    @app.get(f"{prefix}/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} · API",
            swagger_js_url=f"{assets}/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui/swagger-ui.css",
            swagger_favicon_url=f"{assets}/swagger-ui/favicon-32x32.png",
        )

    @app.get(f"{prefix}/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} · API",
            redoc_js_url=f"{assets}/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{assets}/swagger-ui/favicon-32x32.png",
            with_google_fonts=False,
        )
