"""Reward against response length from the "reward_length" result
(core/analysis/reward_length.py): mean reward per step and length bucket, the no-reward
share of each step's longest 10% against the rest, and the share of responses that end
in a repetition. Partial steps (too few rewarded samples) are drawn hollow."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import (
    empty_figure,
    integer_ticks,
    num,
    pct,
    percent_axis,
    step_gaps,
    styled_figure,
    token_label,
)
from dashboard.theme import PERCENTILE_COLORS, STAGE_COLORS

TAIL_COLOR = PERCENTILE_COLORS["max"]
REST_COLOR = PERCENTILE_COLORS["p50"]


def reward_bucket_figure(result: dict, unit: str = "tokens") -> go.Figure:
    """Heatmap: step x response-length bucket, colour = mean reward (hover: count and
    no-reward share)."""
    rows = result.get("buckets") or []
    title = "Mean reward by response length"
    if not rows:
        return empty_figure("No rewarded samples", title)
    steps = sorted({r["step"] for r in rows})
    buckets = sorted({r["bucket"] for r in rows})
    edges = {r["bucket"]: (r["lo"], r["hi"]) for r in rows}
    labels = [f"{token_label(edges[b][0])}–{token_label(edges[b][1])}" for b in buckets]
    cell = {(r["step"], r["bucket"]): r for r in rows}
    z = [[num((cell.get((s, b)) or {}).get("mean_reward")) for s in steps] for b in buckets]
    text = [
        [
            f"{cell[(s, b)]['n']:,} samples, {100 * cell[(s, b)]['no_reward_share']:.0f}% no reward"
            if (s, b) in cell
            else "no samples"
            for s in steps
        ]
        for b in buckets
    ]
    fig = styled_figure(title, x_title="step", y_title=f"response length ({unit})")
    fig.add_trace(
        go.Heatmap(
            x=steps,
            y=labels,
            z=z,
            text=text,
            colorscale="RdYlGn",
            colorbar=dict(title="mean reward"),
            hovertemplate="step %{x}<br>%{y} " + unit + "<br>mean reward %{z:.2f}<br>%{text}<extra></extra>",
        )
    )
    return integer_ticks(fig)


def tail_reward_figure(result: dict) -> go.Figure:
    """Per step: the share of samples with no reward among the longest 10% and among
    the rest. A tail far above the rest spends its longest generations on nothing."""
    steps = result.get("steps") or []
    definitions = result.get("definitions") or {}
    title = "Does the long tail pay for itself? No-reward share: longest 10% vs the rest"
    if not steps:
        return empty_figure("No rewarded samples", title)
    fig = styled_figure(title, x_title="step", y_title="samples with no reward (%)", hovermode="x unified")
    x = [r["step"] for r in steps]
    for key, label, color in (
        ("tail_no_reward_share", "longest 10%", TAIL_COLOR),
        ("rest_no_reward_share", "the rest", REST_COLOR),
    ):
        fig.add_trace(
            go.Scatter(
                name=label,
                x=x,
                y=[pct(r.get(key)) for r in steps],
                mode="lines+markers",
                line=dict(color=color),
                marker=dict(symbol=["circle-open" if r.get("partial") else "circle" for r in steps], size=8),
                hovertemplate=f"{label} %{{y:.1f}}%<extra></extra>",
            )
        )
    fig.update_layout(yaxis=percent_axis(100))
    note = definitions.get("tail", "")
    if note:
        fig.add_annotation(text=note, xref="paper", yref="paper", x=0, y=-0.28, showarrow=False, font=dict(size=10))
    return integer_ticks(step_gaps(fig))


def repetition_figure(result: dict) -> go.Figure:
    """Per step: the share of responses ending in a repetition (all, and the tail)."""
    steps = [r for r in result.get("steps") or [] if r.get("repetition_share") is not None]
    title = "Responses that end in a repetition"
    if not steps:
        return empty_figure("No sample texts (a rollout dump carries them)", title)
    fig = styled_figure(title, x_title="step", y_title="share of responses (%)", barmode="group")
    x = [r["step"] for r in steps]
    for key, label, color in (
        ("repetition_share", "all responses", STAGE_COLORS["gen"]),
        ("tail_repetition_share", "longest 10%", TAIL_COLOR),
    ):
        fig.add_trace(
            go.Bar(
                name=label,
                x=x,
                y=[pct(r.get(key)) for r in steps],
                marker_color=color,
                hovertemplate=f"step %{{x}}<br>{label}: %{{y:.1f}}%<extra></extra>",
            )
        )
    top = max(100 * max(num(r.get(k)) or 0 for k in ("repetition_share", "tail_repetition_share")) for r in steps)
    fig.update_layout(yaxis=percent_axis(top))
    return integer_ticks(step_gaps(fig))
