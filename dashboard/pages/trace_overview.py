"""Overview of one trace: headline cards and stage time per step.

Ids: overview-cards (one .card per figure, ids card-steps, card-samples, card-tokens,
card-tail, card-imbalance, card-idle), overview-stage-time (stacked bars; hidden, with
overview-no-stage-time saying what to upload, when the trace has no stage timings),
overview-lengths (response p50/p90/p99/max over steps), overview-gpu (temporal breakdown
per rank, for traces with GPU events), overview-data-efficiency (DAPO groups generated /
kept / used per trainer step; card card-data-efficiency), trace-status, and the rename
form (trace-rename-name, trace-rename-save, trace-rename-message; the header's
trace-name follows). The charts' zoom
lives in the URL (?z.<chart>=x0,x1[,y0,y1]). A card from an
analysis whose result is behind the growing trace carries .card-stale ("computed 3 min
ago, steps 0–41 of 45 — refreshing") until the re-run's result replaces it.
"""

from __future__ import annotations

import dash
from dash import ALL, Input, Output, State, ctx, dcc, html, no_update

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.data_efficiency import data_efficiency_figure
from dashboard.figures.distributions import percentile_lines_figure
from dashboard.figures.gpu import temporal_breakdown_figure
from dashboard.figures.stages import stage_time_figure, trace_has_stage_timings
from dashboard.server.analysis_places import analyses_shown
from dashboard.server.figure_cache import cached
from dashboard.server.results import analysis_result, page_query
from dashboard.server.results import job as results_job
from dashboard.views.components import PAGE_TRACE_ID, RESULT, alert, card, control, controls, graph, section
from dashboard.views.freshness import stale_note
from dashboard.views.overview import Card, analysed_steps, overview_cards
from dashboard.views.panels import analysis_panel
from dashboard.views.trace_frame import trace_page
from dashboard.views.url_state import register_url_state, url_sink, zoom_id, zoom_store, zoomed

dash.register_page(
    __name__, path_template="/traces/<trace_id>", name="Overview", title="Trace · RLVR Explorer", nav="trace", order=0
)


def _shown(flag) -> dict:
    # Sections a trace has no data for stay in the layout (the callback fills every
    # chart) but are not displayed.
    return {} if flag else {"display": "none"}


ZOOMABLE = ("overview-stage-time", "overview-lengths", "overview-gpu", "overview-data-efficiency")
register_url_state("overview", {}, zoom=ZOOMABLE)


def body(trace: dict, query: dict | None = None) -> html.Div:
    # the API says which analyses apply to the trace and which show here (the registry's word)
    shown = analyses_shown("overview")
    kinds = [k for k in trace.get("analyses", []) if k in shown]
    timings = bool(trace.get("n_steps")) and trace_has_stage_timings(trace)
    return html.Div(
        [
            url_sink("overview"),
            zoom_store("overview", query or {}),
            html.Div(id="overview-cards", className="cards"),
            html.Div([analysis_panel(k, f"{k} analysis", trace["id"]) for k in kinds]),
            html.Div(
                section(
                    "Stage time per step",
                    graph("overview-stage-time"),
                    help_text="Measured seconds per stage from the framework's metric log; 'other' is the rest "
                    "of the step time.",
                ),
                style=_shown(timings),
            ),
            html.P(
                "No stage timings in this trace: upload the run's verl metric log (JSON lines with timing_s/* "
                "per step, see docs/formats.md) together with its trace files to see the time per stage and step.",
                id="overview-no-stage-time",
                className="help",
                style=_shown(trace.get("n_steps") and not timings),
            ),
            html.Div(
                section("Response length over steps", graph("overview-lengths")), style=_shown(trace.get("n_samples"))
            ),
            html.Div(
                section("GPU time per rank (HTA temporal breakdown)", graph("overview-gpu")),
                style=_shown(trace.get("n_gpu_events")),
            ),
            html.Div(
                section(
                    "Data efficiency (DAPO dynamic sampling)",
                    graph("overview-data-efficiency"),
                    help_text="Per trainer step: prompt groups generated, kept by DAPO's filter and used in the "
                    "training batch, from dapo_filter_indices.jsonl.",
                ),
                style=_shown("data_efficiency" in trace.get("analyses", [])),
            ),
            _rename_form(trace),
        ]
    )


