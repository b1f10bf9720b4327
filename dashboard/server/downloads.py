"""Download routes of the dashboard's server: files the API serves, passed through with
the signed-in team's key (the browser never holds the key, so a plain link to the API
would not work). Streamed: a generated workload can be hundreds of megabytes.

    /download/simulations/<job_id>/chrome-trace?policy=a|b   simulated timeline (JSON)
    /download/workloads/<job_id>.zip                          generated workload files

Links to them: `simulation_trace_href(job_id, policy)`, `workload_zip_href(job_id)`
(with the app's mount prefix).
"""

from __future__ import annotations

import contextlib

import dash
import flask

from dashboard.api import session
from dashboard.api.client import ApiError

CHUNK = 1 << 16


def simulation_trace_href(job_id, policy: str = "a") -> str:
    return dash.get_relative_path(f"/download/simulations/{int(job_id)}/chrome-trace") + f"?policy={policy}"


def workload_zip_href(job_id) -> str:
    return dash.get_relative_path(f"/download/workloads/{int(job_id)}.zip")


def _passthrough(open_stream, filename: str, media_type: str) -> flask.Response:
    """Stream what the API answers; its error as the status and a one-line text."""
    if not session.api_key():
        return flask.Response("Sign in first.", status=401, mimetype="text/plain")
    stack = contextlib.ExitStack()
    try:
        upstream = stack.enter_context(open_stream(session.api()))
    except ApiError as exc:
        stack.close()
        return flask.Response(exc.message, status=exc.status or 502, mimetype="text/plain")
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    encoding = upstream.headers.get("content-encoding")
    if encoding:  # passed on as sent (the browser decodes gzip)
        headers["Content-Encoding"] = encoding
    if upstream.headers.get("content-length"):
        headers["Content-Length"] = upstream.headers["content-length"]

    def body():
        with stack:
            yield from upstream.iter_raw(CHUNK)

    return flask.Response(body(), mimetype=media_type, headers=headers, direct_passthrough=True)


def register(server: flask.Flask) -> None:
    @server.route("/download/simulations/<int:job_id>/chrome-trace")
    def simulation_chrome_trace(job_id: int):
        policy = flask.request.args.get("policy", "a")
        if policy not in ("a", "b"):
            return flask.Response("policy must be a or b", status=400, mimetype="text/plain")
        return _passthrough(
            lambda api: api.simulation_chrome_trace(job_id, policy),
            f"simulation-{job_id}-{policy}.json",
            "application/json",
        )

    @server.route("/download/workloads/<int:job_id>.zip")
    def workload_zip(job_id: int):
        return _passthrough(lambda api: api.workload_zip(job_id), f"workload-{job_id}.zip", "application/zip")
