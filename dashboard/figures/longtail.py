"""Rollout long-tail figures from the "longtail" analysis result
(core/analysis/longtail.py): per step the engine-time account in token-time units
(`engine_time`, `idle_within_engines` = each engine's own tail, `idle_waiting` =
finished engines waiting for the slowest), `tail_time_share` (share of the rollout the
last `tail_fraction` of samples take), `tail_sample_share`, and per engine
(`engine` column dict) the idle fraction.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.common import (
    binned_note,
    empty_figure,
    integer_ticks,
    num,
    pct,
    rows_height,
    step_gaps,
    step_series,
    styled_figure,
)
from dashboard.theme import GPU_KIND_COLORS, PERCENTILE_COLORS, STAGE_COLORS, UNITS


def _steps(result: dict) -> list[dict]:
    return sorted(result.get("steps") or [], key=lambda s: s["step"])


def _pct(part, whole) -> float | None:
    part, whole = num(part), num(whole)
    return None if part is None or not whole else 100.0 * part / whole


BASIS_LABELS = {
    "time": "from measured completion times (engine + tool latency)",
    "tokens": "from response lengths (one token per time unit)",
}


def basis_note(result: dict) -> str:
    """Subtitle naming what the long-tail figures were computed from."""
    label = BASIS_LABELS.get(result.get("basis") or "tokens")
    return f" <br><sup>{label}</sup>" if label else ""


def longtail_idle_figure(result: dict) -> go.Figure:
    """Stacked per step: % of rollout engine-time idle inside an engine (its own tail)
    and waiting for the slowest engine; their sum is the step's idle share."""
    steps = _steps(result)
    title = "Rollout slot-time left idle by the long tail"
    if not steps:
        return empty_figure("No training samples", title)
    title += basis_note(result)
    x = [s["step"] for s in steps]
    fig = styled_figure(
        title,
        x_title=UNITS["step"],
        y_title="idle share of rollout slot-time (%)",
        barmode="stack",
        hovermode="x unified",
    )
    fig.add_trace(
        step_series(
            x,
            [_pct(s.get("idle_within_engines"), s.get("engine_time")) for s in steps],
            name="inside an engine (its own tail)",
            color=STAGE_COLORS["gen"],
            stacked=True,
            hovertemplate="%{y:.1f}%<extra>own tail</extra>",
        )
    )
    fig.add_trace(
        step_series(
            x,
            [_pct(s.get("idle_waiting"), s.get("engine_time")) for s in steps],
            name="engine waiting for the slowest",
            color=GPU_KIND_COLORS["idle"],
            stacked=True,
            hovertemplate="%{y:.1f}%<extra>waiting</extra>",
        )
    )
    fig.update_yaxes(range=[0, 100])
    return integer_ticks(fig)


def longtail_finish_figure(result: dict) -> go.Figure:
    """Per step: share of rollout time taken by the last `tail_fraction` of samples,
    and share of samples still decoding in the last `tail_fraction` of the time."""
    steps = _steps(result)
    f = num(result.get("tail_fraction")) or 0.1
    title = f"Rollout time of the last {100 * f:.0f}% of samples"
    if not steps:
        return empty_figure("No training samples", title)
    title += basis_note(result)
    tied = [s["step"] for s in steps if s.get("tail_tied")]
    if tied:
        shown = ", ".join(str(t) for t in tied[:6]) + (", ..." if len(tied) > 6 else "")
        title += (
            f" <br><sup>ties at the longest length (cap) in step(s) {shown}: over {100 * f:.0f}% of samples "
            "end together, so their share reads 0%</sup>"
        )
    x = [s["step"] for s in steps]
    fig = styled_figure(title, x_title=UNITS["step"], y_title="share (%)", hovermode="x unified")
    tail_secs = [num(s.get("tail_seconds")) for s in steps]
    fig.add_trace(
        go.Scatter(
            name=f"time taken by the last {100 * f:.0f}% of samples",
            x=x,
            y=[pct(s.get("tail_time_share")) for s in steps],
            customdata=[t if t is not None else float("nan") for t in tail_secs],
            mode="lines+markers",
            line=dict(color=PERCENTILE_COLORS["p99"], width=2),
            hovertemplate="%{y:.1f}% of rollout time"
            + (" (%{customdata:.1f} s)" if any(tail_secs) else "")
            + "<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            name=f"samples running in the last {100 * f:.0f}% of time",
            x=x,
            y=[pct(s.get("tail_sample_share")) for s in steps],
            mode="lines+markers",
            line=dict(color=PERCENTILE_COLORS["p50"], width=2, dash="dash"),
            hovertemplate="%{y:.1f}% of samples<extra></extra>",
        )
    )
    fig.update_yaxes(rangemode="tozero")
    return integer_ticks(step_gaps(fig))


def longtail_engine_figure(result: dict) -> go.Figure:
    """Step x engine heatmap of each engine's idle fraction 1 - sum(len)/(n x max len)
    (from a page view binned to fewer cells than steps x engines, a cell's mean over its
    block of steps and engines: core.analysis.page_views)."""
    key = result.get("engine_key") or "engine"
    title = f"Idle share per engine ({key})"
    x, engines, z, binned = engine_idle_matrix(result)
    if not len(x):
        return empty_figure("No per-engine figures", title)
    fig = styled_figure(
        title + (f" <br><sup>{binned}</sup>" if binned else ""),
        x_title=UNITS["step"],
        y_title=key.replace("_", " "),
        height=rows_height(len(engines), per_row=16 if len(engines) <= 64 else 3, minimum=320, maximum=900),
    )
    where = "steps from %{x}, engines from %{y}" if binned else "step %{x}, engine %{y}"
    # whole percents: 256 engines x 500 steps gzip to a third of the size of exact floats
    fig.add_trace(
        go.Heatmap(
            x=x,
            y=[str(e) for e in engines],
            z=z,
            colorscale="Oranges",
            zmin=0,
            colorbar=dict(title=dict(text="idle %"), thickness=12),
            hovertemplate=where + "<br>%{z:.0f}% idle<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", type="category")
    return integer_ticks(fig)


def engine_idle_matrix(result: dict) -> tuple[np.ndarray, list, np.ndarray, str]:
    """(first step per column, first engine per row, rows x columns idle % rounded to
    whole percents as float32, a note when cells are blocks of several steps or engines):
    from the page view's `engine_heatmap` (whole percents already, by the same rounding:
    core.analysis.page_views), or the full result's per-engine column dicts (one column
    per step, one row per engine)."""
    block = result.get("engine_heatmap")
    if isinstance(block, dict):  # the page view
        z = np.array(block.get("idle_pct") or [], dtype=np.float32).reshape(
            len(block.get("engines") or []), len(block.get("steps") or [])
        )
        x = np.array(block.get("steps") or [], dtype=np.int32)
        return x, list(block.get("engines") or []), z, binned_note(block, "engines_per_cell", "engines")
    steps = [s for s in _steps(result) if isinstance(s.get("engine"), dict)]
    engines = sorted({e for s in steps for e in s["engine"].get("engine", [])})
    pos = {e: i for i, e in enumerate(engines)}
    z = np.full((len(engines), len(steps)), np.nan, dtype=np.float32)
    for j, s in enumerate(steps):
        for e, v in zip(s["engine"].get("engine", []), s["engine"].get("idle_fraction", [])):
            p = pct(v)
            if p is not None:
                z[pos[e], j] = p
    return np.array([s["step"] for s in steps], dtype=np.int32), engines, np.round(z), ""
