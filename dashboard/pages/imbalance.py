"""DP load imbalance of one trace (the "imbalance" analysis).

Filters: imb-load (tokens / training cost, explained by imb-cost-caption), imb-metric
(max/mean or max/min); they and the charts' zoom live in the URL (?load=&ratio=&z.<chart>=).
Charts: imb-heatmap (step x DP rank load relative to the step mean), imb-ratio
(recorded vs KK vs LPT), imb-saving (per-step saving). Cards: imb-cards.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from dashboard.figures.common import empty_figure
from dashboard.figures.imbalance import (
    COST_CAPTION,
    LOAD_LABELS,
    imbalance_ratio_figure,
    load_heatmap_figure,
    saving_figure,
    saving_summary,
)
from dashboard.server.figure_cache import cached
from dashboard.server.results import analysis_result, page_query
from dashboard.views.attach_hint import upload_hint
from dashboard.views.components import RESULT, alert, card, control, controls, graph, section
from dashboard.views.drill import drill_location, register_drill
from dashboard.views.formatting import human_ratio, human_share
from dashboard.views.panels import analysis_panel
from dashboard.views.trace_frame import trace_page
from dashboard.views.url_state import query_value, register_url_state, url_sink, zoom_id, zoom_store, zoomed

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/imbalance",
    name="Imbalance",
    title="Imbalance · RLVR Explorer",
    nav="trace",
    order=3,
)


def body(trace: dict, query: dict | None = None) -> html.Div:
    q = query or {}
    if not trace.get("n_samples"):
        return upload_hint(trace["id"], "This trace has no samples, so no per-rank token loads.", "samples")
    if "imbalance" not in trace.get("analyses", ["imbalance"]):
        # the registry's word (TraceOut.analyses): no dp_rank per sample, nothing to balance
        return alert(
            "This trace records no DP rank per sample (dp_rank), so there are no per-rank loads to compare.", "info"
        )
    return html.Div(
        [
            drill_location("imbalance"),
            url_sink("imbalance"),
            zoom_store("imbalance", q),
            analysis_panel("imbalance", "imbalance analysis", trace["id"]),
            controls(
                control(
                    "Load",
                    dcc.RadioItems(
                        id="imb-load",
                        value=query_value(q, "load", "tokens", choices=tuple(LOAD_LABELS)),
                        inline=True,
                        options=[{"label": v, "value": k} for k, v in LOAD_LABELS.items()],
                    ),
                ),
                control(
                    "Ratio",
                    dcc.RadioItems(
                        id="imb-metric",
                        value=query_value(q, "ratio", "max_over_mean", choices=("max_over_mean", "max_over_min")),
                        inline=True,
                        options=[
                            {"label": "max / mean", "value": "max_over_mean"},
                            {"label": "max / min", "value": "max_over_min"},
                        ],
                    ),
                ),
            ),
            html.P(COST_CAPTION, id="imb-cost-caption", className="help"),
            html.Div(id="imb-cards", className="cards"),
            section(
                "Load per DP rank",
                graph("imb-heatmap"),
                help_text="Each rank's summed load relative to the step's mean; red ranks make every other rank wait.",
            ),
            html.Div(
                className="grid-2",
                children=[
                    section(
                        "Imbalance over steps, and with balancing",
                        graph("imb-ratio"),
                        help_text="Karmarkar-Karp with equal-size partitions and LPT (longest first to the least loaded), "
                        "prompt groups kept together.",
                    ),
                    section("Saving", graph("imb-saving")),
                ],
            ),
        ]
    )


register_drill("imbalance")
ZOOMABLE = ("imb-heatmap", "imb-ratio", "imb-saving")
register_url_state(
    "imbalance",
    {"load": ("imb-load", "value", "tokens"), "ratio": ("imb-metric", "value", "max_over_mean")},
    zoom=ZOOMABLE,
)


def layout(trace_id: str | None = None, **query):
    return trace_page(trace_id, __name__, "/imbalance", lambda trace: body(trace, query))


@dash.callback(
    Output("imb-cards", "children"),
    Output("imb-heatmap", "figure"),
    Output("imb-ratio", "figure"),
    Output("imb-saving", "figure"),
    Input({"type": RESULT, "kind": "imbalance"}, "data"),
    Input("imb-load", "value"),
    Input("imb-metric", "value"),
    State(zoom_id("imbalance"), "data"),
)
def fill(data, load, metric, zoom=None):
    load = load or "tokens"
    # the page view of the one load drawn: < 2 MB where the whole result is megabytes
    result, note = analysis_result(data, "imbalance", page_query("imbalance", load))
    if result is None:
        fig = empty_figure(note)
        return [], fig, fig, fig
    cards, *figures = cached(("imbalance", data["job_id"], load, metric), lambda: _figures(result, load, metric))
    return (cards, *zoomed(figures, ZOOMABLE, zoom))


def _figures(result: dict, load: str, metric: str | None):
    s = saving_summary(result, load)
    cards = [
        card("DP ranks", str(s["dp_size"] or "—")),
        card("Max / mean", human_ratio(s["max_over_mean"]), "mean over steps, recorded"),
        card("Max / min", human_ratio(s["max_over_min"]), "mean over steps, recorded"),
        card(
            "Balancing saves",
            human_share(s["time_saved"]),
            "of the slowest rank's time, whole run, best of recorded / KK / LPT per step",
            card_id="imb-saved",
        ),
        card("KK", _vs_recorded(s["kk_time_saved"]), "whole run, vs the recorded split", card_id="imb-kk-saved"),
        card("LPT", _vs_recorded(s["lpt_time_saved"]), "whole run, vs the recorded split"),
    ]
    return (
        cards,
        load_heatmap_figure(result, load),
        imbalance_ratio_figure(result, load, metric or "max_over_mean"),
        saving_figure(result, load),
    )


def _vs_recorded(saved: float | None) -> str:
    """'saves 4.2%' or 'loses 1.3%' (a heuristic worse than the recorded split is no saving)."""
    if saved is None:
        return "—"
    return f"saves {human_share(saved)}" if saved >= 0 else f"loses {human_share(-saved)}"