def _rename_form(trace: dict) -> html.Section:
    return section(
        "Name",
        controls(
            control(
                "Trace name",
                dcc.Input(
                    id="trace-rename-name",
                    type="text",
                    value=trace.get("name") or "",
                    maxLength=300,
                    className="input",
                    style={"width": "420px", "maxWidth": "100%"},
                ),
            ),
            html.Button("Rename", id="trace-rename-save", n_clicks=0, className="button small"),
        ),
        html.Div(id="trace-rename-message"),
        help_text="The name the trace lists, Compare and Metrics show (also `rlvr-explorer rename` and "
        "PATCH /traces/{id}).",
    )


@dash.callback(
    Output("trace-rename-message", "children"),
    Output("trace-name", "children"),
    Input("trace-rename-save", "n_clicks"),
    State("trace-rename-name", "value"),
    State(PAGE_TRACE_ID, "data"),
    prevent_initial_call=True,
)
def rename(_n, name, trace_id):
    name = (name or "").strip()
    if not name:  # checked here too: an empty name is not sent
        return alert("Give the trace a name (1-300 characters).", id="trace-rename-error"), no_update
    try:
        trace = session.api().rename_trace(trace_id, name)
    except ApiError as exc:
        return alert(exc.message, id="trace-rename-error"), no_update
    return alert(f"Renamed to {trace['name']!r}.", "ok", id="trace-rename-ok"), trace["name"]


def layout(trace_id: str | None = None, **query):
    return trace_page(trace_id, __name__, "", lambda trace: body(trace, query))


@dash.callback(
    Output("overview-cards", "children"),
    Output("overview-stage-time", "figure"),
    Output("overview-lengths", "figure"),
    Output("overview-gpu", "figure"),
    Output("overview-data-efficiency", "figure"),
    Input(PAGE_TRACE_ID, "data"),
    Input({"type": RESULT, "kind": ALL}, "data"),
    State(zoom_id("overview"), "data"),
)
def fill(trace_id, _results, zoom=None):
    results, job_ids = {}, {}
    for item in ctx.inputs_list[1]:
        kind = item["id"]["kind"]
        result, _note = analysis_result(item.get("value"), kind, page_query(kind))  # the pages' views: shared
        if result is not None:
            results[kind] = result
            job_ids[kind] = item["value"]["job_id"]
    try:
        cards, analysed, live, *figures = cached(
            ("overview", trace_id, tuple(sorted(job_ids.items()))), lambda: _figures(trace_id, results)
        )
        # marked here, not in the cache: the age goes on while the cached cards are shown
        shown = [_card(c, results, job_ids, analysed, live) for c in cards]
    except ApiError as exc:
        fig = empty_figure(exc.message)
        return alert(exc.message), fig, fig, fig, fig
    return (shown, *zoomed(figures, ZOOMABLE, zoom))


def _card(c: Card, results: dict, job_ids: dict, analysed: list[int], live: bool) -> html.Div:
    """The card, marked with its result's age when that result is behind the trace."""
    stale = None
    if c.source is not None and c.source in results:
        job = results_job(job_ids[c.source], page_query(c.source))
        stale = stale_note(job, results[c.source], analysed, refreshing=live)
    return card(c.label, c.value, c.hint, card_id=f"card-{c.key}", stale=stale)


def _figures(trace_id, results: dict):
    api = session.api()
    trace = api.get_trace(trace_id)
    steps = api.steps(trace_id)
    summary = api.summaries(trace_id, field="response") if trace.get("n_samples") else None
    cards = overview_cards(trace, steps, summary, results)
    lengths = percentile_lines_figure(summary) if summary else empty_figure("This trace has no samples")
    if not trace.get("n_gpu_events"):
        gpu = empty_figure("This trace has no GPU events")
    elif results.get("gpu_timeline"):
        gpu = temporal_breakdown_figure(results["gpu_timeline"].get("temporal"))
    else:
        gpu = empty_figure("Waiting for the GPU timeline analysis…")
    eff = results.get("data_efficiency")
    efficiency = data_efficiency_figure(eff) if eff else empty_figure("No data-efficiency analysis for this trace")
    live = bool(trace.get("live"))
    return cards, analysed_steps(steps), live, stage_time_figure(steps), lengths, gpu, efficiency
