"""Length-distribution figures, built from the `/summaries` payload only.

The payload holds per-step statistics and a histogram on shared log-spaced bins
(`bin_edges`, one more edge than histogram counts), so every figure here costs
O(steps x bins) no matter how many samples the trace has:

    {"field": "response", "task": None, "bin_edges": [1, 2, ...],
     "steps": [{"step", "count", "mean", "p10", "p25", "p50", "p75", "p90", "p99", "max",
                "tail_ratio", "truncation_rate", "hist": [...] , ...}], "tasks": [...]}
"""

from __future__ import annotations

import textwrap
from html import escape

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.common import (
    column,
    empty_figure,
    integer_ticks,
    log_token_axis,
    many_steps,
    pct,
    percent_axis,
    step_gaps,
    step_series,
    styled_figure,
)
from dashboard.theme import HEATMAP_COLORSCALE, PERCENTILE_COLORS, UNITS, step_color

# The truncation series' name (the drill-down opens a step's truncated samples from it).
TRUNCATED_NAME = "truncated (%)"
AT_CAP_NAME = "at the length cap (%)"
FIELD_LABELS = {"response": "response length", "prompt": "prompt length", "total": "prompt + response length"}


def _rows(payload: dict) -> list[dict]:
    """Steps with at least one sample, in step order."""
    rows = [r for r in payload.get("steps", []) if (r.get("count") or 0) > 0]
    return sorted(rows, key=lambda r: r["step"])


def _field_label(payload: dict) -> str:
    label = FIELD_LABELS.get(payload.get("field") or "response", str(payload.get("field")))
    task = payload.get("task")
    return f"{label} ({task})" if task else label


def length_box_figure(payload: dict, *, log_y: bool = False) -> go.Figure:
    """One box per step drawn from precomputed percentiles (box p25-p75, line p50,
    whiskers p10-p90, dashed mean), with p99 and max as markers so the tail shows;
    with many steps the same percentiles as bands and lines (`_percentile_bands`)."""
    rows = _rows(payload)
    title = f"{_field_label(payload)} per step"
    if not rows:
        return empty_figure("No samples in the selected steps", title)
    steps = [r["step"] for r in rows]
    fig = styled_figure(title, x_title=UNITS["step"], y_title=UNITS["tokens"])
    if many_steps(len(steps)):
        _percentile_bands(fig, steps, rows)
    else:
        fig.add_trace(
            go.Box(
                name="p25-p75, whiskers p10-p90",
                x=steps,
                q1=column(rows, "p25"),
                median=column(rows, "p50"),
                q3=column(rows, "p75"),
                lowerfence=column(rows, "p10"),
                upperfence=column(rows, "p90"),
                mean=column(rows, "mean"),
                boxmean=True,
                marker_color=PERCENTILE_COLORS["p90"],
                hoverinfo="x+y",
            )
        )
    for key, symbol in (("p99", "line-ew-open"), ("max", "triangle-up")):
        many = many_steps(len(steps))
        fig.add_trace(
            go.Scatter(
                name=key,
                x=steps,
                y=column(rows, key),
                mode="lines" if many else "markers",
                line=dict(color=PERCENTILE_COLORS[key], width=1, dash="dot" if key == "max" else None),
                marker=dict(
                    symbol=symbol,
                    size=7,
                    color=PERCENTILE_COLORS[key],
                    line=dict(width=2, color=PERCENTILE_COLORS[key]),
                ),
                hovertemplate=f"step %{{x}}<br>{key} %{{y:,.0f}} tokens<extra></extra>",
            )
        )
    if log_y:
        _log_y(fig, rows, ("p10", "max"))
    return integer_ticks(fig)


