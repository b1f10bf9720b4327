"""An engine replay's figures (`GET /traces/{id}/engine-replays`): what the simulator
predicted from the engine profile beside what the real engine measured."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import num, styled_figure
from dashboard.theme import REPLAY_COLORS, UNITS

# (key of measured / predicted, key of error, label): the times, then the work done
FIGURES = (
    ("makespan_s", "makespan", "rollout makespan (s)"),
    ("p50_completion_s", "p50_completion", "p50 completion (s)"),
    ("p90_completion_s", "p90_completion", "p90 completion (s)"),
    ("decoded_tokens", "decoded_tokens", "decoded tokens"),
)
TIMES = FIGURES[:3]


def figure_rows(replay: dict) -> list[dict]:
    """One row per figure: label, predicted, measured, relative error (None: none)."""
    measured, predicted, error = replay.get("measured") or {}, replay.get("predicted") or {}, replay.get("error") or {}
    return [
        {
            "key": key,
            "label": label,
            "predicted": num(predicted.get(key)),
            "measured": num(measured.get(key)),
            "error": num(error.get(err)),
        }
        for key, err, label in FIGURES
    ]


def engine_measured_figure(replay: dict) -> go.Figure:
    """The three times, predicted and measured side by side."""
    fig = styled_figure(
        f"Predicted vs measured on a real engine ({replay.get('policy')})",
        x_title="",
        y_title=UNITS["seconds"],
        barmode="group",
        height=320,
    )
    rows = [r for r in figure_rows(replay) if r["key"] in {k for k, _, _ in TIMES}]
    labels = [r["label"].removesuffix(" (s)") for r in rows]
    for side, color in (("predicted", REPLAY_COLORS["a"]), ("measured", REPLAY_COLORS["measured"])):
        fig.add_trace(
            go.Bar(
                name=side,
                x=labels,
                y=[r[side] for r in rows],
                marker=dict(color=color),
                hovertemplate=f"{side} %{{y:.3g}} s<extra>%{{x}}</extra>",
            )
        )
    return fig
