"""Two traces side by side: length percentiles over steps and pooled CDFs, built from
two `/summaries` payloads (see figures/distributions.py for their shape)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.common import column, empty_figure, integer_ticks, log_token_axis, styled_figure
from dashboard.figures.distributions import FIELD_LABELS, cdf_points
from dashboard.figures.stages import has_stage_timings
from dashboard.theme import TRACE_COLORS, UNITS

DASHES = {"p50": None, "mean": "dot", "p90": "dashdot", "p99": "dash", "max": "longdash"}


def _rows(payload: dict | None) -> list[dict]:
    return sorted((r for r in (payload or {}).get("steps", []) if r.get("count")), key=lambda r: r["step"])


def compare_percentiles_figure(
    a: dict | None, b: dict | None, names: tuple[str, str], keys=("p50", "p99")
) -> go.Figure:
    """The chosen percentiles over steps for both traces (colour = trace, dash = percentile)."""
    field = FIELD_LABELS.get(((a or b) or {}).get("field") or "response", "length")
    title = f"{field} over steps"
    if not _rows(a) and not _rows(b):
        return empty_figure("Choose two traces with samples", title)
    fig = styled_figure(title, x_title=UNITS["step"], y_title=UNITS["tokens"], hovermode="x unified")
    for payload, name, color in ((a, names[0], TRACE_COLORS[0]), (b, names[1], TRACE_COLORS[1])):
        rows = _rows(payload)
        for key in keys:
            fig.add_trace(
                go.Scatter(
                    name=f"{name} {key}",
                    x=[r["step"] for r in rows],
                    y=column(rows, key),
                    mode="lines+markers" if len(rows) <= 60 else "lines",
                    line=dict(color=color, dash=DASHES.get(key)),
                    hovertemplate=f"{name} {key} %{{y:,.0f}}<extra></extra>",
                )
            )
    return integer_ticks(fig)


def pooled_hist(payload: dict | None) -> list[int]:
    """The histogram of all steps together (sum of the per-step histograms)."""
    hists = [r.get("hist") or [] for r in _rows(payload)]
    if not hists:
        return []
    out = np.zeros(max(len(h) for h in hists), dtype=np.int64)
    for h in hists:
        out[: len(h)] += np.asarray(h, dtype=np.int64)
    return out.tolist()


def compare_cdf_figure(a: dict | None, b: dict | None, names: tuple[str, str]) -> go.Figure:
    """CDF of every sample of each trace (all shown steps pooled)."""
    field = FIELD_LABELS.get(((a or b) or {}).get("field") or "response", "length")
    title = f"{field}: CDF over all steps"
    fig = styled_figure(title, x_title=UNITS["tokens"], y_title=UNITS["cdf"])
    drawn = False
    for payload, name, color in ((a, names[0], TRACE_COLORS[0]), (b, names[1], TRACE_COLORS[1])):
        xs, ys = cdf_points(pooled_hist(payload), (payload or {}).get("bin_edges") or [])
        if xs:
            drawn = True
            fig.add_trace(
                go.Scatter(
                    name=name,
                    x=xs,
                    y=ys,
                    mode="lines",
                    line=dict(color=color, width=2),
                    hovertemplate=f"{name}: < %{{x:,.0f}} tokens %{{y:.1%}}<extra></extra>",
                )
            )
    if not drawn:
        return empty_figure("Choose two traces with samples", title)
    xs_all = [x for tr in fig.data for x in tr.x]
    log_token_axis(fig, "x", min(xs_all), max(xs_all))
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    return fig


def compare_panels(a: dict, b: dict, steps_a: list[dict], steps_b: list[dict]) -> dict:
    """Which of the page's chart rows have data for traces `a` and `b` (the API's trace
    bodies and step rows): "lengths" (samples), "stages" (per-step stage timings), and
    "note", one line saying what both traces lack, or None when every row is shown."""
    lengths = bool(a.get("n_samples") or b.get("n_samples"))
    stages = has_stage_timings(steps_a) or has_stage_timings(steps_b)
    lacking = [
        what
        for what, shown in (("rollout lengths (samples)", lengths), ("per-step stage timings", stages))
        if not shown
    ]
    note = None
    if lacking:
        gpu = (
            " (GPU traces only: see the GPU trace diff below)"
            if a.get("n_gpu_events") and b.get("n_gpu_events")
            else ""
        )
        note = f"Neither trace has {' nor '.join(lacking)}, so their charts are not shown{gpu}."
    return {"lengths": lengths, "stages": stages, "note": note}
