"""Add files to an existing trace: more steps, a verl metric log, Kineto traces of the
same run, reward timings, a DAPO filter file. All-or-nothing: a bad file changes
nothing and the message names its file, line and field; the same files twice change
nothing either. The default analyses run again on the new data.

Ids: attach-upload (dcc.Upload, several files), attach-format, attach-result
(attach-created / attach-duplicate / attach-error), attach-have (what the trace holds).
"""

from __future__ import annotations

import base64

import dash
from dash import Input, Output, State, dcc, html, no_update

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.views.attach_hint import FILLS
from dashboard.views.components import PAGE_TRACE_ID, alert, control, controls, section
from dashboard.views.trace_frame import trace_page

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/files",
    name="Add files",
    title="Add files · RLVR Explorer",
    nav="trace",
    order=90,
)

HAVE = (
    ("n_samples", "samples", "samples"),
    ("n_turns", "turns", "turns"),
    ("n_rank_timings", "rank_timings", "rank timings"),
    ("n_gpu_events", "gpu_events", "GPU events"),
    ("n_steps", "steps", "steps"),
)


def _have(trace: dict) -> html.Ul:
    rows = []
    for count, table, label in HAVE:
        n = trace.get(count) or 0
        if n:
            rows.append(html.Li(f"{n:,} {label}"))
        else:
            rows.append(html.Li(f"no {label} — {FILLS[table]}", className="muted"))
    return html.Ul(rows, id="attach-have")


def body(trace: dict) -> html.Div:
    return html.Div(
        [
            section(
                "What this trace holds",
                _have(trace),
                help_text="Files of the same run fill the tabs that have no data yet.",
            ),
            section(
                "Add files",
                controls(
                    control(
                        "Format",
                        dcc.Input(id="attach-format", placeholder="detect", debounce=True, style={"width": "160px"}),
                    )
                ),
                dcc.Upload(
                    id="attach-upload",
                    multiple=True,
                    children=html.Div(["Drop files here or ", html.A("choose files")]),
                    className="attach-drop",
                ),
                dcc.Loading(html.Div(id="attach-result")),
                help_text="All-or-nothing and idempotent: a bad file changes nothing; the same content twice is "
                "recognised. Also: `rlvr-explorer ingest FILES --into ID`, or `rlvr-explorer watch RUN_DIR --into "
                "ID` to follow a run as it trains.",
            ),
        ]
    )


def layout(trace_id: str | None = None, **_):
    return trace_page(trace_id, __name__, "/files", body)


def _decode(contents: str) -> bytes:
    return base64.b64decode(contents.split(",", 1)[1] if "," in contents else contents)


# A file input keeps its value, so choosing a file of the same name again (the fixed
# version of a refused file) would not fire: clear it once the server answered.
dash.clientside_callback(
    """
    function(_result) {
        var input = document.querySelector('#attach-upload input[type=file]');
        if (input) { input.value = ''; }
        return null;
    }
    """,
    Output("attach-upload", "contents"),
    Input("attach-result", "children"),
    prevent_initial_call=True,
)


@dash.callback(
    Output("attach-result", "children"),
    Output("attach-have", "children"),
    Input("attach-upload", "contents"),
    State("attach-upload", "filename"),
    State("attach-format", "value"),
    State(PAGE_TRACE_ID, "data"),
    prevent_initial_call=True,
)
def do_attach(contents, filenames, fmt, trace_id):
    if not contents:
        return no_update, no_update
    contents = contents if isinstance(contents, list) else [contents]
    filenames = filenames if isinstance(filenames, list) else [filenames]
    files = [(name, _decode(c)) for name, c in zip(filenames, contents)]
    try:
        body = session.api().attach_files(trace_id, files, format=(fmt or "").strip() or None)
    except ApiError as exc:
        where = ", ".join(
            f"{k} {v}" for k, v in (("file", exc.file), ("line", exc.line), ("field", exc.field)) if v is not None
        )
        msg = f"Nothing was added: {exc.message}" + (f" ({where})" if where else "")
        return alert(msg, id="attach-error"), no_update
    trace = body["trace"]
    if not body["created"]:
        return alert("These files were added before; nothing changed.", "info", id="attach-duplicate"), no_update
    steps = body.get("steps") or []
    span = f"steps {steps[0]}–{steps[-1]}" if len(steps) > 1 else (f"step {steps[0]}" if steps else "no steps")
    notes = [html.Li(s) for s in body.get("skipped") or []]
    return (
        html.Div(
            [
                html.P(
                    f"Added {len(files)} file{'s' if len(files) != 1 else ''}: {', '.join(body['tables'])} "
                    f"({span}). The trace now has {trace['n_steps']:,} steps and {trace['n_samples']:,} samples; "
                    "its analyses run again."
                ),
                html.Ul(notes) if notes else None,
            ],
            className="alert alert-ok",
            id="attach-created",
        ),
        _have(trace).children,
    )