def _percentile_bands(fig: go.Figure, steps: list[int], rows: list[dict]) -> None:
    """The boxes of many steps as bands: p10-p90 (light) and p25-p75 (darker) filled
    between their edges, the median and the mean as lines."""
    color = PERCENTILE_COLORS["p90"]
    for lo, hi, name, alpha in (("p10", "p90", "p10-p90", 0.18), ("p25", "p75", "p25-p75", 0.4)):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=column(rows, lo),
                mode="lines",
                line=dict(width=0, color=color),
                showlegend=False,
                name=lo,
                hovertemplate=f"{lo} %{{y:,.0f}}<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=column(rows, hi),
                mode="lines",
                line=dict(width=0, color=color),
                fill="tonexty",
                fillcolor=_rgba(color, alpha),
                name=name,
                hovertemplate=f"{hi} %{{y:,.0f}}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=column(rows, "p50"),
            mode="lines",
            name="median",
            line=dict(color=PERCENTILE_COLORS["p99"], width=1.5),
            hovertemplate="p50 %{y:,.0f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=column(rows, "mean"),
            mode="lines",
            name="mean",
            line=dict(color=PERCENTILE_COLORS["mean"], width=1, dash="dash"),
            hovertemplate="mean %{y:,.0f}<extra></extra>",
        )
    )
    fig.update_layout(hovermode="x unified")


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)}, {int(h[2:4], 16)}, {int(h[4:6], 16)}, {alpha})"


def _log_y(fig: go.Figure, rows: list[dict], keys: tuple[str, ...]) -> None:
    values = [v for k in keys for v in column(rows, k) if v]
    if values:
        log_token_axis(fig, "y", min(values), max(values))


def _hist_matrix(rows: list[dict], n_bins: int) -> np.ndarray:
    """steps x bins counts (a missing or short hist counts as zeros)."""
    mat = np.zeros((len(rows), n_bins), dtype=np.float64)
    for i, r in enumerate(rows):
        h = r.get("hist") or []
        k = min(len(h), n_bins)
        mat[i, :k] = h[:k]
    return mat


def _occupied_bins(mat: np.ndarray) -> tuple[int, int]:
    """First and last bin that any step uses (so the y range is the data's, not 1..4M)."""
    used = np.flatnonzero(mat.sum(axis=0) > 0)
    return (int(used[0]), int(used[-1])) if used.size else (0, 0)


def length_heatmap_figure(payload: dict) -> go.Figure:
    """Step x length heatmap on the shared log bins; colour = share of the step's
    samples in the bin (%), so steps with different sample counts compare."""
    rows = _rows(payload)
    edges = payload.get("bin_edges") or []
    title = f"{_field_label(payload)}: share of samples per length bin"
    if not rows or len(edges) < 2:
        return empty_figure("No samples in the selected steps", title)
    mat = _hist_matrix(rows, len(edges) - 1)
    lo, hi = _occupied_bins(mat)
    totals = mat.sum(axis=1, keepdims=True)
    share = np.divide(100.0 * mat, totals, out=np.zeros_like(mat), where=totals > 0)
    z = share[:, lo : hi + 1].T  # bins x steps
    counts = mat[:, lo : hi + 1].T
    y_edges = [float(e) for e in edges[lo : hi + 2]]
    fig = styled_figure(title, x_title=UNITS["step"], y_title=UNITS["tokens"])
    fig.add_trace(
        go.Heatmap(
            # numpy arrays travel as compact typed arrays (500 steps x 40 bins stays small)
            x=np.array([r["step"] for r in rows], dtype=np.int32),
            y=np.array(y_edges, dtype=np.float64),
            z=z.astype(np.float32),
            customdata=counts.astype(np.uint32),
            colorscale=HEATMAP_COLORSCALE,
            colorbar=dict(title=dict(text="% of step"), thickness=12),
            hovertemplate="step %{x}<br>~%{y:,.0f} tokens<br>%{z:.1f}% (%{customdata:,} samples)<extra></extra>",
            zmin=0,
        )
    )
    log_token_axis(fig, "y", y_edges[0], y_edges[-1])
    return integer_ticks(fig)


