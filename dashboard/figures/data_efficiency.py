"""DAPO data-efficiency figures from the "data_efficiency" result
(core/analysis/data_efficiency.py): per trainer step the prompt groups generated (over
all its generation batches), kept by the filter and used for training, and the share of
generated response tokens that were used.
"""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, integer_ticks, num, pct, step_gaps, step_series, styled_figure
from dashboard.theme import POLICY_COLORS, STAGE_COLORS

SERIES = (
    ("groups_generated", "generated", STAGE_COLORS["other"]),
    ("groups_kept", "kept by the filter", STAGE_COLORS["gen"]),
    ("groups_used", "used for training", POLICY_COLORS["kk"]),
)


def data_efficiency_figure(result: dict) -> go.Figure:
    """Grouped bars per trainer step: prompt groups generated / kept / used, and the used
    share of generated response tokens (line, right axis, %)."""
    steps = [s for s in result.get("steps") or [] if s.get("trainer_step") is not None]
    title = "Prompt groups per trainer step: generated, kept, used (DAPO dynamic sampling)"
    if not steps:
        return empty_figure("No DAPO filter marks in this trace", title)
    x = [s["trainer_step"] for s in steps]
    fig = styled_figure(
        title + " <br><sup>a trainer step's groups come from all its generation batches</sup>",
        x_title="trainer step",
        y_title="prompt groups",
        barmode="group",
        hovermode="x unified",
    )
    gens = [", ".join(str(g) for g in s.get("generation_steps") or []) for s in steps]
    for key, label, color in SERIES:
        fig.add_trace(
            step_series(
                x,
                [num(s.get(key)) for s in steps],
                name=label,
                color=color,
                customdata=gens,
                hovertemplate=f"{label} %{{y:,}} (generation steps %{{customdata}})<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            name="used share of response tokens (%)",
            x=x,
            y=[pct(s.get("used_token_share")) for s in steps],
            mode="lines+markers",
            yaxis="y2",
            line=dict(color="#222222", dash="dot"),
            hovertemplate="%{y:.1f}% of generated tokens used<extra></extra>",
        )
    )
    fig.update_layout(
        yaxis2=dict(title=dict(text="used tokens (%)"), overlaying="y", side="right", range=[0, 100], showgrid=False)
    )
    return integer_ticks(step_gaps(fig))
