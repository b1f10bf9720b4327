"""DP load-imbalance figures from the "imbalance" analysis result
(core/analysis/imbalance.py): per step and load ("tokens" or "cost"), the recorded
load per dp rank, max/mean and max/min, and the same after Karmarkar-Karp (kk) and LPT
repartitioning, with the saving 1 - balanced max / recorded max.
"""

from __future__ import annotations

import base64

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.common import (
    binned_note,
    empty_figure,
    integer_ticks,
    many_steps,
    num,
    numbers,
    rows_height,
    step_gaps,
    step_series,
    styled_figure,
)
from dashboard.theme import POLICY_COLORS, UNITS

LOAD_LABELS = {"tokens": "tokens (prompt + response)", "cost": "training cost 24576·s + s²"}
# What the cost load is, shown under the choice (s = a sample's prompt + response tokens).
COST_CAPTION = (
    "Training cost 24576·s + s² is verl's per-sequence cost proxy (calculate_workload), s = prompt + response "
    "tokens: the linear term stands for the MLP and attention projections (per token, for a 7B dense model), "
    "the quadratic term for attention itself (every token attends to the ones before it). Only ratios between "
    "ranks matter, so the unit is arbitrary."
)
POLICY_LABELS = {"recorded": "recorded", "kk": "Karmarkar-Karp", "lpt": "LPT"}
# Drawn in this order. Karmarkar-Karp and LPT often give the same split: KK's wide dashed
# line with open circles stays visible around LPT's thin dotted one with crosses on top.
RATIO_STYLES: dict[str, dict[str, dict]] = {
    "recorded": {"line": dict(width=2), "marker": dict(symbol="circle", size=6)},
    "kk": {"line": dict(width=5, dash="dash"), "marker": dict(symbol="circle-open", size=11, line=dict(width=2))},
    "lpt": {"line": dict(width=2, dash="dot"), "marker": dict(symbol="x-thin-open", size=7, line=dict(width=2))},
}


SAME_SPLIT_NOTE = "LPT gives Karmarkar-Karp's split on every step: its dotted line runs inside KK's dashed one"


def _ratio_keys(metric: str) -> dict[str, str]:
    return {"recorded": metric, "kk": f"kk_{metric}", "lpt": f"lpt_{metric}"}


def _steps(result: dict, load: str) -> list[dict]:
    return [s for s in sorted(result.get("steps") or [], key=lambda s: s["step"]) if isinstance(s.get(load), dict)]