def percentile_lines_figure(payload: dict, *, keys=("p50", "p90", "p99", "max"), log_y: bool = False) -> go.Figure:
    """p50/p90/p99/max (and mean when asked) over steps: drift and tail growth."""
    rows = _rows(payload)
    title = f"{_field_label(payload)} percentiles over steps"
    if not rows:
        return empty_figure("No samples in the selected steps", title)
    steps = [r["step"] for r in rows]
    fig = styled_figure(title, x_title=UNITS["step"], y_title=UNITS["tokens"], hovermode="x unified")
    for key in keys:
        fig.add_trace(
            go.Scatter(
                name=key,
                x=steps,
                y=column(rows, key),
                mode="lines+markers" if len(rows) <= 60 else "lines",
                line=dict(color=PERCENTILE_COLORS.get(key), width=2, dash="dot" if key == "mean" else None),
                hovertemplate=f"{key} %{{y:,.0f}} tokens<extra></extra>",
            )
        )
    if log_y:
        _log_y(fig, rows, keys)
    return integer_ticks(step_gaps(fig))


def tail_figure(payload: dict) -> go.Figure:
    """Per-step tail ratio (max/mean) and the share of truncated samples (%, bars on a
    second axis), by the trace's one definition (`payload["truncation"]`, named under
    the title). A truncation bar drills to that step's truncated samples."""
    rows = _rows(payload)
    title = f"{_field_label(payload)}: tail ratio and truncation"
    if not rows:
        return empty_figure("No samples in the selected steps", title)
    steps = [r["step"] for r in rows]
    # closest hover: a click on a bar is that bar's (the drill-down tells the two apart)
    fig = styled_figure(title, x_title=UNITS["step"], y_title="max / mean (ratio)", hovermode="closest")
    fig.add_trace(
        go.Scatter(
            name="max / mean",
            x=steps,
            y=column(rows, "tail_ratio"),
            mode="lines" if many_steps(len(steps)) else "lines+markers",
            line=dict(color=PERCENTILE_COLORS["max"]),
            hovertemplate="step %{x}: max/mean %{y:.2f}x<extra></extra>",
        )
    )
    trunc = [pct(r.get("truncation_rate")) for r in rows]
    definition = (payload.get("truncation") or {}).get("definition") or ""
    if any(t is not None for t in trunc):
        counts = [None if t is None else round(t * r["count"] / 100.0) for t, r in zip(trunc, rows)]
        fig.add_trace(
            step_series(
                steps,
                trunc,
                name=TRUNCATED_NAME,
                color=PERCENTILE_COLORS["p90"],
                opacity=0.45,
                yaxis="y2",
                customdata=[[c, r["count"]] for c, r in zip(counts, rows)],
                hovertemplate="step %{x}: %{y:.2f}% truncated (%{customdata[0]:,} of %{customdata[1]:,})"
                "<extra>click: these samples</extra>",
            )
        )
        fig.update_layout(
            yaxis2=dict(
                title=dict(text="truncated (% of samples)"),
                overlaying="y",
                side="right",
                showgrid=False,
                **percent_axis(max(t for t in trunc if t is not None)),
            )
        )
    _add_at_cap(fig, payload, rows, trunc)
    if definition:
        lines = wrapped(definition)
        fig.update_layout(
            title=dict(text=f"{title}<br><sup>{'<br>'.join(escape(x, quote=False) for x in lines)}</sup>"),
            margin=dict(t=76 + SUBTITLE_LINE_PX * (len(lines) - 1)),
        )
    return integer_ticks(step_gaps(fig))


