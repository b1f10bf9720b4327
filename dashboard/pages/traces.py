"""Traces: the team's traces, upload by drag and drop, delete with confirmation.

Ids: trace-upload (dcc.Upload; its <input type=file> takes several files, a folder
or one archive), trace-upload-name / -format / -max-len, formats-link (docs/formats.md,
served at /formats), upload-status (upload-files: a collapsed list of the files in
natural order under a count, opened with the server's error next to the file it names
when the upload failed), traces-table (one <tr data-trace-id> per trace; its id first, as
the CLI and the API take it), traces-q, traces-status, delete-confirm. The search, status
and page live in the URL (?q=&status=&offset=).
"""

from __future__ import annotations

import base64
from typing import Any

import dash
from dash import ALL, Input, Output, State, dcc, html, no_update

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.views.components import (
    alert,
    clicked_index,
    control,
    controls,
    data_attrs,
    href,
    progress,
    section,
    sign_in_required,
    signed_in,
)
from dashboard.views.formatting import human_bytes, human_count, human_time, job_active
from dashboard.views.number_fields import Bounds, blocked_message, check_number, error_id, number_input
from dashboard.views.pager import pager, pager_outputs, pager_state, register_pager
from dashboard.views.uploads import error_matches, file_list, skipped_note, with_docs_link
from dashboard.views.url_state import query_value, register_url_state, url_sink

dash.register_page(__name__, path="/traces", name="Traces", title="Traces · RLVR Explorer", nav="top", order=1)

PAGE_SIZE = 25
MAX_RESPONSE_LEN = 2**31 - 1  # what the API takes (an INTEGER column)
MAX_LEN_BOUNDS = Bounds(integer=True, ge=1, le=MAX_RESPONSE_LEN)
STATUSES = ("pending", "ingesting", "ready", "failed")


def layout(**query):
    if not signed_in():
        return sign_in_required("/traces")
    return html.Div([html.H2("Traces"), url_sink("traces"), _upload_section(), _list_section(query)])


def _upload_section() -> html.Section:
    """Drop files (or a folder, or an archive) with an optional name, format and length cap."""
    return section(
        "Upload",
        dcc.Upload(
            id="trace-upload",
            multiple=True,
            className="upload-zone",
            className_active="upload-zone active",
            className_disabled="upload-zone disabled",
            children=html.Div(
                [
                    html.Strong("Drop trace files here"),
                    " — several files, a run folder, or one .zip / .tar.gz",
                    html.Br(),
                    html.Span("or click to choose", className="muted"),
                ]
            ),
        ),
        controls(
            control(
                "Name (optional)",
                dcc.Input(
                    id="trace-upload-name",
                    type="text",
                    placeholder="default: the archive or the kinds of file",
                    className="input",
                    style={"width": "420px", "maxWidth": "100%"},
                ),
            ),
            control(
                "Format (optional)",
                dcc.Input(id="trace-upload-format", type="text", placeholder="auto-detect", className="input"),
            ),
            control(
                "Max response length (optional)",
                number_input("trace-upload-max-len", None, MAX_LEN_BOUNDS, placeholder="e.g. 8192 tokens", width=230),
            ),
        ),
        html.P(
            [
                "Accepted formats and their fields: ",
                html.A("docs/formats.md", href=href("/formats"), id="formats-link", target="_blank"),
                ". The max response length is the run's generation limit: a sample counts as truncated when "
                "the engine stopped it for length, where the files record its stop reason, else when it "
                "reached this length (most formats carry it; give it for those that do not).",
            ],
            className="help",
        ),
        html.Div(id="upload-busy", className="muted"),
        html.Div(id="upload-status"),
        dcc.Store(id="upload-state"),
        dcc.Interval(id="upload-poll", interval=1000, disabled=True),
        help_text="PolyTrace per-step JSONL, verl metric logs, verl rollout dumps (<step>.jsonl; add the run's "
        "tokenizer.json for token lengths, else characters), PyTorch-profiler (Kineto) traces, Nsight Systems "
        "SQLite exports (nsys export --type sqlite), or the native CSV/JSONL/Parquet format. Large uploads are ingested in the background; the browser "
        "holds the files in memory while sending them, so for several GB use `rlvr-explorer ingest` "
        "or the REST API.",
    )