def load_heatmap_figure(result: dict, load: str = "tokens") -> go.Figure:
    """Step x DP rank, colour = the rank's load relative to the step mean (1 = fair
    share); hover gives the absolute load. From a page view binned to fewer cells than
    steps x ranks (core.analysis.page_views), a cell is a block of steps and ranks: its
    mean load relative to the steps' mean."""
    title = f"Load per DP rank relative to the step mean ({LOAD_LABELS.get(load, load)})"
    grid = load_grid(result, load)
    if grid is None:
        return empty_figure(
            "No per-rank loads: the samples have no dp_rank; upload PolyTrace packed_lengths_step_N.jsonl files "
            "(they carry it) or native samples with a dp_rank column (docs/formats.md)",
            title,
        )
    x, y, raw, mean, binned = grid
    with np.errstate(invalid="ignore", divide="ignore"):
        z = raw.astype(np.float64) / mean[None, :]
    n_rows = raw.shape[0]
    fig = styled_figure(
        title + (f" <br><sup>{binned}</sup>" if binned else ""),
        x_title=UNITS["step"],
        y_title=UNITS["dp_rank"],
        height=rows_height(n_rows, per_row=16 if n_rows <= 64 else 3, minimum=320, maximum=900),
    )
    zmax = float(np.nanmax(z)) if np.isfinite(z).any() else 2.0
    where = "steps from %{x}, DP ranks from %{y}" if binned else "step %{x}, DP rank %{y}"
    fig.add_trace(
        go.Heatmap(
            # float32 typed arrays: a capped page view is ~0.35 MB each instead of megabytes of JSON text
            x=x,
            y=y,
            z=z.astype(np.float32),
            customdata=raw,
            colorscale="RdBu_r",
            zmid=1.0,
            zmin=max(0.0, 2.0 - zmax),
            zmax=zmax,
            colorbar=dict(title=dict(text="load / mean"), thickness=12),
            hovertemplate=where + "<br>%{customdata:,.0f} (%{z:.2f}x mean)<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    return integer_ticks(integer_ticks(fig), "y")


def load_grid(result: dict, load: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str] | None:
    """(first step per column, first rank per row, ranks x columns load as float32, mean
    load per column, a note when cells are blocks of several steps or ranks) or None
    without per-rank loads: from a page view's `load_heatmap`, or the full result's
    per-step `recorded` lists (one column per step)."""
    block = result.get("load_heatmap")
    if isinstance(block, dict):  # the page view
        if not block.get("steps") or not block.get("ranks"):
            return None
        raw = f4_matrix(block["recorded"])
        mean = np.array([num(v) or np.nan for v in block.get("mean") or []])
        return (
            np.array(block["steps"], dtype=np.int32),
            np.array(block["ranks"], dtype=np.int32),
            raw,
            mean,
            binned_note(block, "ranks_per_cell", "DP ranks"),
        )
    steps = _steps(result, load)
    if not steps:
        return None
    loads = [recorded_loads(s[load].get("recorded")) for s in steps]
    n_ranks = max(len(rec) for rec in loads)
    # float32, what the heatmap draws: the full result and an unbinned page view give the same cells
    raw = np.full((n_ranks, len(steps)), np.nan, dtype=np.float32)
    for j, rec in enumerate(loads):
        raw[: len(rec), j] = rec
    mean = np.array([num(s[load].get("mean")) or np.nan for s in steps])
    return np.array([s["step"] for s in steps], dtype=np.int32), np.arange(n_ranks, dtype=np.int32), raw, mean, ""


def f4_matrix(encoded: dict) -> np.ndarray:
    """A matrix sent as float32 bytes {"dtype": "f4", "shape", "bdata": base64} (the page
    view, core.analysis.page_views)."""
    if encoded.get("dtype") != "f4":
        raise ValueError(f"a matrix in an unknown encoding {encoded.get('dtype')!r}")
    flat = np.frombuffer(base64.b64decode(encoded.get("bdata") or ""), dtype="<f4")
    return flat.reshape(encoded.get("shape") or (0, 0))


def recorded_loads(recorded) -> np.ndarray:
    """A step's load per rank (a list of numbers, None: NaN) as float32."""
    return np.array([np.nan if num(v) is None else num(v) for v in recorded or []], dtype=np.float32)


def imbalance_ratio_figure(result: dict, load: str = "tokens", metric: str = "max_over_mean") -> go.Figure:
    """max/mean (or max/min) per step: recorded, and after KK and LPT balancing."""
    steps = _steps(result, load)
    label = "max / mean" if metric == "max_over_mean" else "max / min"
    title = f"DP imbalance ({label}, {LOAD_LABELS.get(load, load)})"
    if not steps:
        return empty_figure("No per-rank loads", title)
    x = [s["step"] for s in steps]
    fig = styled_figure(title, x_title=UNITS["step"], y_title=f"{label} (ratio)", hovermode="x unified")
    series = {p: [num(s[load].get(key)) for s in steps] for p, key in _ratio_keys(metric).items()}
    if series["kk"] == series["lpt"]:  # the legend alone would not say why one line seems missing
        fig.update_layout(title=dict(text=f"{title}<br><sup>{SAME_SPLIT_NOTE}</sup>"))
    markers = not (many_steps(len(x)) or len(x) > 60)
    for policy, ys in series.items():
        style = RATIO_STYLES[policy]
        fig.add_trace(
            go.Scatter(
                name=POLICY_LABELS[policy],
                x=x,
                y=ys,
                mode="lines+markers" if markers else "lines",
                line=dict(color=POLICY_COLORS["measured" if policy == "recorded" else policy], **style["line"]),
                marker=style["marker"],
                hovertemplate=f"{POLICY_LABELS[policy]} %{{y:.3f}}<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line=dict(color="#999", width=1, dash="dot"))
    return integer_ticks(step_gaps(fig))


def saving_figure(result: dict, load: str = "tokens") -> go.Figure:
    """Share of the slowest rank's time the best available split saves, per step (%):
    best = the smallest max over recorded, KK and LPT, saving = max(0, 1 - best /
    recorded); a heuristic that does worse than the recorded split is no saving (the
    bar is 0 and the hover says the recorded split is best)."""
    steps = _steps(result, load)
    title = "Time the best split would save (slowest rank, %)"
    if not steps:
        return empty_figure("No per-rank loads", title)
    title += " <br><sup>best of recorded / Karmarkar-Karp / LPT per step; never below 0</sup>"
    x = [s["step"] for s in steps]
    fig = styled_figure(
        title,
        x_title=UNITS["step"],
        y_title="saving (% of slowest rank's time)",
        hovermode="x unified",
    )
    ys, best = [], []
    for s in steps:
        f = s[load]
        saving = num(f.get("saving"))
        if saving is None:  # results from before best_split existed: clip the better heuristic
            cands = numbers(f.get(f"{p}_saving") for p in ("kk", "lpt"))
            saving = max([0.0, *cands]) if cands else None
        ys.append(None if saving is None else 100 * max(0.0, saving))
        best.append(POLICY_LABELS.get(f.get("best_split") or "", "best split"))
    fig.add_trace(
        step_series(
            x,
            ys,
            name="best split",
            color=POLICY_COLORS["kk"],
            customdata=best,
            hovertemplate="%{customdata} is best: saves %{y:.1f}%<extra></extra>",
        )
    )
    fig.update_yaxes(rangemode="nonnegative")
    return integer_ticks(fig)


def saving_summary(result: dict, load: str = "tokens") -> dict:
    """Whole-run figures for the page's cards: mean recorded max/mean, and the time
    saved by KK and LPT (1 - sum of balanced maxima / sum of recorded maxima, negative
    when the heuristic loses to the recorded split) and by the best split per step."""
    s = (result.get("summary") or {}).get(load) or {}
    return {
        "max_over_mean": num((s.get("max_over_mean") or {}).get("mean")),
        "max_over_min": num((s.get("max_over_min") or {}).get("mean")),
        "kk_time_saved": num(s.get("kk_time_saved")),
        "lpt_time_saved": num(s.get("lpt_time_saved")),
        # the best available split per step (>= 0); older results: the better heuristic, clipped
        "time_saved": _time_saved(s),
        "best_split_steps": s.get("best_split_steps") or {},
        "dp_size": result.get("dp_size"),
    }


def _time_saved(summary: dict) -> float | None:
    v = num(summary.get("time_saved"))
    if v is not None:
        return max(0.0, v)
    cands = numbers(summary.get(k) for k in ("kk_time_saved", "lpt_time_saved"))
    return max([0.0, *cands]) if cands else None
