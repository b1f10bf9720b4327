"""Gzip for the dashboard's responses: figure JSON, layouts and the JS bundles.

Dash sends every figure as JSON (large numeric arrays as base64 typed arrays) and the
component bundles (plotly.js is megabytes) uncompressed; gzip cuts the JSON several
times (axis labels, repeated keys, kernel names) and the bundles about four times.
Fingerprinted bundles never change, so their compressed bytes are kept in memory.
Streamed responses (downloads, passed through as the API sent them) are left alone.
"""

from __future__ import annotations

import gzip
import threading

import flask

MIN_BYTES = 1024
LEVEL = 5  # about as small as 9 for JSON, several times faster
TYPES = ("application/json", "text/html", "application/javascript", "text/javascript", "text/css")
_static: dict[tuple[str, str], bytes] = {}
_static_lock = threading.Lock()


def _static_key(request: flask.Request) -> tuple[str, str] | None:
    """Cache key of a fingerprinted bundle (Dash serves them under these paths)."""
    path = request.path
    if "/_dash-component-suites/" in path or "/assets/" in path:
        return path, request.query_string.decode()
    return None


def compress(response: flask.Response) -> flask.Response:
    request = flask.request
    if (
        response.direct_passthrough
        or response.status_code != 200
        or "Content-Encoding" in response.headers
        or response.mimetype not in TYPES
        or "gzip" not in request.headers.get("Accept-Encoding", "").lower()
    ):
        return response
    body = response.get_data()
    if len(body) < MIN_BYTES:
        return response
    key = _static_key(request)
    packed = _static.get(key) if key else None
    if packed is None:
        packed = gzip.compress(body, compresslevel=LEVEL)
        if key:
            with _static_lock:
                _static[key] = packed
    response.set_data(packed)
    response.headers["Content-Encoding"] = "gzip"
    response.headers["Content-Length"] = str(len(packed))
    response.vary.add("Accept-Encoding")
    return response


def register(server: flask.Flask) -> None:
    server.after_request(compress)
