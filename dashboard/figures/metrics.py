"""The metric explorer's figures: any per-step series of one or many traces, smoothed,
aligned by a per-trace step offset, one chart row per series with the x axis shared (so
hover crosshair and zoom are linked across rows), gaps where steps are missing.

Smoothing (plotted values; raw values stay in the hover and the CSV):
- ``ema``: the exponential moving average v_t = a * v_{t-1} + (1 - a) * x_t over the
  steps that have a value, started at the first value, with weight a in [0, 1)
  (W&B's "exponential moving average" slider);
- ``window``: the mean of the last n values (trailing, over steps that have a value);
- ``none``: the values as logged.
A step is missing when the series has no value there; a jump between logged steps of
more than 1.5x the series' median spacing is a gap too (the line breaks), so a series
logged every 10 steps stays one line.
"""

from __future__ import annotations

import csv
import io

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.theme import base_layout

# A series' unit from its key, first match wins: (test on the key's last part or the
# whole key, unit). Length statistics are tokens except the dimensionless ones.
_RATIO_STATS = ("tail_ratio", "cv", "skewness")
_RATIO_WORDS = ("ratio", "over_mean", "over_min", "speedup")
_SHARE_WORDS = ("fraction", "share", "rate", "frac", "mfu", "saving")


def metric_unit(key: str) -> str | None:
    """The unit of a metric explorer series, read from its key: 't_gen' -> 's',
    'timing_s/gen' -> 's', 'response/p99' -> 'tokens', 'longtail/idle_fraction' ->
    'fraction'; None when the key does not say."""
    low = key.lower()
    last = low.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    head = low.split("/", 1)[0]
    if head in ("response", "prompt", "total") and "/" in low:  # the per-step length statistics
        if last in _RATIO_STATS:
            return "ratio"
        return "fraction" if "rate" in last else ("samples" if last == "count" else "tokens")
    checks: tuple[tuple[bool, str], ...] = (
        ("throughput" in low or "tokens_per_s" in low or "tok/s" in low, "tokens/s"),
        (head.endswith("_ms") or last.endswith("_ms"), "ms"),
        (low.startswith("t_") or head.endswith("_s") or head == "time" or last.endswith(("_s", "_sec")), "s"),
        (last.endswith(("_gb", "_gib")), "GB"),
        (any(w in last for w in _RATIO_WORDS), "ratio"),
        (any(w in last for w in _SHARE_WORDS) or "/mfu" in low, "fraction"),
        ("token" in last or "length" in low or last in ("tokens",), "tokens"),
        (last in ("n_samples", "samples", "count"), "samples"),
    )
    return next((unit for hit, unit in checks if hit), None)


PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")


def smooth(values: list[float | None], mode: str | None, param: float | None) -> list[float | None]:
    """The smoothed series (None stays None)."""
    if mode == "ema":
        a = min(max(float(param if param is not None else 0.6), 0.0), 0.999)
        out: list[float | None] = []
        acc = None
        for v in values:
            if v is None:
                out.append(None)
                continue
            acc = v if acc is None else a * acc + (1 - a) * v
            out.append(acc)
        return out
    if mode == "window":
        n = max(int(param or 1), 1)
        out, recent = [], []
        for v in values:
            if v is None:
                out.append(None)
                continue
            recent.append(v)
            if len(recent) > n:
                recent.pop(0)
            out.append(sum(recent) / len(recent))
        return out
    return list(values)


def with_gaps(steps: list[int], values: list[float | None]) -> tuple[list[int | None], list[float | None]]:
    """Drop steps without a value, and insert a break where logged steps jump by more
    than 1.5x the median spacing."""
    pts = [(s, v) for s, v in zip(steps, values) if v is not None]
    if len(pts) < 3:
        return [s for s, _ in pts], [v for _, v in pts]
    gaps = np.diff([s for s, _ in pts])
    limit = 1.5 * float(np.median(gaps))
    xs: list[int | None] = [pts[0][0]]
    ys: list[float | None] = [pts[0][1]]
    for (s, v), gap in zip(pts[1:], gaps):
        if gap > limit:
            xs.append(None)
            ys.append(None)
        xs.append(s)
        ys.append(v)
    return xs, ys


def plotted(
    payloads: list[dict], keys: list[str], offsets: dict[int, int], mode: str | None, param: float | None
) -> list[dict]:
    """What is drawn, as rows: trace_id, trace, key, step (after the offset), raw, value."""
    rows = []
    for p in payloads:
        off = int(offsets.get(p["trace_id"], 0))
        for key in keys:
            raw = p["series"].get(key)
            if raw is None:
                continue
            shown = smooth(raw, mode, param)
            for step, r, v in zip(p["steps"], raw, shown):
                if r is not None:
                    rows.append(
                        {
                            "trace_id": p["trace_id"],
                            "trace": p["name"],
                            "key": key,
                            "step": step + off,
                            "raw": r,
                            "value": v,
                        }
                    )
    return rows


def metrics_figure(
    payloads: list[dict],
    keys: list[str],
    *,
    offsets: dict[int, int] | None = None,
    mode: str | None = None,
    param: float | None = None,
    log_x: bool = False,
    log_y: bool = False,
) -> go.Figure:
    """One row per key, one line per trace; payloads: the series endpoint's bodies with
    the trace's `name` added."""
    offsets = offsets or {}
    n = max(len(keys), 1)
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=min(0.08, 0.3 / n), subplot_titles=keys)
    for t_idx, p in enumerate(payloads):
        color = PALETTE[t_idx % len(PALETTE)]
        off = int(offsets.get(p["trace_id"], 0))
        steps = [s + off for s in p["steps"]]
        for row, key in enumerate(keys, start=1):
            raw = p["series"].get(key)
            if raw is None:
                continue
            xs, ys = with_gaps(steps, smooth(raw, mode, param))
            label = f"{p['name']} (#{p['trace_id']})" + (f" +{off}" if off > 0 else f" {off}" if off else "")
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines+markers" if len([y for y in ys if y is not None]) < 40 else "lines",
                    name=label,
                    legendgroup=str(p["trace_id"]),
                    showlegend=row == 1,
                    line=dict(color=color, width=1.6),
                    marker=dict(size=4),
                    connectgaps=False,
                    hovertemplate=f"{key}<br>step %{{x}}: %{{y:.4g}}<extra>{label}</extra>",
                    meta={"trace_id": p["trace_id"], "key": key},
                ),
                row=row,
                col=1,
            )
    fig.update_layout(**base_layout(height=max(320, 220 * n + 60), hovermode="x"))
    fig.update_xaxes(showspikes=True, spikemode="across", spikesnap="cursor", spikethickness=1, matches="x")
    if log_x:
        fig.update_xaxes(type="log")
    if log_y:
        fig.update_yaxes(type="log")
    fig.update_xaxes(title_text="step (after offset)", row=n, col=1)
    for row, key in enumerate(keys, start=1):
        fig.update_yaxes(title_text=metric_unit(key) or "value (unit not in its name)", row=row, col=1)
    return fig


def plotted_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["trace_id", "trace", "key", "step", "raw", "value"])
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def parse_offsets(text: str | None) -> dict[int, int]:
    """``"12:5, 13:-2"`` -> {12: 5, 13: -2} (bad entries ignored)."""
    out = {}
    for part in (text or "").replace(";", ",").split(","):
        if ":" in part:
            a, b = part.split(":", 1)
            try:
                out[int(a.strip().lstrip("#"))] = int(b.strip())
            except ValueError:
                continue
    return out
