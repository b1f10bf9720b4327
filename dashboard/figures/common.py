"""Helpers shared by the figure builders: the empty-state figure and a styled figure."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from dashboard.theme import base_layout


def styled_figure(title: str, *, x_title: str, y_title: str, **layout) -> go.Figure:
    """A figure with the shared layout and both axes titled (titles carry units)."""
    fig = go.Figure()
    fig.update_layout(**base_layout(title=dict(text=title), **layout))
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return fig


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A blank figure that says why it is blank (no data, analysis not run, ...)."""
    fig = go.Figure()
    fig.update_layout(
        **base_layout(title=dict(text=title)),
        xaxis=dict(visible=False),
        yaxis=dict(visible=False),
        annotations=[
            dict(text=message, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                 font=dict(size=14, color="#666"))
        ],
    )
    return fig


def num(value) -> float | None:
    """A payload number as float, None for missing/NaN (plotly draws None as a gap)."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def column(rows: list[dict], key: str) -> list:
    """One key of a list of payload rows, missing values as None."""
    return [num(r.get(key)) for r in rows]


def rows_height(n_rows: int, *, per_row: int = 22, minimum: int = 260, maximum: int = 1400) -> int:
    """Figure height for a chart with one row per rank/stream, clamped so 256 ranks fit."""
    return int(min(max(minimum, 120 + per_row * n_rows), maximum))
