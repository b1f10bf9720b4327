"""Metric explorer: any per-step series of one or many traces, W&B style.

Series: every verl metric key a trace logged, every stage timing (t_gen ...), step
counts and every per-step length statistic (response/p99 ...), from
GET /traces/{id}/series (O(steps)). Smoothing (EMA weight or trailing window), log axes,
a per-trace step offset for alignment, one chart row per series with the x axis shared
(hover crosshair and zoom linked), gaps where steps are missing, CSV of what is plotted.
The choice lives in the URL: /metrics?traces=1,2&keys=t_gen,response/p99&smooth=ema&w=0.6
&log=y&offsets=2:5&z.metrics-chart=x0,x1 (kept current with history.replaceState, so the
link can be shared; the zoom is of the shared step axis).

Ids: metrics-traces, metrics-keys, metrics-smooth, metrics-weight, metrics-log,
metrics-offsets, metrics-chart, metrics-csv (button), metrics-download, metrics-message.
A live trace is polled (metrics-poll) and its lines grow without a reload.
"""

from __future__ import annotations

from urllib.parse import urlencode

import dash
from dash import Input, Output, State, dcc, html, no_update

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.metrics import metrics_figure, parse_offsets, plotted, plotted_csv
from dashboard.views.components import (
    alert,
    control,
    controls,
    graph,
    section,
    sign_in_required,
    signed_in,
    step_offsets_control,
)
from dashboard.views.url_state import apply_zoom, register_url_state, url_sink, zoom_id, zoom_store

dash.register_page(__name__, path="/metrics", name="Metrics", title="Metrics · RLVR Explorer", nav="top", order=2)

DEFAULT_KEYS = ("t_step", "t_gen", "response/mean", "response/p99")
ZOOM_PAGE = "metric-explorer"  # (the page's own URL writer owns metrics-url-sink)
register_url_state(ZOOM_PAGE, {}, zoom=("metrics-chart",))


def _ids(text: str | None) -> list[int]:
    out = []
    for part in (text or "").split(","):
        part = part.strip().lstrip("#")
        if part.isdigit():
            out.append(int(part))
    return out


def _float(x, default):
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


def layout(
    traces: str | None = None,
    keys: str | None = None,
    smooth: str | None = None,
    w: str | None = None,
    log: str | None = None,
    offsets: str | None = None,
    **query,
):
    if not signed_in():
        return sign_in_required("/metrics")
    try:
        items = session.api().list_traces(limit=500, status="ready").get("items", [])
    except ApiError as exc:
        return alert(exc.message)
    options = [
        {"label": f"{t['name']} (#{t['id']})" + (" · live" if t.get("live") else ""), "value": t["id"]} for t in items
    ]
    known = {t["id"] for t in items}
    chosen = [i for i in _ids(traces) if i in known] or ([items[0]["id"]] if items else [])
    return html.Div(
        [
            html.H2("Metric explorer"),
            _series_controls(options, chosen, [k for k in (keys or "").split(",") if k]),
            _view_controls(smooth, w, log, offsets),
            html.Div(id="metrics-message"),
            section(
                "Per-step series",
                graph("metrics-chart"),
                help_text="One row per series, one line per trace; rows share the step axis (hover and zoom are "
                "linked). EMA: v = w*v_prev + (1-w)*x over logged steps; window: mean of the last n logged values. "
                "Lines break where steps are missing.",
            ),
            dcc.Store(id="metrics-query"),
            html.Div(id="metrics-url-sink", hidden=True),
            url_sink(ZOOM_PAGE),
            zoom_store(ZOOM_PAGE, query),
            dcc.Interval(id="metrics-poll", interval=3000, disabled=True),
        ]
    )


def _series_controls(options: list[dict], chosen: list[int], key_list: list[str]) -> html.Div:
    """Which traces, and which of their series."""
    return controls(
        control(
            "Traces",
            dcc.Dropdown(id="metrics-traces", options=options, value=chosen, multi=True, style={"minWidth": "360px"}),
        ),
        control(
            "Series",
            dcc.Dropdown(
                id="metrics-keys",
                options=[{"label": k, "value": k} for k in key_list],
                value=key_list,
                multi=True,
                placeholder="choose series",
                style={"minWidth": "360px"},
            ),
        ),
    )


def _view_controls(smooth: str | None, w: str | None, log: str | None, offsets: str | None) -> html.Div:
    """How the series are drawn (smoothing, log axes, step offsets) and the CSV of them."""
    smoothing = dcc.RadioItems(
        id="metrics-smooth",
        value=smooth if smooth in ("none", "ema", "window") else "none",
        inline=True,
        options=[
            {"label": "none", "value": "none"},
            {"label": "EMA", "value": "ema"},
            {"label": "window", "value": "window"},
        ],
    )
    weight = dcc.Input(
        id="metrics-weight",
        type="number",
        value=_float(w, 0.6),
        min=0,
        step=0.05,
        debounce=True,
        style={"width": "90px"},
    )
    log_axes = dcc.Checklist(
        id="metrics-log",
        value=[c for c in (log or "") if c in "xy"],
        inline=True,
        options=[{"label": "x", "value": "x"}, {"label": "y", "value": "y"}],
    )
    return controls(
        control("Smoothing", smoothing),
        control("EMA weight / window", weight),
        control("Log axes", log_axes),
        step_offsets_control("metrics-offsets", offsets),
        html.Button("CSV of what is plotted", id="metrics-csv", className="button small"),
        dcc.Download(id="metrics-download"),
    )


