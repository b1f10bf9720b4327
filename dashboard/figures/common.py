"""Helpers shared by the figure builders: the empty-state figure and a styled figure."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable

import numpy as np
import plotly.graph_objects as go

from dashboard.theme import base_layout


def styled_figure(title: str, *, x_title: str, y_title: str, **layout) -> go.Figure:
    """A figure with the shared layout and both axes titled (titles carry units)."""
    fig = go.Figure()
    fig.update_layout(**base_layout(title=dict(text=title), **layout))
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return fig


# Every button of plotly's 2D modebar: an empty figure removes them all, so no toolbar
# (zoom, pan, download) floats over a chart that has nothing to zoom into.
MODEBAR_BUTTONS = (
    "zoom2d",
    "pan2d",
    "select2d",
    "lasso2d",
    "zoomIn2d",
    "zoomOut2d",
    "autoScale2d",
    "resetScale2d",
    "toImage",
    "hoverClosestCartesian",
    "hoverCompareCartesian",
    "toggleSpikelines",
    "toggleHover",
    "resetViews",
    "sendDataToCloud",
    "sendChartToCloud",
    "downloadJson",
)


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A blank figure that says why it is blank (no data, analysis not run, ...) and, where
    the trace lacks the data, what to upload to fill it; no axes and no toolbar.
    `layout.meta.empty` holds the message (tests and the browser check read it)."""
    fig = go.Figure()
    fig.update_layout(
        **base_layout(title=dict(text=title), height=220),
        xaxis=dict(visible=False),
        yaxis=dict(visible=False),
        meta={"empty": message},
        modebar=dict(remove=list(MODEBAR_BUTTONS)),
        dragmode=False,
        annotations=[
            dict(
                # plotly does not wrap annotations: break long explanations into lines, each
                # keeping its space (the page's text reads "verl metric", not "verlmetric")
                text=" <br>".join(textwrap.wrap(message, 64)) or message,
                xref="paper",
                yref="paper",
                x=0.5,
                y=0.5,
                showarrow=False,
                font=dict(size=14, color="#666"),
            )
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


def numbers(values: Iterable) -> list[float]:
    """The payload numbers among `values` (missing and NaN left out)."""
    return [f for f in map(num, values) if f is not None]


def pct(value) -> float | None:
    """A payload fraction in percent, None when it is not a number (a gap)."""
    f = num(value)
    return None if f is None else 100.0 * f


def column(rows: list[dict], key: str) -> list:
    """One key of a list of payload rows, missing values as None."""
    return [num(r.get(key)) for r in rows]


def rows_height(n_rows: int, *, per_row: int = 22, minimum: int = 260, maximum: int = 1400) -> int:
    """Figure height for a chart with one row per rank/stream, clamped so 256 ranks fit."""
    return int(min(max(minimum, 120 + per_row * n_rows), maximum))


def token_label(n: float) -> str:
    """1024 -> '1k', 16384 -> '16k', 1048576 -> '1M', 512 -> '512'."""
    n = int(round(n))
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}k"
    return str(n)


def log_token_axis(fig: go.Figure, axis: str, lo: float, hi: float) -> None:
    """A log axis for token counts with ticks at powers of two (1k = 1024 tokens):
    the lengths RL configs use (max_response_length 8192, 16384, ...)."""
    lo, hi = max(float(lo), 1.0), max(float(hi), 2.0)
    first, last = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = max(1, math.ceil((last - first + 1) / 10))  # at most ~10 labels
    vals = [2.0**e for e in range(first, last + 1, step)]
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="log", tickmode="array", tickvals=vals, ticktext=[token_label(v) for v in vals])


def integer_ticks(fig: go.Figure, axis: str = "x", max_span: int = 12, *, from_zero: bool = False) -> go.Figure:
    """Whole-number ticks on an axis of steps, ranks, turns or counts: one tick per value
    when the axis spans few values (6 steps are not labelled 0, 0.5, 1, ...), else
    plotly's own spacing (a whole number of units there) with integer labels.
    `from_zero`: the axis starts at 0 (bar lengths, counts), so the span counts from 0."""
    values = []
    for tr in fig.data:
        vals = getattr(tr, axis, None)
        if vals is None:
            continue
        arr = np.asarray(vals, dtype=object).ravel()
        values += [float(v) for v in arr if isinstance(v, (int, float, np.integer, np.floating)) and v == v]
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    if not values:
        return fig
    lo = min(0.0, min(values)) if from_zero else min(values)
    if max(values) - lo <= max_span:
        update(dtick=1, tick0=0, tickformat="d")
    else:
        update(tickformat=",d")
    return fig


