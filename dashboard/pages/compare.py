"""Two traces side by side: length percentiles over steps, pooled CDFs and stage times,
and for two Kineto traces the GPU trace diff (ops and kernels added, removed, changed).

Query: /compare?a=<trace id>&b=<trace id>&field=&keys=&z.<chart>= (kept current as they
change, the charts' zoom too; without a and b: the newest two traces that share data). Ids: cmp-a, cmp-b, cmp-field, cmp-keys;
charts cmp-lengths, cmp-cdf, cmp-stages-a, cmp-stages-b, cmp-diff-chart; cmp-diff-device,
cmp-diff-summary, cmp-diff-table.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.compare import compare_cdf_figure, compare_panels, compare_percentiles_figure
from dashboard.figures.gpu_diff import diff_figure, diff_summary, diff_table
from dashboard.figures.stages import stage_time_figure
from dashboard.views.components import alert, control, controls, graph, section, sign_in_required, signed_in
from dashboard.views.formatting import compare_pair
from dashboard.views.url_state import query_value, register_url_state, url_sink, zoom_id, zoom_store, zoomed

dash.register_page(__name__, path="/compare", name="Compare", title="Compare · RLVR Explorer", nav="top", order=3)


def _int(x):
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


FIELDS = ("response", "prompt", "total")
KEYS = ("mean", "p50", "p90", "p99", "max")
HIDDEN = {"display": "none"}
ZOOMABLE = ("cmp-lengths", "cmp-cdf", "cmp-stages-a", "cmp-stages-b")
register_url_state(
    "compare",
    {
        "a": ("cmp-a", "value", None),
        "b": ("cmp-b", "value", None),
        "field": ("cmp-field", "value", "response"),
        "keys": ("cmp-keys", "value", ["p50", "p99"]),
    },
    zoom=ZOOMABLE,
)


def _controls(options: list[dict], a, b, query: dict):
    """Traces A and B, the length field and the percentiles (initial values from the URL)."""
    return controls(
        control(
            "Trace A",
            dcc.Dropdown(id="cmp-a", options=options, value=a, clearable=False, style={"minWidth": "280px"}),
        ),
        control(
            "Trace B",
            dcc.Dropdown(id="cmp-b", options=options, value=b, clearable=False, style={"minWidth": "280px"}),
        ),
        control(
            "Length",
            dcc.RadioItems(
                id="cmp-field",
                value=query_value(query, "field", "response", choices=FIELDS),
                inline=True,
                options=list(FIELDS),
            ),
        ),
        control(
            "Percentiles",
            dcc.Checklist(
                id="cmp-keys",
                value=query_value(query, "keys", ["p50", "p99"], choices=KEYS),
                inline=True,
                options=list(KEYS),
            ),
        ),
    )


def layout(a: str | None = None, b: str | None = None, **query):
    if not signed_in():
        return sign_in_required("/compare")
    try:
        traces = session.api().list_traces(limit=500, status="ready").get("items", [])
    except ApiError as exc:
        return alert(exc.message)
    options = [{"label": f"{t['name']} (#{t['id']})", "value": t["id"]} for t in traces]
    ids = [t["id"] for t in traces]
    id_a, id_b = _int(a), _int(b)
    if id_a not in ids or id_b not in ids:
        id_a, id_b = compare_pair(traces, id_a if id_a in ids else None)
    return html.Div(
        [
            html.H2("Compare two traces"),
            url_sink("compare"),
            zoom_store("compare", query),
            dcc.Link("Compare up to 12 traces, with step offsets →", href=dash.get_relative_path("/compare/many")),
            _controls(options, id_a, id_b, query),
            html.Div(id="cmp-message"),
            html.Div(
                id="cmp-lengths-row",
                className="grid-2",
                children=[
                    section("Lengths over steps", graph("cmp-lengths")),
                    section("Distribution over all steps", graph("cmp-cdf")),
                ],
            ),
            html.Div(
                id="cmp-stages-row",
                className="grid-2",
                children=[
                    section("Stage time, trace A", graph("cmp-stages-a")),
                    section("Stage time, trace B", graph("cmp-stages-b")),
                ],
            ),
            section(
                "GPU trace diff (Kineto): A is the control, B the test",
                controls(
                    control(
                        "Events",
                        dcc.RadioItems(
                            id="cmp-diff-device",
                            value="all",
                            inline=True,
                            options=[
                                {"label": "CPU ops and GPU kernels", "value": "all"},
                                {"label": "CPU ops", "value": "cpu"},
                                {"label": "GPU kernels", "value": "gpu"},
                            ],
                        ),
                    )
                ),
                html.Div(id="cmp-diff-summary"),
                graph("cmp-diff-chart"),
                html.Div(id="cmp-diff-table"),
                help_text="As Holistic Trace Analysis' TraceDiff: per op or kernel name, the count and total time in "
                "the first rank's first ProfilerStep of each trace; added = only in B, deleted = only in A.",
            ),
        ]
    )


def _load(api, trace_id, field):
    """(trace, summaries or None, steps) of a ready trace."""
    trace = api.get_trace(trace_id)
    summary = api.summaries(trace_id, field=field) if trace.get("n_samples") else None
    return trace, summary, api.steps(trace_id)


@dash.callback(
    Output("cmp-lengths", "figure"),
    Output("cmp-cdf", "figure"),
    Output("cmp-stages-a", "figure"),
    Output("cmp-stages-b", "figure"),
    Output("cmp-message", "children"),
    Output("cmp-lengths-row", "style"),
    Output("cmp-stages-row", "style"),
    Input("cmp-a", "value"),
    Input("cmp-b", "value"),
    Input("cmp-field", "value"),
    Input("cmp-keys", "value"),
    State(zoom_id("compare"), "data"),
)
def fill(a, b, field, keys, zoom=None):
    """The charts of the two traces; a row neither trace has data for is hidden, and one
    line says what they lack."""
    if a is None or b is None:
        fig = empty_figure("Upload at least two traces to compare")
        return fig, fig, fig, fig, None, None, None
    api = session.api()
    try:
        ta, sa, steps_a = _load(api, a, field or "response")
        tb, sb, steps_b = _load(api, b, field or "response")
    except ApiError as exc:
        fig = empty_figure(exc.message)
        return fig, fig, fig, fig, alert(exc.message), None, None
    shown = compare_panels(ta, tb, steps_a, steps_b)
    note = html.P(shown["note"], className="muted", id="cmp-lacking") if shown["note"] else None
    # Short legend names (the dropdowns above say which trace is A and which is B).
    names = ("A", "B")
    fig_a = stage_time_figure(steps_a, title=f"Stage time per step, A: {ta['name']}")
    fig_b = stage_time_figure(steps_b, title=f"Stage time per step, B: {tb['name']}")
    # One y scale for both stage charts, so equal heights mean equal seconds.
    top = max(_stack_top(fig_a), _stack_top(fig_b))
    if top > 0:
        for fig in (fig_a, fig_b):
            fig.update_yaxes(range=[0, top * 1.05])
    figures = (compare_percentiles_figure(sa, sb, names, tuple(keys or ["p50"])), compare_cdf_figure(sa, sb, names))
    rows = [None if shown[k] else HIDDEN for k in ("lengths", "stages")]  # (a grid's display beats `hidden`)
    return (*zoomed((*figures, fig_a, fig_b), ZOOMABLE, zoom), note, *rows)


def _stack_top(fig) -> float:
    """Tallest stacked bar of a stage-time figure (seconds)."""
    totals: dict = {}
    for tr in fig.data:
        if tr.type != "bar":
            continue
        for x, y in zip(tr.x or [], tr.y or []):
            totals[x] = totals.get(x, 0.0) + (y or 0.0)
    return max(totals.values(), default=0.0)


@dash.callback(
    Output("cmp-diff-summary", "children"),
    Output("cmp-diff-chart", "figure"),
    Output("cmp-diff-table", "children"),
    Input("cmp-a", "value"),
    Input("cmp-b", "value"),
    Input("cmp-diff-device", "value"),
)
def fill_diff(a, b, device):
    if a is None or b is None:
        return None, empty_figure("Choose two Kineto traces"), None
    api = session.api()
    try:
        ta, tb = api.get_trace(a), api.get_trace(b)
        if not ta.get("n_gpu_events") or not tb.get("n_gpu_events"):
            note = "The GPU trace diff needs two Kineto (PyTorch profiler) traces."
            return html.P(note, className="muted"), empty_figure(note), None
        diff = api.gpu_diff(a, b, device=device or "all")
    except ApiError as exc:
        return alert(exc.message), empty_figure(exc.message), None
    return diff_summary(diff), diff_figure(diff), diff_table(diff)