def _payloads(trace_ids: list[int], keys: list[str]) -> tuple[list[dict], list[str], list[str]]:
    """(series payloads with names, every key any chosen trace has, notes)."""
    api = session.api()
    payloads: list[dict] = []
    all_keys: dict[str, None] = {}  # insertion-ordered set
    notes: list[str] = []
    for tid in trace_ids:
        try:
            # one request: the values of the chosen keys this trace has, and every key it has
            body = api.series(tid, keys, skip_missing=True)
            listing = body
            trace = api.get_trace(tid)
        except ApiError as exc:
            notes.append(f"#{tid}: {exc.message}")
            continue
        for k in listing["keys"]:
            all_keys.setdefault(k, None)
        payloads.append({**body, "name": trace["name"], "live": trace.get("live")})
    return payloads, list(all_keys), notes


@dash.callback(
    Output("metrics-chart", "figure"),
    Output("metrics-keys", "options"),
    Output("metrics-keys", "value"),
    Output("metrics-message", "children"),
    Output("metrics-query", "data"),
    Output("metrics-poll", "disabled"),
    Input("metrics-traces", "value"),
    Input("metrics-keys", "value"),
    Input("metrics-smooth", "value"),
    Input("metrics-weight", "value"),
    Input("metrics-log", "value"),
    Input("metrics-offsets", "value"),
    Input("metrics-poll", "n_intervals"),
    State(zoom_id(ZOOM_PAGE), "data"),
)
def fill(trace_ids, keys, mode, weight, log, offsets_text, _n, zoom=None):
    trace_ids = [int(t) for t in trace_ids or []]
    keys = list(keys or [])
    try:
        payloads, all_keys, notes = _payloads(trace_ids, keys)
    except ApiError as exc:
        return empty_figure(exc.message), no_update, no_update, alert(exc.message), no_update, True
    keys_out = no_update
    if not keys and all_keys:
        keys = [k for k in DEFAULT_KEYS if k in all_keys][:2] or all_keys[:2]
        keys_out = keys
        payloads, all_keys, notes = _payloads(trace_ids, keys)
    query = {"traces": ",".join(map(str, trace_ids)), "keys": ",".join(keys)}
    if mode and mode != "none":
        query.update(smooth=mode, w=str(weight))
    if log:
        query["log"] = "".join(sorted(log))
    if offsets_text:
        query["offsets"] = offsets_text
    live = any(p.get("live") for p in payloads)
    if not trace_ids:
        return empty_figure("Choose one or more traces."), [], keys_out, None, "?" + urlencode(query), True
    if not keys:
        return (
            empty_figure("These traces have no per-step series."),
            [],
            keys_out,
            None,
            "?" + urlencode(query),
            not live,
        )
    fig = metrics_figure(
        payloads,
        keys,
        offsets=parse_offsets(offsets_text),
        mode=mode,
        param=weight,
        log_x="x" in (log or []),
        log_y="y" in (log or []),
    )
    missing = [k for k in keys if not any(k in p["series"] for p in payloads)]
    if missing:
        notes.append("no trace chosen has " + ", ".join(missing))
    message = alert("; ".join(notes), "info") if notes else None
    options = [{"label": k, "value": k} for k in all_keys]
    # rows have y axes of their own: the step axis they share is what the URL keeps
    shared_x = ((zoom or {}).get("metrics-chart") or {}).get("x")
    fig = apply_zoom(fig, {"x": shared_x} if shared_x else None)
    return fig, options, keys_out, message, "?" + urlencode(query), not live


dash.clientside_callback(
    """
    function(query) {
        if (query === undefined || query === null) { return window.dash_clientside.no_update; }
        // the chart's zoom (z.*, written by url_state) stays in the URL
        const next = new URLSearchParams(query);
        new URLSearchParams(window.location.search).forEach((v, k) => { if (k.startsWith("z.")) { next.set(k, v); } });
        const text = next.toString().replace(/%2C/g, ",").replace(/%3A/g, ":");
        const target = text ? "?" + text : "";
        if (window.location.search !== target) {
            window.history.replaceState(null, '', window.location.pathname + target);
        }
        return window.dash_clientside.no_update;
    }
    """,
    Output("metrics-url-sink", "title"),
    Input("metrics-query", "data"),
    prevent_initial_call=True,
)


@dash.callback(
    Output("metrics-download", "data"),
    Input("metrics-csv", "n_clicks"),
    State("metrics-traces", "value"),
    State("metrics-keys", "value"),
    State("metrics-smooth", "value"),
    State("metrics-weight", "value"),
    State("metrics-offsets", "value"),
    prevent_initial_call=True,
)
def download(_n, trace_ids, keys, mode, weight, offsets_text):
    payloads, _all, _notes = _payloads([int(t) for t in trace_ids or []], list(keys or []))
    rows = plotted(payloads, list(keys or []), parse_offsets(offsets_text), mode, weight)
    return dict(content=plotted_csv(rows), filename="metrics.csv", type="text/csv")
