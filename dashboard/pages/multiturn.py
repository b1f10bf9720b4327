"""Multi-turn rollouts, reward and tool latency of one trace (the "multiturn" and
"latency" analyses).

Charts: mt-counts (turns / tool calls per trajectory), mt-steps (over steps), mt-cache
(prefix-cache hit rate), mt-context (context growth by turn), mt-latency (engine latency
against tokens), lat-reward (reward seconds per step over ranks), lat-reward-ranks,
lat-tools (tool-call latency per step). Every chart's zoom lives in the URL (?z.<chart>=x0,x1[,y0,y1]).
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, html

from dashboard.figures.common import empty_figure
from dashboard.figures.multiturn import (
    cache_hit_figure,
    context_growth_figure,
    counts_hist_figure,
    latency_vs_tokens_figure,
    reward_latency_figure,
    reward_ranks_figure,
    tool_latency_figure,
    turns_over_steps_figure,
)
from dashboard.server.figure_cache import cached
from dashboard.server.results import analysis_result
from dashboard.views.attach_hint import upload_hint
from dashboard.views.components import RESULT, graph, section
from dashboard.views.drill import drill_location, register_drill
from dashboard.views.panels import analysis_panel
from dashboard.views.trace_frame import trace_page
from dashboard.views.url_state import register_url_state, url_sink, zoom_id, zoom_store, zoomed

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/multiturn",
    name="Multi-turn & reward",
    title="Multi-turn & reward · RLVR Explorer",
    nav="trace",
    order=4,
)


MT_CHARTS = ("mt-counts", "mt-steps", "mt-cache", "mt-context", "mt-latency")
LAT_CHARTS = ("lat-reward", "lat-tools", "lat-reward-ranks")
# one URL state per section: a trace may have either (a callback whose inputs are only
# partly on the page is an error in the browser)
register_url_state("multiturn", {}, zoom=MT_CHARTS)
register_url_state("multiturn-latency", {}, zoom=LAT_CHARTS)


def body(trace: dict, query: dict | None = None) -> html.Div:
    kinds = trace.get("analyses", [])
    parts = []
    if "multiturn" in kinds:
        parts.append(
            section(
                "Multi-turn rollouts",
                url_sink("multiturn"),
                zoom_store("multiturn", query or {}),
                analysis_panel("multiturn", "multi-turn analysis", trace["id"]),
                html.Div(className="grid-2", children=[graph("mt-counts"), graph("mt-steps")]),
                html.Div(className="grid-2", children=[graph("mt-cache"), graph("mt-context")]),
                graph("mt-latency"),
            )
        )
    if "latency" in kinds:
        parts.append(
            section(
                "Reward and tool latency",
                url_sink("multiturn-latency"),
                zoom_store("multiturn-latency", query or {}),
                analysis_panel("latency", "latency analysis", trace["id"]),
                html.Div(className="grid-2", children=[graph("lat-reward"), graph("lat-tools")]),
                graph("lat-reward-ranks"),
            )
        )
    if not parts:
        return upload_hint(
            trace["id"], "This trace has no turns, tool calls or reward timings.", "turns", "rank_timings"
        )
    return html.Div([drill_location("multiturn"), *parts])


register_drill("multiturn")


def layout(trace_id: str | None = None, **query):
    return trace_page(trace_id, __name__, "/multiturn", lambda trace: body(trace, query))


@dash.callback(
    Output("mt-counts", "figure"),
    Output("mt-steps", "figure"),
    Output("mt-cache", "figure"),
    Output("mt-context", "figure"),
    Output("mt-latency", "figure"),
    Input({"type": RESULT, "kind": "multiturn"}, "data"),
    State(zoom_id("multiturn"), "data"),
)
def fill_multiturn(data, zoom=None):
    result, note = analysis_result(data, "multi-turn")
    if result is None:
        fig = empty_figure(note)
        return (fig,) * 5
    figures = cached(
        ("multiturn", data["job_id"]),
        lambda: (
            counts_hist_figure(result),
            turns_over_steps_figure(result),
            cache_hit_figure(result),
            context_growth_figure(result),
            latency_vs_tokens_figure(result),
        ),
    )
    return zoomed(figures, MT_CHARTS, zoom)


@dash.callback(
    Output("lat-reward", "figure"),
    Output("lat-tools", "figure"),
    Output("lat-reward-ranks", "figure"),
    Input({"type": RESULT, "kind": "latency"}, "data"),
    State(zoom_id("multiturn-latency"), "data"),
)
def fill_latency(data, zoom=None):
    result, note = analysis_result(data, "latency")
    if result is None:
        fig = empty_figure(note)
        return fig, fig, fig
    figures = cached(
        ("latency", data["job_id"]),
        lambda: (reward_latency_figure(result), tool_latency_figure(result), reward_ranks_figure(result)),
    )
    return zoomed(figures, LAT_CHARTS, zoom)
