"""Figures of the sample drill-down: one trajectory's turns, and one step's request
timeline (every trajectory's measured engine and tool time, the long tail last)."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, rows_height, styled_figure
from dashboard.theme import SIM_IDLE_COLORS, STAGE_COLORS

ENGINE_COLOR = STAGE_COLORS["gen"]
TOOL_COLOR = SIM_IDLE_COLORS.get("tool_wait", "#D7B5A6")
TRUNCATED_COLOR = "#E15759"
DISCARDED_COLOR = "#555555"


def turn_timeline_figure(turns: dict) -> go.Figure:
    """Per turn: engine latency and the turn's tool time (s), stacked bars."""
    items = turns.get("items") or []
    if not items:
        return empty_figure("This sample has no recorded turns.")
    x = [t["turn"] for t in items]
    fig = styled_figure(
        f"Turns of sample (step {turns['step']}, group {turns['group_idx']}, sample {turns['sample_idx']})",
        x_title="turn",
        y_title="seconds",
        barmode="stack",
    )
    fig.add_bar(x=x, y=[t["engine_latency_s"] or 0 for t in items], name="engine latency", marker_color=ENGINE_COLOR)
    fig.add_bar(x=x, y=[t["tool_latency_s"] or 0 for t in items], name="tool latency", marker_color=TOOL_COLOR)
    fig.update_xaxes(dtick=1)
    return fig


def turn_tokens_figure(turns: dict) -> go.Figure:
    """Per turn: cached vs new prompt tokens, and completion tokens."""
    items = turns.get("items") or []
    if not items or all(t["prompt_tokens"] is None for t in items):
        return empty_figure("No prompt token counts recorded for these turns.")
    x = [t["turn"] for t in items]
    fig = styled_figure("Prompt tokens per turn: cached vs new", x_title="turn", y_title="tokens", barmode="stack")
    fig.add_bar(x=x, y=[t["cached_tokens"] or 0 for t in items], name="cached prompt tokens", marker_color="#9C9C9C")
    fig.add_bar(
        x=x, y=[t["new_prompt_tokens"] or 0 for t in items], name="new prompt tokens", marker_color=ENGINE_COLOR
    )
    fig.add_scatter(
        x=x,
        y=[t["completion_tokens"] for t in items],
        name="completion tokens",
        mode="lines+markers",
        marker_color="#F28E2B",
    )
    fig.update_xaxes(dtick=1)
    return fig


def request_timeline_figure(data: dict, *, max_rows: int = 400) -> go.Figure:
    """One horizontal row per trajectory, sorted by when it finished (the last rows are
    the long tail); engine segments blue, tool segments sand; truncated trajectories'
    labels and outlines red, discarded ones grey and hatched."""
    items = data.get("items") or []
    if not items:
        return empty_figure("No trajectories at this step.")
    shown = items[-max_rows:] if len(items) > max_rows else items
    labels = [f"g{t['group_idx']}/s{t['sample_idx']}" for t in shown]
    fig = styled_figure(
        f"Request timeline, step {data['step']}: {len(items):,} trajectories"
        + (f" (the {max_rows} that finished last)" if len(items) > max_rows else "")
        + ", last to finish at the top",
        x_title="seconds from the trajectory's start (measured engine + tool time)",
        y_title="trajectory",
        barmode="overlay",
        height=rows_height(len(shown), per_row=10, minimum=320, maximum=1600),
    )
    for kind, color, name in (("engine", ENGINE_COLOR, "engine time"), ("tool", TOOL_COLOR, "tool time")):
        ys, xs, bases, lines, patterns = [], [], [], [], []
        for label, t in zip(labels, shown):
            for seg_kind, start, seconds in t["segments"]:
                if seg_kind != kind:
                    continue
                ys.append(label)
                xs.append(seconds)
                bases.append(start)
                lines.append(TRUNCATED_COLOR if t["truncated"] else (DISCARDED_COLOR if t["discarded"] else color))
                patterns.append("/" if t["discarded"] else "")
        fig.add_bar(
            y=ys,
            x=xs,
            base=bases,
            orientation="h",
            name=name,
            marker=dict(color=color, line=dict(color=lines, width=1.5), pattern=dict(shape=patterns)),
            hovertemplate="%{y}<br>%{base:.2f}–%{x:.2f} s<extra>" + name + "</extra>",
        )
    for flag, color, name in (("truncated", TRUNCATED_COLOR, "truncated"), ("discarded", DISCARDED_COLOR, "discarded")):
        marked = [(label, t["end_s"]) for label, t in zip(labels, shown) if t[flag]]
        if marked:
            fig.add_scatter(
                y=[m[0] for m in marked],
                x=[m[1] for m in marked],
                mode="markers",
                marker=dict(symbol="x" if flag == "truncated" else "square-open", color=color, size=7),
                name=name,
            )
    fig.update_yaxes(categoryorder="array", categoryarray=labels, showticklabels=len(shown) <= 60)
    return fig
