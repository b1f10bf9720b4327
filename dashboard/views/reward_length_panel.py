"""The reward-vs-length panel of the Distributions page (a trace whose samples carry a
reward: a verl rollout dump): the "reward_length" analysis' figures.

Ids: rl-buckets (mean reward per step and length bucket), rl-tail (no-reward share of
the longest 10% against the rest), rl-repetition (responses ending in a repetition).
"""

from __future__ import annotations

import dash
from dash import Input, Output, html

from dashboard.figures.common import empty_figure
from dashboard.figures.reward_length import repetition_figure, reward_bucket_figure, tail_reward_figure
from dashboard.server.figure_cache import cached
from dashboard.server.results import analysis_result
from dashboard.views.components import RESULT, alert, graph, section
from dashboard.views.panels import analysis_panel

KIND = "reward_length"


def length_unit(trace: dict) -> str:
    return ((trace.get("metadata") or {}).get("rollouts") or {}).get("length_unit") or "tokens"


def length_unit_note(trace: dict):
    """A notice on pages that show lengths, when they are characters (a rollout dump
    without the run's tokenizer), so they are never read as tokens."""
    if length_unit(trace) != "characters":
        return None
    return alert(
        "Lengths in this trace are characters, not tokens: its rollout dump was read without the run's "
        "tokenizer (upload it again with its tokenizer.json for token counts). Axes and columns that say "
        "tokens count characters here.",
        "info",
        id="length-unit-note",
    )


def reward_length_section(trace: dict) -> html.Section | None:
    """The panel, or None when the analysis does not apply (no rewards)."""
    if KIND not in (trace.get("analyses") or []):
        return None
    unit = length_unit(trace)
    note = " Lengths are characters: upload the run's tokenizer.json for tokens." if unit == "characters" else ""
    return section(
        "Reward vs length",
        analysis_panel(KIND, "reward-vs-length analysis", trace["id"]),
        html.Div(className="grid-2", children=[graph("rl-tail"), graph("rl-repetition")]),
        graph("rl-buckets"),
        html.Div(unit, id="rl-unit", hidden=True),
        help_text="No reward: reward <= 0. Longest 10%: every sample at least as long as the step's "
        "ceil(10% x n)-th longest. Repetition: the response's last 1,000 characters repeat a period of at most 333 "
        "characters. Hollow markers: steps with fewer than 10 rewarded samples (left out of the means)." + note,
    )


@dash.callback(
    Output("rl-tail", "figure"),
    Output("rl-repetition", "figure"),
    Output("rl-buckets", "figure"),
    Input({"type": RESULT, "kind": KIND}, "data"),
    Input("rl-unit", "children"),
)
def fill_reward_length(data, unit):
    result, note = analysis_result(data, "reward-vs-length")
    if result is None:
        fig = empty_figure(note)
        return fig, fig, fig
    return cached(
        (KIND, data["job_id"], unit),
        lambda: (tail_reward_figure(result), repetition_figure(result), reward_bucket_figure(result, unit or "tokens")),
    )