def _list_section(query: dict) -> html.Section:
    """The team's traces, searched and filtered, a page at a time, with their Delete."""
    return section(
        "Your traces",
        controls(
            control(
                "Search",
                dcc.Input(
                    id="traces-q",
                    type="search",
                    placeholder="name contains…",
                    debounce=True,
                    className="input",
                    value=query_value(query, "q", None),
                ),
            ),
            control(
                "Status",
                dcc.Dropdown(
                    id="traces-status",
                    options=[{"label": s, "value": s} for s in STATUSES],
                    value=query_value(query, "status", None, choices=STATUSES),
                    placeholder="any",
                    clearable=True,
                    style={"minWidth": "160px"},
                ),
            ),
        ),
        html.Div(id="traces-message"),
        html.Div(id="traces-table"),
        *pager("traces", query_value(query, "offset", 0, kind=int)),
        dcc.Store(id="traces-refresh", data=0),
        dcc.Interval(id="traces-poll", interval=2000, disabled=True),
        dcc.Store(id="delete-target"),
        dcc.ConfirmDialog(id="delete-confirm"),
    )


register_url_state(
    "traces",
    {
        "q": ("traces-q", "value", None),
        "status": ("traces-status", "value", None),
        "offset": ("traces-offset", "data", 0),
    },
)


# -- upload -------------------------------------------------------------------------
def _decode(contents: str) -> bytes:
    """dcc.Upload's `data:<mime>;base64,<payload>` -> bytes."""
    return base64.b64decode(contents.split(",", 1)[1] if "," in contents else contents)


def _as_list(x) -> list:
    return [] if x is None else x if isinstance(x, list) else [x]


dash.clientside_callback(
    """
    function(contents, names) {
        if (!contents) { return ""; }
        var list = Array.isArray(contents) ? contents : [contents];
        var bytes = 0;
        list.forEach(function(c) { bytes += Math.floor((c.length - c.indexOf(",") - 1) * 3 / 4); });
        return "Uploading " + list.length + " file" + (list.length === 1 ? "" : "s") + " (" +
               (bytes / 1048576).toFixed(1) + " MB) to the server…";
    }
    """,
    Output("upload-busy", "children"),
    Input("trace-upload", "contents"),
    State("trace-upload", "filename"),
)


@dash.callback(
    Output("upload-state", "data"),
    Output("upload-busy", "children", allow_duplicate=True),
    Output("traces-refresh", "data", allow_duplicate=True),
    Output(error_id("trace-upload-max-len"), "children"),
    Input("trace-upload", "contents"),
    State("trace-upload", "filename"),
    State("trace-upload-name", "value"),
    State("trace-upload-format", "value"),
    State("traces-refresh", "data"),
    State("trace-upload-max-len", "value"),
    running=[(Output("trace-upload", "disabled"), True, False)],
    prevent_initial_call=True,
)
def upload(contents, filenames, name, fmt, refresh, max_len=None):
    contents, filenames = _as_list(contents), _as_list(filenames)
    if not contents:
        return no_update, no_update, no_update, no_update
    max_response_len, why = check_number(max_len, MAX_LEN_BOUNDS)
    if why:  # never upload with a limit other than the one shown
        return no_update, blocked_message(["Max response length"]) + " Then drop the files again.", no_update, why
    files = [(fname, _decode(c)) for fname, c in zip(filenames, contents)]
    state: dict[str, Any] = {"files": [{"name": f, "size": len(b)} for f, b in files], "status": "uploading"}
    try:
        result = session.api().upload_trace(
            files,
            name=(name or "").strip() or None,
            format=(fmt or "").strip() or None,
            max_response_len=None if max_response_len is None else int(max_response_len),
        )
    except ApiError as exc:
        state.update(
            status="failed",
            error={
                "message": exc.message,
                "file": exc.file,
                "line": exc.line,
                "field": exc.field,
                "status": exc.status,
            },
        )
        return state, "", no_update, ""
    state.update(
        trace=result.trace,
        job=result.job,
        http=result.status_code,
        status="ingesting" if result.job else ("duplicate" if result.duplicate else "done"),
    )
    return state, "", (refresh or 0) + 1, ""


