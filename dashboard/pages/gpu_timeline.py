"""GPU timeline of one trace: stage Gantt per rank, kernel Gantt per rank and stream for a
step and time window, HTA-style breakdowns, and the window as Chrome-trace JSON.

Controls: gpu-step, gpu-ranks, gpu-zoom-load (fetch full detail for the zoomed range),
gpu-zoom-reset, gpu-download (+ gpu-download-file, a dcc.Download).
Charts: gpu-stage-gantt, gpu-kernel-gantt, gpu-temporal, gpu-idle, gpu-kinds,
gpu-stragglers; table gpu-top-kernels.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, ctx, dcc, html, no_update
from dash.dcc.express import send_bytes  # where it is defined: dcc re-exports it in a way mypy cannot see

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.gpu import (
    idle_breakdown_figure,
    kernel_gantt_figure,
    kernel_kind_figure,
    short_kernel_name,
    straggler_figure,
    temporal_breakdown_figure,
    top_kernels_rows,
)
from dashboard.figures.gpu_hta import (
    annotation_rows,
    kernel_type_rows,
    launch_stats_rows,
    memory_bw_rows,
    overlap_figure,
    per_step_figure,
    queue_length_figure,
    stragglers_text,
)
from dashboard.figures.stages import has_stage_timings, stage_gantt_figure
from dashboard.server.figure_cache import cached
from dashboard.server.results import analysis_result
from dashboard.views.attach_hint import upload_hint
from dashboard.views.components import PAGE_TRACE_ID, RESULT, alert, control, controls, graph, section
from dashboard.views.formatting import kineto_ranks, kineto_steps, zoom_range
from dashboard.views.panels import analysis_panel
from dashboard.views.trace_frame import trace_page
from dashboard.views.url_state import query_value, register_url_state, url_sink

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/gpu",
    name="GPU timeline",
    title="GPU timeline · RLVR Explorer",
    nav="trace",
    order=2,
)

EVENT_BUDGET = 10_000  # GPU events drawn per view, over all ranks (~1.5 MB of figure JSON)
DEFAULT_RANKS = 4


def _step_and_rank_pickers(trace: dict, step_ids: list[int], query: dict, has_gpu: bool) -> html.Div:
    """The step shown (ProfilerStep#N where the profiler named it) and, with GPU events,
    the ranks drawn."""
    profiled = kineto_steps(trace)
    ranks = kineto_ranks(trace)
    first = profiled[0] if profiled else (step_ids[0] if step_ids else None)
    step = dcc.Dropdown(
        id="gpu-step",
        options=[{"label": f"ProfilerStep#{s}" if s in set(profiled) else f"step {s}", "value": s} for s in step_ids],
        value=query_value(query, "step", first, choices=step_ids, kind=int),
        clearable=False,
        style={"minWidth": "160px"},
    )
    rank_picker = dcc.Dropdown(
        id="gpu-ranks",
        multi=True,
        value=query_value(query, "ranks", ranks[:DEFAULT_RANKS], choices=ranks, kind=int),
        options=[{"label": f"rank {r}", "value": r} for r in ranks],
        placeholder="ranks",
        style={"minWidth": "260px"},
    )
    return controls(
        control("ProfilerStep" if profiled else "Step", step), control("Ranks", rank_picker) if has_gpu else None
    )


def _kernel_section() -> html.Section:
    """The kernel timeline: zoom and load its detail, find a kernel, download the window."""
    return section(
        "GPU kernels",
        controls(
            html.Button("Load detail for the zoomed range", id="gpu-zoom-load", n_clicks=0, className="button small"),
            html.Button("Whole step", id="gpu-zoom-reset", n_clicks=0, className="button small secondary"),
            dcc.Input(
                id="gpu-search",
                type="search",
                placeholder="find a kernel or op by name",
                debounce=True,
                style={"minWidth": "220px"},
            ),
            dcc.Dropdown(
                id="gpu-search-hits",
                options=[],
                placeholder="matches: choose one to jump to it",
                style={"minWidth": "340px"},
            ),
            html.Button(
                "Download window (Chrome trace JSON)", id="gpu-download", n_clicks=0, className="button small secondary"
            ),
            dcc.Download(id="gpu-download-file"),
        ),
        html.Div(id="gpu-download-message"),
        html.Div(id="gpu-window-info", className="muted"),
        graph("gpu-kernel-gantt"),
        help_text="Zoom with the mouse, then load detail: the detail view names the kernels on their bars and "
        "draws an arrow from each CPU launch to its kernel. The time axis keeps one origin (shown in its title) "
        "through every zoom. A grey bar on a rank's 'idle' row is time when none of its streams ran. "
        "The download (every event of the window: CPU ops, runtime calls, annotations, flows, GPU work) "
        "opens in Perfetto (ui.perfetto.dev) or chrome://tracing.",
    )


def _hta_sections(trace_id) -> list:
    """The Holistic Trace Analysis views: where GPU time goes, then overlap, queue,
    launches, memory and annotations."""
    return [
        section(
            "Where GPU time goes (HTA definitions)",
            analysis_panel("gpu_timeline", "GPU timeline analysis", trace_id),
            html.Div(className="grid-2", children=[graph("gpu-temporal"), graph("gpu-idle")]),
            html.Div(className="grid-2", children=[graph("gpu-kinds"), graph("gpu-stragglers")]),
            html.H4("Top kernels"),
            html.Div(id="gpu-top-kernels"),
        ),
        section(
            "Overlap, launch queue, launches, memory, annotations (HTA definitions)",
            html.Div(className="grid-2", children=[graph("gpu-overlap"), graph("gpu-queue")]),
            graph("gpu-per-step"),
            html.P(id="gpu-hta-stragglers"),
            html.H4("Kernel launches per rank"),
            html.Div(id="gpu-launch-table"),
            html.H4("Time by kernel type and overlap of types (all ranks)"),
            html.Div(id="gpu-kernel-type-table"),
            html.H4("Memory copy bandwidth"),
            html.Div(id="gpu-membw-table"),
            html.H4("User annotations on the GPU timeline"),
            html.Div(id="gpu-annotation-table"),
            help_text="Overlap: share of NCCL time during which a computation kernel also ran. Launch queue: "
            "GPU operations launched by the CPU and not yet started, per stream (mean / max over the queue's "
            "changes; a full queue holds 1024). Launch delay: GPU start minus the end of its CPU launch call. "
            "Bandwidth: the running sum of concurrent copies' GB/s per copy kind. All as Holistic Trace "
            "Analysis 0.5.0 computes them (its window: the last ProfilerStep is left out).",
        ),
    ]


def body(trace: dict, query: dict | None = None) -> html.Div:
    try:
        steps = session.api().steps(trace["id"])
    except ApiError:
        steps = []
    has_gpu = bool(trace.get("n_gpu_events"))
    step_ids = sorted(set(kineto_steps(trace)) | {s["step"] for s in steps})
    has_stages = has_stage_timings(steps) or bool(trace.get("n_rank_timings"))
    if not has_gpu and not has_stages:
        return upload_hint(
            trace["id"],
            "This trace has no GPU events, stage timings or per-rank timings.",
            "gpu_events",
            "steps",
            "rank_timings",
        )
    parts = [
        url_sink("gpu"),
        _step_and_rank_pickers(trace, step_ids, query or {}, has_gpu),
        dcc.Store(id="gpu-steps", data=steps),
    ]
    if has_stages:
        parts.append(
            section(
                "Stages per rank",
                graph("gpu-stage-gantt"),
                help_text="Each stage starts when the slowest rank finished the previous one; grey = waiting.",
            )
        )
    if has_gpu:
        parts += [
            dcc.Store(id="gpu-window"),
            dcc.Store(id="gpu-origin"),
            _kernel_section(),
            *_hta_sections(trace["id"]),
        ]
    return html.Div(parts)


register_url_state("gpu", {"step": ("gpu-step", "value", None), "ranks": ("gpu-ranks", "value", [])})


def layout(trace_id: str | None = None, **query):
    return trace_page(trace_id, __name__, "/gpu", lambda trace: body(trace, query))


@dash.callback(
    Output("gpu-stage-gantt", "figure"),
    Input("gpu-step", "value"),
    State("gpu-steps", "data"),
    State(PAGE_TRACE_ID, "data"),
)
def fill_stage_gantt(step, steps, trace_id):
    if step is None:
        return empty_figure("Choose a step")
    row = next((s for s in steps or [] if s["step"] == step), None)
    try:
        timings = session.api().rank_timings(trace_id, step=step)
    except ApiError as exc:
        return empty_figure(exc.message)
    return stage_gantt_figure(row, timings, step_no=step)


@dash.callback(
    Output("gpu-window", "data"),
    Input("gpu-zoom-load", "n_clicks"),
    Input("gpu-zoom-reset", "n_clicks"),
    Input("gpu-step", "value"),
    Input("gpu-search-hits", "value"),
    State("gpu-kernel-gantt", "relayoutData"),
    State("gpu-origin", "data"),
    prevent_initial_call=True,
)
def set_window(_load, _reset, _step, hit, relayout, origin):
    if ctx.triggered_id == "gpu-search-hits":
        if not hit:
            return no_update
        start, dur = (float(x) for x in str(hit).split(":")[:2])
        pad = max(200.0, min(20 * dur, 5000.0))  # the match and some context around it
        return {"start_us": start - pad, "end_us": start + dur + pad, "focus": True}
    if ctx.triggered_id != "gpu-zoom-load":
        return None
    rng = zoom_range(relayout)
    if rng is None or origin is None:
        return no_update
    return {"start_us": origin + rng[0] * 1000.0, "end_us": origin + rng[1] * 1000.0}


def _fetch_events(trace_id, ranks, step, window) -> tuple[list[dict], bool]:
    api = session.api()
    per_rank = max(EVENT_BUDGET // max(len(ranks), 1), 500)
    events, truncated = [], False
    for r in ranks or [None]:
        kw = dict(rank=r, limit=per_rank)
        if window:
            kw.update(start_us=window["start_us"], end_us=window["end_us"])
        else:
            kw.update(step=step)
        page = api.gpu_events(trace_id, **kw)
        events += page.get("items", [])
        truncated |= bool(page.get("truncated"))
    return events, truncated


@dash.callback(
    Output("gpu-kernel-gantt", "figure"),
    Output("gpu-origin", "data"),
    Output("gpu-window-info", "children"),
    Input("gpu-step", "value"),
    Input("gpu-ranks", "value"),
    Input("gpu-window", "data"),
    State("gpu-search", "value"),
    State("gpu-origin", "data"),
    State(PAGE_TRACE_ID, "data"),
)
def fill_kernel_gantt(step, ranks, window, search, origin, trace_id):
    try:
        trace = session.api().get_trace(trace_id)
        events, truncated = _fetch_events(trace_id, ranks, step, window)
    except ApiError as exc:
        return empty_figure(exc.message), no_update, alert(exc.message)
    # One origin for the whole trace (the first ProfilerStep's start, else the first GPU
    # event seen), kept through every zoom so times stay comparable.
    if origin is None:
        origin = trace_origin(trace)
    if origin is None and events:
        origin = min(e["start_us"] for e in events)
    detail = bool(window)
    fig = kernel_gantt_figure(
        events,
        truncated=truncated,
        origin_us=origin,
        origin_label=f"t0 = {origin:,.0f} us (trace clock)" if origin is not None else "the first event",
        title=f"GPU kernels, ProfilerStep#{step}" if not window else "GPU kernels, detail",
        labels=detail or len(events) <= 300,
        flows=detail,
        x_range_us=(window["start_us"], window["end_us"]) if window else None,
        highlight=search or None,
    )
    what = f"window {(window['end_us'] - window['start_us']) / 1000:,.3f} ms" if window else f"step {step}"
    if window and origin is not None:
        what += f" at {(window['start_us'] - origin) / 1000:,.3f} ms"
    info = f"{len(events):,} GPU events, {what}" + (
        " — only the first ones: zoom in and load detail" if truncated else ""
    )
    return fig, origin, info


def trace_origin(trace: dict) -> float | None:
    """Start of the earliest ProfilerStep over all ranks (the time axis' t0)."""
    windows = ((trace.get("metadata") or {}).get("kineto") or {}).get("steps") or {}
    starts = [float(w[1]) for ws in windows.values() for w in ws]
    return min(starts) if starts else None


SEARCH_HITS = 100


def _duration(us) -> str:
    if us is None:
        return "?"
    return f"{us / 1000:,.3f} ms" if us >= 1000 else f"{us:,.1f} µs"


@dash.callback(
    Output("gpu-search-hits", "options"),
    Output("gpu-search-hits", "value"),
    Input("gpu-search", "value"),
    State("gpu-ranks", "value"),
    State("gpu-origin", "data"),
    State(PAGE_TRACE_ID, "data"),
    prevent_initial_call=True,
)
def search_kernels(text, ranks, origin, trace_id):
    """Kernels and CPU ops whose name contains the text (on the chosen ranks): one option
    per match, in time order; choosing one zooms the Gantt onto it."""
    if not text:
        return [], None
    api = session.api()
    hits: list[dict] = []
    try:
        try:  # every kind of event (CPU ops too) when the trace's events were kept
            found = api.search_events(trace_id, text, rank=list(ranks) if ranks else None, limit=SEARCH_HITS)
            hits = [
                {
                    "name": e["name"],
                    "rank": e["rank"],
                    "where": e["cat"] if e["stream"] < 0 else f"stream {e['stream']}",
                    "start_us": e["ts_us"],
                    "dur_us": e["dur_us"],
                }
                for e in found.get("items", [])
            ]
        except ApiError:
            for r in ranks or [None]:
                for e in api.gpu_events(trace_id, rank=r, name=text, limit=SEARCH_HITS).get("items", []):
                    hits.append({**e, "where": f"stream {e['stream']}"})
    except ApiError as exc:
        return [{"label": exc.message, "value": "", "disabled": True}], None
    hits.sort(key=lambda e: e["start_us"])
    t0 = origin if origin is not None else (hits[0]["start_us"] if hits else 0.0)
    options = [
        {
            # where it starts (offset in the window) and how long it lasts: never a bare "x ms"
            "label": f"{short_kernel_name(e['name'], 50)} · rank {e['rank']} {e['where']} · "
            f"starts at +{(e['start_us'] - t0) / 1000:,.3f} ms, lasts {_duration(e.get('dur_us'))}",
            "value": f"{e['start_us']}:{e['dur_us']}:{e['rank']}",
        }
        for e in hits[:SEARCH_HITS]
    ]
    if not options:
        return [{"label": f"no kernel or op name contains '{text}'", "value": "", "disabled": True}], None
    return options, None


@dash.callback(
    Output("gpu-download-file", "data"),
    Output("gpu-download-message", "children"),
    Input("gpu-download", "n_clicks"),
    State("gpu-step", "value"),
    State("gpu-ranks", "value"),
    State("gpu-window", "data"),
    State(PAGE_TRACE_ID, "data"),
    prevent_initial_call=True,
)
def download(n, step, ranks, window, trace_id):
    if not n:
        return no_update, no_update
    kw: dict[str, Any] = {"rank": list(ranks) if ranks else None}
    if window:
        kw.update(start_us=window["start_us"], end_us=window["end_us"])
    else:
        kw.update(step=step)
    try:
        content = session.api().chrome_trace(trace_id, **kw)
    except ApiError as exc:
        return no_update, alert(f"Download failed: {exc.message}")
    suffix = f"step{step}" if not window else f"{window['start_us']:.0f}-{window['end_us']:.0f}us"
    rank = "ranks" + "-".join(str(r) for r in ranks) + "_" if ranks else ""
    return send_bytes(content, f"trace{trace_id}_{rank}{suffix}.json"), None


def top_kernels_table(rows: list[dict]):
    if not rows:
        return html.P("No kernels.", className="muted")
    head = html.Tr(
        [
            html.Th("Kind"),
            html.Th("Kernel"),
            html.Th("Calls", className="num"),
            html.Th("Total (ms)", className="num"),
            html.Th("Share of kind", className="num"),
        ]
    )
    body = [
        html.Tr(
            [
                html.Td(r["kind"]),
                html.Td(r["name"][:140], title=r["name"]),
                html.Td(f"{r['count']:,}" if r["count"] is not None else "—", className="num"),
                html.Td(f"{r['sum_ms']:,.2f}", className="num"),
                html.Td(f"{r['pct_of_kind']:.1f}%" if r["pct_of_kind"] is not None else "—", className="num"),
            ]
        )
        for r in rows
    ]
    return html.Table([html.Thead(head), html.Tbody(body)], className="table")


@dash.callback(
    Output("gpu-temporal", "figure"),
    Output("gpu-idle", "figure"),
    Output("gpu-kinds", "figure"),
    Output("gpu-stragglers", "figure"),
    Output("gpu-top-kernels", "children"),
    Input({"type": RESULT, "kind": "gpu_timeline"}, "data"),
)
def fill_breakdowns(data):
    result, note = analysis_result(data, "GPU timeline")
    if result is None:
        fig = empty_figure(note)
        return fig, fig, fig, fig, html.P(note, className="muted")
    return cached(("gpu-breakdowns", data["job_id"]), lambda: _breakdowns(result))


def _breakdowns(result: dict):
    kernels = result.get("kernel_types") or {}
    return (
        temporal_breakdown_figure(result.get("temporal")),
        idle_breakdown_figure(result.get("idle")),
        kernel_kind_figure(kernels.get("by_kind")),
        straggler_figure((result.get("stragglers") or {}).get("per_rank")),
        top_kernels_table(top_kernels_rows(kernels.get("top_kernels"))),
    )


def rows_table(rows: list[dict], empty: str = "Nothing to show.") -> html.Table | html.P:
    """A plain table of formatted row dicts (numbers right-aligned)."""
    if not rows:
        return html.P(empty, className="muted")
    keys = list(rows[0])
    numeric = {k for k in keys if all(isinstance(r[k], (int, float)) or str(r[k])[:1].isdigit() for r in rows)}
    head = html.Tr([html.Th(k, className="num" if k in numeric else None) for k in keys])
    body = [
        html.Tr(
            [
                html.Td(
                    str(r[k])[:140],
                    title=str(r[k]) if len(str(r[k])) > 140 else None,
                    className="num" if k in numeric else None,
                )
                for k in keys
            ]
        )
        for r in rows
    ]
    return html.Table([html.Thead(head), html.Tbody(body)], className="table")


NO_CPU_SIDE = "Needs the trace's CPU-side events (kept for Kineto traces ingested from now on; upload it again)."


@dash.callback(
    Output("gpu-overlap", "figure"),
    Output("gpu-queue", "figure"),
    Output("gpu-per-step", "figure"),
    Output("gpu-hta-stragglers", "children"),
    Output("gpu-launch-table", "children"),
    Output("gpu-kernel-type-table", "children"),
    Output("gpu-membw-table", "children"),
    Output("gpu-annotation-table", "children"),
    Input({"type": RESULT, "kind": "gpu_timeline"}, "data"),
)
def fill_hta(data):
    result, note = analysis_result(data, "GPU timeline")
    if result is None:
        fig = empty_figure(note)
        muted = html.P(note, className="muted")
        return fig, fig, fig, note, muted, muted, muted, muted
    return cached(("gpu-hta", data["job_id"]), lambda: _hta_panels(result))


def _hta_panels(result: dict):
    cpu = bool(result.get("cpu_side"))
    return (
        overlap_figure(result.get("comm_comp_overlap")),
        queue_length_figure((result.get("queue_length") or {}).get("summary")) if cpu else empty_figure(NO_CPU_SIDE),
        per_step_figure((result.get("per_step") or {}).get("temporal")),
        stragglers_text(result.get("potential_stragglers")) if cpu else NO_CPU_SIDE,
        rows_table(launch_stats_rows(result.get("launch_stats")), NO_CPU_SIDE if not cpu else "No launches."),
        rows_table(kernel_type_rows(result.get("kernel_breakdown")), "No kernels."),
        rows_table(memory_bw_rows(result.get("memory_bw")), NO_CPU_SIDE if not cpu else "No memory copies."),
        rows_table(
            annotation_rows(result.get("user_annotations")), NO_CPU_SIDE if not cpu else "No GPU user annotations."
        ),
    )
