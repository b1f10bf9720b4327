"""The frame shared by every per-trace page: sign-in guard, the trace fetched once,
header with the trace's tabs, the PAGE_TRACE_ID store, and for a trace that is not
ready yet its error or ingest progress instead of the page body.

Ids: trace-error (unknown trace), trace-status, trace-failed, trace-progress.
The polling callback lives in `dashboard.callbacks` (registered once per app).
"""

from __future__ import annotations

from collections.abc import Callable

from dash import dcc, html
from dash.development.base_component import ComponentSingleType

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.server.figure_cache import note_trace_version
from dashboard.views.components import PAGE_TRACE_ID, alert, sign_in_required, signed_in, trace_header


def trace_page(trace_id: str | None, module: str, path_suffix: str, body_fn: Callable[[dict], ComponentSingleType]):
    """Layout of a per-trace page; `body_fn(trace)` builds the body of a ready trace."""
    path = f"/traces/{trace_id}{path_suffix}"
    if not signed_in():
        return sign_in_required(path)
    if trace_id is None or not str(trace_id).isdigit():
        return alert(f"No trace '{trace_id}'.", id="trace-error")
    try:
        trace = session.api().get_trace(trace_id)
    except ApiError as exc:
        if exc.unauthorized:
            return sign_in_required(path)
        msg = f"Trace {trace_id} not found." if exc.not_found else exc.message
        return html.Div([trace_header(None, trace_id, module), alert(msg, id="trace-error")])
    note_trace_version(trace)
    head: list[ComponentSingleType] = [
        trace_header(trace, trace_id, module),
        dcc.Store(id=PAGE_TRACE_ID, data=trace["id"]),
    ]
    if trace.get("live"):
        head.append(live_marker(trace))
    if trace.get("status") != "ready":
        return html.Div(head + [trace_status(trace)])
    return html.Div(head + [body_fn(trace)])


def live_version(trace: dict) -> dict:
    """What a live page redraws on (counts, update time) and reloads on (which tables
    have data, which analyses apply: the page's sections change)."""
    tables = [k for k in ("n_samples", "n_turns", "n_rank_timings", "n_gpu_events", "n_steps") if trace.get(k)]
    return {
        "updated_at": trace.get("updated_at"),
        "n_steps": trace.get("n_steps"),
        "n_samples": trace.get("n_samples"),
        "shape": [tables, sorted(trace.get("analyses") or [])],
        "live": bool(trace.get("live")),
    }


def jobs_version(jobs: list[dict]) -> list:
    """The trace's analysis jobs as (kind, id, status), sorted: changes when an analysis
    is queued again on new data or finishes."""
    return sorted([j.get("kind"), j.get("id"), j.get("status")] for j in jobs)


LIVE_POLL_MS = 2000


def live_marker(trace: dict) -> html.Div:
    """A live trace: the badge, and a poll that redraws the page's charts when steps
    arrive (the callback in `dashboard.callbacks`)."""
    return html.Div(
        [
            html.Span("live", id="trace-live", className="badge live", title="The run is still being written"),
            html.Span(f" {trace.get('n_steps', 0)} steps so far", id="trace-live-steps", className="muted"),
            dcc.Interval(id="trace-live-poll", interval=LIVE_POLL_MS),
            dcc.Store(id="trace-live-version", data=live_version(trace)),
            dcc.Location(id="trace-live-reload", refresh=True),
        ],
        className="live-marker",
    )


def trace_status(trace: dict) -> html.Div:
    """A trace that is not ready: its error, or its ingest progress (polled)."""
    if trace.get("status") == "failed":
        body = alert(f"Ingestion failed: {trace.get('error') or 'unknown error'}", id="trace-failed")
    else:
        body = html.Div(
            [
                html.P(f"This trace is {trace.get('status')}; the page opens when it is ready."),
                html.Div(id="trace-progress"),
                dcc.Interval(id="trace-status-poll", interval=1500),
                dcc.Store(id="trace-status-job", data=trace.get("job_id")),
                dcc.Location(id="trace-status-reload", refresh=True),
            ]
        )
    return html.Div(body, id="trace-status", className="section")