@dash.callback(
    Output("upload-state", "data", allow_duplicate=True),
    Output("traces-refresh", "data", allow_duplicate=True),
    Input("upload-poll", "n_intervals"),
    State("upload-state", "data"),
    State("traces-refresh", "data"),
    prevent_initial_call=True,
)
def poll_upload(_n, state, refresh):
    job = (state or {}).get("job")
    if not job or state.get("status") != "ingesting":
        return no_update, no_update
    api = session.api()
    try:
        job = api.job(job["id"])
        state = {**state, "job": job}
        if not job_active(job):
            state["trace"] = api.get_trace(state["trace"]["id"])
            state["status"] = "done" if job.get("status") == "succeeded" else "failed"
            if state["status"] == "failed":
                state["error"] = {"message": job.get("error") or state["trace"].get("error") or "ingestion failed"}
            return state, (refresh or 0) + 1
    except ApiError as exc:
        return {**state, "status": "failed", "error": {"message": exc.message}}, no_update
    return state, no_update


def _trace_link(trace: dict) -> dcc.Link:
    return dcc.Link(trace.get("name") or f"trace {trace['id']}", href=href(f"/traces/{trace['id']}"))


@dash.callback(
    Output("upload-status", "children"),
    Output("upload-poll", "disabled"),
    Input("upload-state", "data"),
    prevent_initial_call=True,
)
def render_upload(state):
    if not state:
        return None, True
    error = state.get("error") or {}
    status = state.get("status")
    placed = status == "failed" and any(
        error_matches(error, f["name"], len(state.get("files") or [])) for f in state.get("files") or []
    )
    extra = []
    trace, job = state.get("trace"), state.get("job")
    if status == "failed" and not placed:
        extra.append(
            alert(with_docs_link(error.get("message") or "Upload failed", href("/formats")), id="upload-error")
        )
    elif status == "failed":
        extra.append(alert("Upload rejected: nothing was stored.", id="upload-error"))
    elif status == "ingesting" and job:
        extra.append(
            html.Div(
                [
                    html.Span("Ingesting in the background: "),
                    progress(job.get("progress"), job.get("message") or job.get("status")),
                ]
            )
        )
    elif status == "duplicate" and trace:
        extra.append(alert(["Your team already uploaded these files: ", _trace_link(trace)], "info", id="upload-ok"))
    elif status == "done" and trace:
        extra.append(
            alert(
                [
                    "Ingested ",
                    _trace_link(trace),
                    f": {human_count(trace.get('n_steps'))} steps, {human_count(trace.get('n_samples'))} samples.",
                    *([html.Br(), skipped_note(trace)] if skipped_note(trace) else []),
                ],
                "ok",
                id="upload-ok",
            )
        )
    return [file_list(state, href("/formats")), *extra], status != "ingesting"


# -- list and delete ----------------------------------------------------------------
def _status_cell(trace: dict):
    st = trace.get("status") or "?"
    badge = html.Span(st, className=f"badge badge-{st}", title=trace.get("error") or "")
    return [badge, html.Div(trace["error"], className="file-error")] if st == "failed" and trace.get("error") else badge