def _add_at_cap(fig: go.Figure, payload: dict, rows: list[dict], trunc: list) -> None:
    """Where stop reasons are recorded, the share at the length cap beside the truncated
    share (a sample may end at the cap for another reason), on the same % axis, its
    definition in the hover."""
    t = payload.get("truncation") or {}
    at_cap = [pct(r.get("at_cap_rate")) for r in rows]
    if not t.get("stop_reason") or all(v is None for v in at_cap):
        return
    counts = [None if v is None else round(v * r["count"] / 100.0) for v, r in zip(at_cap, rows)]
    # "the response reached the N-token cap (...),<br>whatever its stop reason"
    said = escape((t.get("at_cap_definition") or "").split(" = ", 1)[-1], quote=False).replace(
        ", whatever", ",<br>whatever"
    )
    fig.add_trace(
        step_series(
            [r["step"] for r in rows],
            at_cap,
            name=AT_CAP_NAME,
            color=PERCENTILE_COLORS["p99"],
            opacity=0.45,
            yaxis="y2",
            customdata=[[c, r["count"]] for c, r in zip(counts, rows)],
            hovertemplate="step %{x}: %{y:.2f}% at the length cap (%{customdata[0]:,} of %{customdata[1]:,})"
            f"<br>{said}<extra></extra>",
        )
    )
    top = max(v for v in [*trunc, *at_cap] if v is not None)
    fig.update_layout(
        yaxis2=dict(title=dict(text="% of samples"), overlaying="y", side="right", showgrid=False, **percent_axis(top))
    )


# A subtitle line fits a half-width chart (the Distributions grid) at plotly's <sup> size.
SUBTITLE_CHARS = 72
SUBTITLE_LINE_PX = 13


def wrapped(text: str, width: int = SUBTITLE_CHARS) -> list[str]:
    """`text` in lines of at most `width` characters, broken between words (plotly
    neither wraps a title nor keeps it whole: it is cut at the chart's edge)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [text]


def cdf_points(hist: list[int], edges: list[float]) -> tuple[list[float], list[float]]:
    """Empirical CDF from a histogram: at each bin's upper edge, the share of samples
    shorter than it (linear between edges is the in-bin interpolation)."""
    counts = np.asarray(hist, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        return [], []
    cum = np.cumsum(counts) / total
    used = np.flatnonzero(counts)
    lo, hi = int(used[0]), int(used[-1])
    xs = [float(edges[lo])] + [float(e) for e in edges[lo + 1 : hi + 2]]
    ys = [0.0] + [float(c) for c in cum[lo : hi + 1]]
    return xs, ys


def cdf_figure(payload: dict, steps: list[int]) -> go.Figure:
    """CDFs of the chosen steps overlaid on a log length axis (early dark, late bright)."""
    by_step = {r["step"]: r for r in _rows(payload)}
    chosen = [s for s in steps if s in by_step]
    title = f"{_field_label(payload)}: CDF of chosen steps"
    if not chosen:
        return empty_figure("Choose one or more steps", title)
    edges = payload.get("bin_edges") or []
    fig = styled_figure(title, x_title=UNITS["tokens"], y_title=UNITS["cdf"])
    for i, s in enumerate(sorted(chosen)):
        xs, ys = cdf_points(by_step[s].get("hist") or [], edges)
        fig.add_trace(
            go.Scatter(
                name=f"step {s}",
                x=xs,
                y=ys,
                mode="lines",
                line=dict(color=step_color(i, len(chosen)), width=2),
                hovertemplate=f"step {s}<br>< %{{x:,.0f}} tokens: %{{y:.1%}}<extra></extra>",
            )
        )
    xs_all = [x for tr in fig.data for x in tr.x]
    log_token_axis(fig, "x", min(xs_all), max(xs_all))
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    return fig


def default_cdf_steps(payload: dict, n: int = 4) -> list[int]:
    """Evenly spread steps (first, ..., last) as the CDF page's initial choice."""
    steps = [r["step"] for r in _rows(payload)]
    if len(steps) <= n:
        return steps
    idx = np.unique(np.linspace(0, len(steps) - 1, n).round().astype(int))
    return [steps[i] for i in idx]