def nice_step(span: float, ticks: int = 5) -> float:
    """A 1-2-5 step that puts about `ticks` ticks over `span`."""
    if not span or span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def percent_axis(max_pct: float | None) -> dict:
    """Axis settings for percents (0..100) with round ticks and a % sign (0%, 5%, 10%
    instead of 0.02, 0.11, 0.2): from 0 to a little above the largest value."""
    top = min(max(float(max_pct or 0.0), 0.1), 100.0)
    step = nice_step(top, 5)
    digits = max(0, -math.floor(math.log10(step)))
    return dict(
        tickformat=f".{digits}f",
        ticksuffix="%",
        dtick=step,
        tick0=0,
        tickmode="linear",
        range=[0, min(100.0, math.ceil(top / step) * step) * 1.04],
    )


# Above this many steps a per-step series is drawn as one line or filled area instead of
# one SVG bar / box / marker per step: 500 steps x 6 stacked series is 3,000 SVG paths,
# which take the browser most of a second to lay out; an area is one path per series.
MANY_STEPS = 120


def many_steps(n: int) -> bool:
    return n > MANY_STEPS


def step_series(
    x, y, *, name: str, color: str, stacked: bool = False, opacity: float | None = None, **kw
) -> go.Bar | go.Scatter:
    """A per-step bar series (stacked when the figure's barmode is "stack"), or with many
    steps the same numbers as a line (stacked: a filled area in stack group `stackgroup`)."""
    group = kw.pop("stackgroup", "one")
    if not many_steps(len(x)):
        return go.Bar(name=name, x=x, y=y, marker_color=color, opacity=opacity, **kw)
    if stacked:
        return go.Scatter(
            name=name,
            x=x,
            y=y,
            mode="lines",
            stackgroup=group,
            line=dict(color=color, width=0.5),
            fillcolor=color,
            **kw,
        )
    return go.Scatter(
        name=name,
        x=x,
        y=y,
        mode="lines",
        line=dict(color=color, width=1.5),
        opacity=opacity,
        fill="tozeroy" if opacity is not None else None,
        **kw,
    )


def _stride(xs: list[float]) -> float | None:
    diffs = [b - a for a, b in zip(xs, xs[1:]) if b > a]
    return min(diffs) if diffs else None


def step_gaps(fig: go.Figure) -> go.Figure:  # noqa: C901 -- axis breaks for missing steps: each branch one shape of gap
    """Break per-step lines at missing steps: where consecutive x (steps, ascending) are
    further apart than the trace's smallest step stride, insert a point with y = None,
    so plotly leaves a gap instead of drawing a line across steps that have no data
    (e.g. steps 0, 1, 5). Lines only; bars, areas (stackgroup / fill) stay as they are."""
    for tr in fig.data:
        if not isinstance(tr, go.Scatter) or "lines" not in (tr.mode or "lines"):
            continue
        if tr.stackgroup or (tr.fill and tr.fill != "none") or tr.x is None or tr.y is None:
            continue
        xs = list(tr.x)
        if len(xs) < 3 or not all(isinstance(v, (int, float, np.integer, np.floating)) for v in xs):
            continue
        stride = _stride([float(v) for v in xs])
        if stride is None or any(float(b) < float(a) for a, b in zip(xs, xs[1:])):
            continue
        cols = {"y": list(tr.y)}
        if tr.customdata is not None and len(tr.customdata) == len(xs):
            cols["customdata"] = list(tr.customdata)
        if tr.text is not None and not isinstance(tr.text, str) and len(tr.text) == len(xs):
            cols["text"] = list(tr.text)
        new_x, new_cols = [xs[0]], {k: [v[0]] for k, v in cols.items()}
        for i in range(1, len(xs)):
            if float(xs[i]) - float(xs[i - 1]) > stride + 1e-9:
                new_x.append(xs[i - 1] + stride)
                for k in new_cols:
                    new_cols[k].append(None)
            new_x.append(xs[i])
            for k, v in cols.items():
                new_cols[k].append(v[i])
        if len(new_x) != len(xs):
            tr.update(x=new_x, connectgaps=False, **new_cols)
    return fig


def binned_note(block: dict, rows_key: str, what: str) -> str:
    """What a cell of a binned page-view heatmap holds ('' when one step of one row)."""
    steps, rows = int(block.get("steps_per_cell") or 1), int(block.get(rows_key) or 1)
    if steps <= 1 and rows <= 1:
        return ""
    parts = [f"{steps} steps"] + ([f"{rows} {what}"] if rows > 1 else [])
    return f"each cell: the mean over {' x '.join(parts)}"