def traces_table(items: list[dict]) -> html.Table | html.P:
    if not items:
        return html.P("No traces yet: drop files above to upload one.", className="muted")
    head = html.Tr(
        [
            html.Th("Id", className="num", title="the id the CLI and the API take"),
            html.Th("Name"),
            html.Th("Format"),
            html.Th("Status"),
            html.Th("Steps", className="num"),
            html.Th("Samples", className="num"),
            html.Th("GPU events", className="num"),
            html.Th("Size", className="num"),
            html.Th("Created"),
            html.Th(""),
        ]
    )
    body = []
    for t in items:
        body.append(
            html.Tr(
                [
                    html.Td(str(t["id"]), className="num trace-id"),
                    html.Td(
                        [_trace_link(t), " ", html.Span("live", className="badge live")]
                        if t.get("live")
                        else [_trace_link(t)]
                    ),
                    html.Td(" / ".join(x for x in (t.get("source_format"), t.get("framework")) if x) or "—"),
                    html.Td(_status_cell(t)),
                    html.Td(human_count(t.get("n_steps")), className="num"),
                    html.Td(human_count(t.get("n_samples")), className="num"),
                    html.Td(human_count(t.get("n_gpu_events")), className="num"),
                    html.Td(human_bytes(t.get("size_bytes")), className="num"),
                    html.Td(human_time(t.get("created_at"))),
                    html.Td(
                        html.Button(
                            "Delete",
                            id={"type": "trace-delete", "index": t["id"]},
                            n_clicks=0,
                            className="button small danger",
                        )
                    ),
                ],
                **data_attrs(trace_id=str(t["id"]), status=t.get("status") or ""),
            )
        )
    return html.Table([html.Thead(head), html.Tbody(body)], className="table", id="traces-table-el")


register_pager("traces", PAGE_SIZE, ("traces-q", "traces-status"))


@dash.callback(
    Output("traces-table", "children"),
    Output("traces-poll", "disabled"),
    Output("traces-message", "children"),
    *pager_outputs("traces"),
    Input("traces-offset", "data"),
    Input("traces-refresh", "data"),
    Input("traces-poll", "n_intervals"),
    State("traces-q", "value"),
    State("traces-status", "value"),
)
def list_traces(offset, _refresh, _poll, q, status):
    offset = offset or 0
    try:
        page_ = session.api().list_traces(limit=PAGE_SIZE, offset=offset, status=status, q=(q or "").strip() or None)
    except ApiError as exc:
        return no_update, True, alert(exc.message), "", True, True
    items, total = page_.get("items", []), int(page_.get("total") or 0)
    busy = any(t.get("status") in ("pending", "ingesting") for t in items)
    shown = f"{offset + 1}–{offset + len(items)} of {total}" if items else f"0 of {total}"
    return traces_table(items), not busy, None, *pager_state(shown, offset, offset + len(items) < total)


@dash.callback(
    Output("delete-target", "data"),
    Output("delete-confirm", "displayed"),
    Output("delete-confirm", "message"),
    Input({"type": "trace-delete", "index": ALL}, "n_clicks"),
    prevent_initial_call=True,
)
def ask_delete(clicks):
    trace_id = clicked_index()
    if trace_id is None:
        return no_update, False, no_update
    return trace_id, True, f"Delete trace {trace_id} and everything computed from it? This cannot be undone."


@dash.callback(
    Output("traces-refresh", "data", allow_duplicate=True),
    Output("traces-message", "children", allow_duplicate=True),
    Input("delete-confirm", "submit_n_clicks"),
    State("delete-target", "data"),
    State("traces-refresh", "data"),
    prevent_initial_call=True,
)
def do_delete(submitted, trace_id, refresh):
    if not submitted or trace_id is None:
        return no_update, no_update
    try:
        session.api().delete_trace(trace_id)
    except ApiError as exc:
        return no_update, alert(f"Could not delete trace {trace_id}: {exc.message}")
    return (refresh or 0) + 1, alert(f"Deleted trace {trace_id}.", "ok")
