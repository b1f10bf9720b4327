"""Length distributions of one trace, from the precomputed per-step summaries.

Filters: dist-field (response / prompt / total), dist-task, dist-phase (training /
validation / all steps), dist-log (log length axis), dist-cdf-steps (steps to overlay);
they and every chart's zoom live in the URL (?field=&task=&phase=&log=&cdf=&z.<chart>=).
Charts: dist-box (per-step boxes), dist-heatmap (step x length), dist-percentiles
(p50/p90/p99/max), dist-tail (max/mean and truncation), dist-cdf (CDFs of chosen steps),
and the long-tail analysis figures longtail-idle, longtail-finish, longtail-engines;
for traces with rewards, the reward-vs-length panel (dashboard/views/reward_length_panel.py).
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.distributions import (
    cdf_figure,
    default_cdf_steps,
    length_box_figure,
    length_heatmap_figure,
    percentile_lines_figure,
    tail_figure,
)
from dashboard.figures.longtail import longtail_engine_figure, longtail_finish_figure, longtail_idle_figure
from dashboard.server.figure_cache import cached
from dashboard.server.results import analysis_result, page_query
from dashboard.views.attach_hint import upload_hint
from dashboard.views.components import PAGE_TRACE_ID, RESULT, alert, control, controls, graph, section
from dashboard.views.drill import drill_location, register_drill
from dashboard.views.formatting import PHASES, filter_phase
from dashboard.views.panels import analysis_panel
from dashboard.views.reward_length_panel import length_unit_note, reward_length_section
from dashboard.views.trace_frame import trace_page
from dashboard.views.url_state import apply_zoom, query_value, register_url_state, url_sink, zoom_id, zoom_store

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/distributions",
    name="Distributions",
    title="Distributions · RLVR Explorer",
    nav="trace",
    order=1,
)


ZOOMABLE = (
    "dist-box",
    "dist-heatmap",
    "dist-percentiles",
    "dist-tail",
    "dist-cdf",
    "longtail-idle",
    "longtail-finish",
    "longtail-engines",
)


def _controls(tasks: list[str], q: dict):
    """Length field, task, phase and axis, as the URL has them."""
    return controls(
        control(
            "Length",
            dcc.RadioItems(
                id="dist-field",
                value=query_value(q, "field", "response", choices=FIELDS),
                inline=True,
                options=[
                    {"label": "response", "value": "response"},
                    {"label": "prompt", "value": "prompt"},
                    {"label": "total", "value": "total"},
                ],
            ),
        ),
        control(
            "Task",
            dcc.Dropdown(
                id="dist-task",
                options=[{"label": t, "value": t} for t in tasks],
                value=query_value(q, "task", None, choices=tasks),
                placeholder="all tasks",
                clearable=True,
                disabled=not tasks,
                style={"minWidth": "180px"},
            ),
        ),
        control(
            "Steps",
            dcc.RadioItems(
                id="dist-phase",
                value=query_value(q, "phase", "train", choices=tuple(PHASES)),
                inline=True,
                options=[{"label": v, "value": k} for k, v in PHASES.items()],
            ),
        ),
        control(
            "Axis",
            dcc.Checklist(
                id="dist-log",
                options=[{"label": "log lengths", "value": "log"}],
                value=query_value(q, "log", [], choices=("log",)),
                inline=True,
            ),
        ),
    )


def body(trace: dict, query: dict | None = None) -> html.Div:
    tasks = trace.get("tasks") or []
    q = query or {}
    if not trace.get("n_samples"):
        return upload_hint(
            trace["id"], "This trace has no samples (it may be a GPU-timeline or metric-log trace).", "samples"
        )
    return html.Div(
        [
            drill_location("distributions"),
            length_unit_note(trace),
            url_sink("distributions"),
            zoom_store("distributions", q),
            _controls(tasks, q),
            html.Div(id="dist-message"),
            section(
                "Per step",
                graph("dist-box"),
                help_text="Box = p25-p75 with the median; whiskers p10-p90; dashed line = mean; markers: p99 and max.",
            ),
            html.Div(
                className="grid-2",
                children=[
                    section("Where the samples fall", graph("dist-heatmap")),
                    section("Percentiles over steps", graph("dist-percentiles")),
                ],
            ),
            html.Div(
                className="grid-2",
                children=[
                    section("Tail and truncation", graph("dist-tail")),
                    section(
                        "CDF of chosen steps",
                        control(
                            "Steps",
                            dcc.Dropdown(
                                id="dist-cdf-steps",
                                multi=True,
                                placeholder="choose steps",
                                value=query_value(q, "cdf", [], kind=int) or None,
                            ),
                        ),
                        graph("dist-cdf"),
                    ),
                ],
            ),
            section(
                "Rollout long tail",
                analysis_panel("longtail", "long-tail analysis", trace["id"]),
                html.Div(className="grid-2", children=[graph("longtail-idle"), graph("longtail-finish")]),
                graph("longtail-engines"),
                help_text="With one decoding slot per sample, an engine is busy until its longest sample ends: "
                "idle share = 1 - sum(len) / (n x max len).",
            ),
            reward_length_section(trace),
        ]
    )


FIELDS = ("response", "prompt", "total")
register_drill("distributions", "dist-field")
register_url_state(
    "distributions",
    {
        "field": ("dist-field", "value", "response"),
        "task": ("dist-task", "value", None),
        "phase": ("dist-phase", "value", "train"),
        "log": ("dist-log", "value", []),
        "cdf": ("dist-cdf-steps", "value", []),
    },
    zoom=ZOOMABLE,
)


def layout(trace_id: str | None = None, **query):
    return trace_page(trace_id, __name__, "/distributions", lambda trace: body(trace, query))


def _summaries(trace_id, field, task, phase) -> tuple[dict, dict]:
    """(all steps, the steps of the chosen phase) of the summaries payload."""
    summary = session.api().summaries(trace_id, field=field or "response", task=task or None)
    return summary, filter_phase(summary, None, phase or "all")


@dash.callback(
    Output("dist-box", "figure"),
    Output("dist-heatmap", "figure"),
    Output("dist-percentiles", "figure"),
    Output("dist-tail", "figure"),
    Output("dist-cdf", "figure"),
    Output("dist-cdf-steps", "options"),
    Output("dist-cdf-steps", "placeholder"),
    Output("dist-message", "children"),
    Input(PAGE_TRACE_ID, "data"),
    Input("dist-field", "value"),
    Input("dist-task", "value"),
    Input("dist-phase", "value"),
    Input("dist-log", "value"),
    State("dist-cdf-steps", "value"),
    State(zoom_id("distributions"), "data"),
)
def fill(trace_id, field, task, phase, log, chosen, zoom):
    try:
        figures = cached(
            ("distributions", trace_id, field, task, phase, tuple(log or []), tuple(chosen or [])),
            lambda: _figures(trace_id, field, task, phase, log, chosen),
        )
        zoom = zoom or {}
        return tuple(apply_zoom(f, zoom.get(g)) for f, g in zip(figures, ZOOMABLE[:5])) + tuple(figures[5:])
    except ApiError as exc:
        fig = empty_figure(exc.message)
        return fig, fig, fig, fig, fig, [], "choose steps", alert(exc.message)


def _figures(trace_id, field, task, phase, log, chosen):
    summary, shown = _summaries(trace_id, field, task, phase)
    message = None
    if not shown["steps"] and summary.get("steps"):
        message = alert(f"No {PHASES.get(phase, phase)} in this trace; choose 'all steps'.", "info")
    log_y = "log" in (log or [])
    steps = [r["step"] for r in shown["steps"] if r.get("count")]
    options = [{"label": f"step {s}", "value": s} for s in steps]
    default = default_cdf_steps(shown)
    keep = [s for s in (chosen or []) if s in steps] or default
    # The CDF is drawn here too, so the page needs one round trip. The steps chosen by
    # default are named in the dropdown's placeholder, not set as its value: setting the
    # value would trigger fill_cdf, a second round trip after the page drew.
    placeholder = "steps " + ", ".join(map(str, default)) + " (choose others)" if default else "choose steps"
    return (
        length_box_figure(shown, log_y=log_y),
        length_heatmap_figure(shown),
        percentile_lines_figure(shown, log_y=log_y),
        tail_figure(shown),
        cdf_figure(shown, keep),
        options,
        placeholder,
        message,
    )


@dash.callback(
    Output("dist-cdf", "figure", allow_duplicate=True),
    Input("dist-cdf-steps", "value"),
    State(PAGE_TRACE_ID, "data"),
    State("dist-field", "value"),
    State("dist-task", "value"),
    State("dist-phase", "value"),
    prevent_initial_call=True,
)
def fill_cdf(chosen, trace_id, field, task, phase):
    """The user chose steps (none: the default ones again)."""
    try:
        _summary, shown = _summaries(trace_id, field, task, phase)
    except ApiError as exc:
        return empty_figure(exc.message)
    steps = {r["step"] for r in shown["steps"] if r.get("count")}
    return cdf_figure(shown, [s for s in chosen or [] if s in steps] or default_cdf_steps(shown))


@dash.callback(
    Output("longtail-idle", "figure"),
    Output("longtail-finish", "figure"),
    Output("longtail-engines", "figure"),
    Input({"type": RESULT, "kind": "longtail"}, "data"),
    State(zoom_id("distributions"), "data"),
)
def fill_longtail(data, zoom):
    result, note = analysis_result(data, "long-tail", page_query("longtail"))  # what the figures draw, < 2 MB
    if result is None:
        fig = empty_figure(note)
        return fig, fig, fig
    figures = cached(
        ("longtail", data["job_id"]),
        lambda: (longtail_idle_figure(result), longtail_finish_figure(result), longtail_engine_figure(result)),
    )
    return tuple(apply_zoom(f, (zoom or {}).get(g)) for f, g in zip(figures, ZOOMABLE[5:]))
