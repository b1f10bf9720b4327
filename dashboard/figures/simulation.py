"""Simulator-replay figures from a simulation job (workers/runners/simulations.py result):

  result["a"], result["b"]   per policy: makespan_s, n_gpus, idle_fraction, idle_gpu_s
                             {cause: GPU-seconds}, steps [{step, step_time, stages
                             {rollout, ...}, idle_gpu_s {cause: s}, rollout {time_s, ...}}],
                             timeline [{name, gpus, intervals [[start, end, state,
                             label, step]]}], timeline_truncated {last_step, intervals_total}
  result["compare"]          total {speedup, saved_s, makespan_a_s, makespan_b_s},
                             per_step [{step, time_a_s, time_b_s, speedup, saved_s}]
  result["accuracy"]         fit_steps, steps [{step, rollout_s | p50_traj_s | p90_traj_s:
                             {measured, predicted, naive, accuracy, naive_accuracy}}],
                             mean {rollout_s_accuracy, rollout_s_naive_accuracy, ...}

and the job's `params` (policy, compare_policy). Measured step timings come from the
trace's `/steps` rows (t_gen, t_step), where the framework logged them.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.common import (
    empty_figure,
    integer_ticks,
    many_steps,
    num,
    rows_height,
    step_gaps,
    step_series,
    styled_figure,
)
from dashboard.theme import (
    REPLAY_COLORS,
    SIM_IDLE_CAUSES,
    SIM_IDLE_COLORS,
    SIM_IDLE_LABELS,
    SIM_STAGE_COLORS,
    SIM_STAGE_LABELS,
    UNITS,
    base_layout,
)

ACCURACY_METRICS = {
    "rollout_s": "rollout time",
    "p50_traj_s": "median trajectory time",
    "p90_traj_s": "p90 trajectory time",
}
TIMELINE_MAX_LANES = 64
# Figures with many legend entries keep them under the plot (above, they would wrap over the title).
_BOTTOM_LEGEND = dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0, font=dict(size=11))
TIMELINE_MAX_INTERVALS = 12_000
TIMELINE_RASTER_ABOVE = 1_500
TIMELINE_BINS = 1_000


def policy_names(job: dict) -> tuple[str, str | None]:
    """(policy A's kind, policy B's kind or None) of a simulation job."""
    params = job.get("params") or {}
    a = (params.get("policy") or {}).get("kind") or "A"
    b = (params.get("compare_policy") or {}).get("kind") if params.get("compare_policy") else None
    if b == a:
        a, b = f"{a} (A)", f"{b} (B)"
    return a, b


def _steps(sim: dict | None) -> list[dict]:
    return sorted((sim or {}).get("steps") or [], key=lambda s: s["step"])


def _lines_mode(n: int) -> str:
    return "lines+markers" if n <= 60 else "lines"


# Simulate's idle figure, told apart from the Overview's (dashboard/views/overview.py).
REPLAYED_IDLE_DEFINITION = (
    "idle GPU-seconds / (GPUs × replayed time), every GPU and stage. "
    "Not the Overview's rollout idle share (rollout slots only, while the longest sample runs)"
)


# -- predicted versus measured --------------------------------------------------------
def measured_rollout(result: dict, trace_steps: list[dict] | None = None) -> dict[int, float]:
    """Measured rollout seconds per step: the accuracy report's (the steps not used for
    fitting, from engine latencies or t_gen), else the trace's logged t_gen."""
    out = {int(s["step"]): t for s in trace_steps or [] if (t := num(s.get("t_gen"))) is not None}
    for row in (result.get("accuracy") or {}).get("steps") or []:
        m = num((row.get("rollout_s") or {}).get("measured"))
        if m is not None:
            out[int(row["step"])] = m
    return out


def predicted_vs_measured_figure(job: dict, trace_steps: list[dict] | None = None) -> go.Figure:
    """Per step: predicted rollout time (policy A) against the measured one, the naive
    predictor (mean of the fitted steps), and predicted step time of A and B against
    the measured step time where the trace logged it."""
    result = job.get("result") or job
    a_name, b_name = policy_names(job)
    a_steps = _steps(result.get("a"))
    if not a_steps:
        return empty_figure("This replay has no steps", "Predicted time per step")
    x = [s["step"] for s in a_steps]
    mode = _lines_mode(len(x))
    measured = measured_rollout(result, trace_steps)
    fig = styled_figure(
        _predicted_title(bool(measured) or bool(_measured_steps(trace_steps, x))),
        x_title=UNITS["step"],
        y_title=UNITS["seconds"],
        hovermode="x unified",
    )
    if measured:
        ms = sorted(measured)
        fig.add_trace(
            go.Scatter(
                name="measured rollout",
                x=ms,
                y=[measured[s] for s in ms],
                mode="markers",
                marker=dict(color=REPLAY_COLORS["measured"], size=7, symbol="circle-open"),
                hovertemplate="measured rollout %{y:.1f} s<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            name="predicted rollout",
            x=x,
            y=[num((s.get("stages") or {}).get("rollout")) for s in a_steps],
            mode=mode,
            line=dict(color=REPLAY_COLORS["a"], width=2),
            hovertemplate="predicted rollout %{y:.1f} s<extra></extra>",
        )
    )
    _add_uncertainty(fig, result)
    _add_naive(fig, result, mode)
    _add_step_times(fig, result, trace_steps, x, (a_name, b_name), mode)
    fit = (result.get("accuracy") or {}).get("fit_steps") or ((result.get("calibration") or {}).get("fit_steps") or [])
    for s in fit[:20]:  # the steps calibration saw: shaded, they are not a test of accuracy
        fig.add_vrect(x0=s - 0.5, x1=s + 0.5, fillcolor="#EEEEEE", line_width=0, layer="below")
    flag_partial_steps(fig, result)
    # lines break where steps are missing (0, 1, 5: no line across 2-4)
    return integer_ticks(step_gaps(fig))


def _add_naive(fig: go.Figure, result: dict, mode: str) -> None:
    """The naive predictor's rollout time (the mean of the fitted steps), where scored."""
    acc_rows = (result.get("accuracy") or {}).get("steps") or []
    naive = [(r["step"], num((r.get("rollout_s") or {}).get("naive"))) for r in acc_rows]
    naive = [(s, v) for s, v in naive if v is not None]
    if naive:
        fig.add_trace(
            go.Scatter(
                name="naive rollout (mean of fitted steps)",
                x=[s for s, _ in naive],
                y=[v for _, v in naive],
                mode=mode,
                line=dict(color=REPLAY_COLORS["naive"], width=1, dash="dot"),
                hovertemplate="naive %{y:.1f} s<extra></extra>",
            )
        )


def _predicted_title(measured: bool) -> str:
    """No "versus" without a measured series to be versus."""
    if measured:
        return "Predicted versus measured time per step"
    return "Predicted time per step<br><sup>no measured rollout or step times in this trace to compare with</sup>"


def _measured_steps(trace_steps: list[dict] | None, x: list) -> dict[int, float]:
    """{step: measured step time} of the replayed steps where the trace logged it."""
    shown = set(x)
    return {
        int(s["step"]): t for s in trace_steps or [] if (t := num(s.get("t_step"))) is not None and s["step"] in shown
    }


def _add_step_times(
    fig: go.Figure, result: dict, trace_steps: list[dict] | None, x: list, names: tuple, mode: str
) -> None:
    """The measured step time where the trace logged it, and each policy's predicted one."""
    t_step = _measured_steps(trace_steps, x)
    if t_step:
        ts = sorted(t_step)
        fig.add_trace(
            go.Scatter(
                name="measured step",
                x=ts,
                y=[t_step[s] for s in ts],
                mode="markers",
                marker=dict(color=REPLAY_COLORS["measured"], size=7, symbol="square-open"),
                hovertemplate="measured step %{y:.1f} s<extra></extra>",
            )
        )
    for key, name in zip(("a", "b"), names):
        steps = _steps(result.get(key)) if name else []
        if steps:
            fig.add_trace(
                go.Scatter(
                    name=f"predicted step ({name})",
                    x=[s["step"] for s in steps],
                    y=[num(s.get("step_time")) for s in steps],
                    mode=mode,
                    line=dict(color=REPLAY_COLORS[key], width=2, dash="dash"),
                    hovertemplate=f"{name} step %{{y:.1f}} s<extra></extra>",
                )
            )


def partial_steps_of(result: dict) -> dict[int, int | None]:
    """{step: its samples} of the steps whose workload is partial (a short tail file):
    flagged in the figures and kept out of the accuracy means."""
    acc = result.get("accuracy") or {}
    out: dict[int, int | None] = {int(s): None for s in acc.get("partial_steps") or []}
    for r in acc.get("steps") or []:
        if r.get("partial"):
            out[int(r["step"])] = r.get("n_samples")
    return out


def flag_partial_steps(fig: go.Figure, result: dict) -> None:
    for step, n in sorted(partial_steps_of(result).items())[:20]:
        what = f"{n:,} samples" if n else "partial workload"
        fig.add_vrect(
            x0=step - 0.5,
            x1=step + 0.5,
            fillcolor="#FCE8D5",
            line_width=0,
            layer="below",
            annotation_text=f"step {step}: partial ({what}), not in the means",
            annotation_position="top left",
            annotation_font_size=10,
        )


def _add_uncertainty(fig: go.Figure, result: dict) -> None:
    """The Monte-Carlo mean of the rollout (the prediction when calibrated) and its P10-P90."""
    unc = sorted((result.get("uncertainty") or {}).get("steps") or [], key=lambda r: r["step"])
    if unc:
        ux = [r["step"] for r in unc]
        mean = [num(r["rollout_s"].get("mean")) for r in unc]
        fig.add_trace(
            go.Scatter(
                name="predicted rollout, Monte-Carlo mean (P10-P90)",
                x=ux,
                y=mean,
                mode="markers",
                marker=dict(color=REPLAY_COLORS["a"], size=7, symbol="diamond"),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[(num(r["rollout_s"].get("p90")) or 0) - (m or 0) for r, m in zip(unc, mean)],
                    arrayminus=[(m or 0) - (num(r["rollout_s"].get("p10")) or 0) for r, m in zip(unc, mean)],
                ),
                hovertemplate="MC mean %{y:.1f} s<extra></extra>",
            )
        )


def accuracy_rows(result: dict) -> list[dict]:
    """Mean accuracy (1 − |predicted − measured| / measured) over the steps not used for
    fitting, calibrated and naive, per metric: [{metric, label, calibrated, naive,
    steps}]; empty without an accuracy report."""
    acc = result.get("accuracy") or {}
    mean = acc.get("mean") or {}
    rows = []
    for key, label in ACCURACY_METRICS.items():
        n = sum(
            1 for r in acc.get("steps") or [] if not r.get("partial") and (r.get(key) or {}).get("measured") is not None
        )
        cal, naive = num(mean.get(f"{key}_accuracy")), num(mean.get(f"{key}_naive_accuracy"))
        if cal is None and naive is None:
            continue
        rows.append({"metric": key, "label": label, "calibrated": cal, "naive": naive, "steps": n})
    return rows


# -- speedup and idle causes ---------------------------------------------------------
def speedup_figure(job: dict) -> go.Figure:
    """Per step: speedup of policy B over A (A's step time / B's); the dashed line is the
    whole run's (makespan A / makespan B)."""
    result = job.get("result") or job
    a_name, b_name = policy_names(job)
    cmp = result.get("compare") or {}
    rows = sorted(cmp.get("per_step") or [], key=lambda r: r["step"])
    if not b_name or not rows:
        return empty_figure("Choose a policy B to compare with A", "Speedup of B over A")
    total = num((cmp.get("total") or {}).get("speedup"))
    title = f"Speedup of {b_name} over {a_name}" + (f": {total:.3f}x overall" if total is not None else "")
    fig = styled_figure(title, x_title=UNITS["step"], y_title="speedup (A time / B time, x)", hovermode="x unified")
    ys = [num(r.get("speedup")) for r in rows]
    x = [r["step"] for r in rows]
    saved = [saved_words(num(r.get("saved_s"))) for r in rows]
    hover = "%{y:.3f}x: %{customdata}<extra></extra>"
    if many_steps(len(x)):  # one line instead of hundreds of bars
        fig.add_trace(
            go.Scatter(
                name="per step",
                x=x,
                y=ys,
                mode="lines",
                line=dict(color=REPLAY_COLORS["b"], width=1),
                customdata=saved,
                hovertemplate=hover,
            )
        )
    else:
        colors = [REPLAY_COLORS["b"] if (y or 0) >= 1 else REPLAY_COLORS["measured"] for y in ys]
        fig.add_trace(go.Bar(name="per step", x=x, y=ys, marker_color=colors, customdata=saved, hovertemplate=hover))
    if total is not None:  # a legend entry, not a label on the plot that could sit over a tick
        fig.add_trace(
            go.Scatter(
                name=f"overall {total:.3f}x",
                x=[min(x), max(x)] if many_steps(len(x)) else [min(x) - 0.5, max(x) + 0.5],  # bars' edges
                y=[total, total],
                mode="lines",
                line=dict(color=REPLAY_COLORS["b"], width=2, dash="dash"),
                hoverinfo="skip",
            )
        )
    fig.add_hline(y=1.0, line=dict(color="#999", width=1, dash="dot"))
    # from 0, so a slowdown's bar is as short as it is (not magnified by a cut axis)
    top = max([y for y in ys if y is not None] + [1.0, total or 0.0])
    fig.update_yaxes(range=[0, top * 1.08])
    flag_partial_steps(fig, result)
    return integer_ticks(step_gaps(fig))


def saved_words(seconds: float | None) -> str:
    """B's time against A's in words: "saves 12.3 s" or, for a slowdown, "costs 650.4 s
    more" (never "saves -650.4 s")."""
    if seconds is None:
        return "—"
    if seconds < 0:
        return f"costs {-seconds:,.1f} s more"
    return f"saves {seconds:,.1f} s"


def idle_cause_figure(job: dict) -> go.Figure:
    """Idle GPU-seconds per step split by cause, stacked; one panel per policy."""
    result = job.get("result") or job
    names = [(k, n) for k, n in zip(("a", "b"), policy_names(job)) if n and _steps(result.get(k))]
    title = "Idle GPU time by cause"
    if not names:
        return empty_figure("This replay has no steps", title)
    fig = make_subplots(
        rows=len(names),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=[
            f"{n}: {100 * (num(result[k].get('idle_fraction')) or 0):.1f}% of GPU time idle" for k, n in names
        ],
    )
    fig.update_layout(
        **base_layout(
            title=dict(text=title),
            barmode="stack",
            bargap=0.1,
            hovermode="x unified",
            height=300 + 200 * len(names),
            margin=dict(l=64, r=24, t=60, b=110),
        )
    )
    fig.update_layout(legend=_BOTTOM_LEGEND)
    for row, (key, _name) in enumerate(names, start=1):
        steps = _steps(result[key])
        x = [s["step"] for s in steps]
        for cause in SIM_IDLE_CAUSES:
            ys = [num((s.get("idle_gpu_s") or {}).get(cause)) or 0.0 for s in steps]
            if not any(ys):
                continue
            fig.add_trace(
                step_series(
                    x,
                    ys,
                    name=SIM_IDLE_LABELS[cause],
                    color=SIM_IDLE_COLORS[cause],
                    stacked=True,
                    stackgroup=key,
                    legendgroup=cause,
                    showlegend=row == 1 or cause not in _causes(result, "a"),
                    hovertemplate=f"{SIM_IDLE_LABELS[cause]} %{{y:,.0f}} GPU-s<extra></extra>",
                ),
                row=row,
                col=1,
            )
        fig.update_yaxes(title_text="idle GPU-seconds", row=row, col=1)
    fig.update_xaxes(title_text=UNITS["step"], row=len(names), col=1)
    fig.update_yaxes(matches="y", rangemode="tozero")  # one scale: equal heights, equal GPU-seconds
    return integer_ticks(fig)


def _causes(result: dict, key: str) -> set[str]:
    return {c for s in _steps(result.get(key)) for c, v in (s.get("idle_gpu_s") or {}).items() if v}


# -- simulated GPU timeline ------------------------------------------------------------
def timeline_arrays(
    sim: dict, *, max_lanes: int = TIMELINE_MAX_LANES, max_intervals: int = TIMELINE_MAX_INTERVALS
) -> dict:
    """The timeline as columns, downsampled for drawing: at most `max_lanes` lanes
    (evenly spaced) and `max_intervals` intervals (the longest ones: shorter ones are
    below a pixel at full view). Returns {lanes: [name], lane, start, end, category
    (busy stage or idle cause, idle ones prefixed "idle:"), step, shown_lanes,
    total_lanes, shown_intervals, total_intervals}."""
    lanes = sim.get("timeline") or []
    total_lanes = len(lanes)
    if total_lanes > max_lanes:
        keep = np.unique(np.linspace(0, total_lanes - 1, max_lanes).round().astype(int))
        lanes = [lanes[i] for i in keep]
    names, lane_idx, start, end, cat, step = [], [], [], [], [], []
    for i, lane in enumerate(lanes):
        names.append(f"{lane.get('name')} (GPU {_gpu_span(lane.get('gpus') or [])})")
        for iv in lane.get("intervals") or []:
            lane_idx.append(i)
            start.append(iv[0])
            end.append(iv[1])
            cat.append(iv[3] if iv[2] == "busy" else f"idle:{iv[3]}")
            step.append(iv[4])
    start_a, end_a = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    total = start_a.size
    keep_idx = np.arange(total)
    if total > max_intervals:
        keep_idx = np.sort(np.argpartition(-(end_a - start_a), max_intervals - 1)[:max_intervals])
    return {
        "lanes": names,
        "lane": np.asarray(lane_idx, dtype=np.int64)[keep_idx],
        "start": start_a[keep_idx],
        "end": end_a[keep_idx],
        "category": np.asarray(cat, dtype=object)[keep_idx],
        "step": np.asarray(step, dtype=np.int64)[keep_idx],
        "shown_lanes": len(lanes),
        "total_lanes": total_lanes,
        "shown_intervals": int(keep_idx.size),
        "total_intervals": int(total),
    }


def _gpu_span(gpus: list[int]) -> str:
    if not gpus:
        return "-"
    if len(gpus) > 1 and gpus == list(range(gpus[0], gpus[-1] + 1)):
        return f"{gpus[0]}-{gpus[-1]}"
    return ",".join(map(str, gpus))


def _category_style(cat: str) -> tuple[str, str]:
    """(legend name, colour) of a timeline category ("rollout", "idle:rollout_tail", ...)."""
    if cat.startswith("idle:"):
        key = cat[5:]
        return "idle: " + SIM_IDLE_LABELS.get(key, key), SIM_IDLE_COLORS.get(key, "#D0D0D0")
    return SIM_STAGE_LABELS.get(cat, cat), SIM_STAGE_COLORS.get(cat, "#BAB0AC")


def timeline_raster(t: dict, bins: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(bin centres, lanes x bins category index or -1, categories): each lane sampled
    at `bins` evenly spaced times (a lane's intervals do not overlap), for drawing a
    long timeline as one image."""
    categories = list(dict.fromkeys(t["category"].tolist()))
    code = {c: i for i, c in enumerate(categories)}
    cat_idx = np.array([code[c] for c in t["category"]], dtype=np.int16)
    lo, hi = float(t["start"].min()), float(t["end"].max())
    centres = lo + (np.arange(bins) + 0.5) * (hi - lo) / bins
    z = np.full((len(t["lanes"]), bins), -1, dtype=np.int16)
    for lane in range(len(t["lanes"])):
        sel = np.flatnonzero(t["lane"] == lane)
        if sel.size == 0:
            continue
        sel = sel[np.argsort(t["start"][sel], kind="stable")]
        at = np.searchsorted(t["start"][sel], centres, side="right") - 1
        inside = (at >= 0) & (centres < t["end"][sel][np.clip(at, 0, None)])
        z[lane, inside] = cat_idx[sel[at[inside]]]
    return centres, z, categories


def timeline_figure(
    sim: dict | None,
    *,
    policy: str = "",
    max_lanes: int = TIMELINE_MAX_LANES,
    max_intervals: int = TIMELINE_MAX_INTERVALS,
    raster_above: int = TIMELINE_RASTER_ABOVE,
    bins: int = TIMELINE_BINS,
) -> go.Figure:
    """Gantt of the simulated GPUs: one row per lane (GPUs that do the same thing),
    busy stages in their stage colours, idle time in light tones by cause. Up to
    `raster_above` intervals every one is drawn (SVG line segments); a longer timeline
    is drawn as an image sampled at `bins` times per lane (what a screen can show; the
    Chrome-trace download has every interval)."""
    title = "Simulated GPU timeline" + (f" ({policy})" if policy else "")
    if not sim or not sim.get("timeline"):
        return empty_figure("This replay stored no timeline", title)
    t = timeline_arrays(sim, max_lanes=max_lanes, max_intervals=max_intervals)
    if t["start"].size == 0:
        return empty_figure("This replay stored no timeline", title)
    raster = t["shown_intervals"] > raster_above
    notes = []
    if t["shown_lanes"] < t["total_lanes"]:
        notes.append(f"{t['shown_lanes']} of {t['total_lanes']} lanes")
    if raster:
        notes.append(f"{t['total_intervals']:,} intervals sampled at {bins:,} times per lane")
    elif t["shown_intervals"] < t["total_intervals"]:
        notes.append(f"the {t['shown_intervals']:,} longest of {t['total_intervals']:,} intervals")
    cut = sim.get("timeline_truncated")
    if cut:
        notes.append(f"steps up to {cut.get('last_step')} (the Chrome trace has all)")
    if notes:
        title += " — " + ", ".join(notes)
    n = len(t["lanes"])
    fig = styled_figure(
        title,
        x_title="simulated time (s)",
        y_title="",
        height=rows_height(n, per_row=18, maximum=1100),
        hovermode="closest",
    )
    if raster:
        _raster_timeline(fig, t, bins)
    else:
        _segment_timeline(fig, t, width=max(3, min(14, int(400 / max(n, 1)))))
    fig.update_yaxes(
        tickmode="array",
        tickvals=list(range(n)),
        ticktext=t["lanes"],
        autorange="reversed",
        showgrid=False,
        zeroline=False,
    )
    fig.update_layout(
        legend={**_BOTTOM_LEGEND, "y": -0.22}, height=fig.layout.height + 90, margin=dict(l=64, r=24, t=60, b=130)
    )
    return fig


def _ordered_categories(present) -> list[str]:
    present = set(present)
    out = [c for c in SIM_STAGE_COLORS if c in present]
    out += [f"idle:{c}" for c in SIM_IDLE_CAUSES if f"idle:{c}" in present]
    return out + sorted(present - set(out))


def _segment_timeline(fig: go.Figure, t: dict, width: int) -> None:
    """Every interval as a thick line segment, one SVG trace per category."""
    for cat in _ordered_categories(t["category"].tolist()):
        sel = np.flatnonzero(t["category"] == cat)
        name, color = _category_style(cat)
        m = sel.size
        # segments start, end, NaN; float32 typed arrays keep the payload small
        xs = np.empty(3 * m, dtype=np.float32)
        xs[0::3], xs[1::3], xs[2::3] = t["start"][sel], t["end"][sel], np.nan
        ys = np.repeat(t["lane"][sel].astype(np.float32), 3)
        ys[2::3] = np.nan
        steps = np.repeat(t["step"][sel].astype(np.int32), 3)
        fig.add_trace(
            go.Scatter(
                name=name,
                x=xs,
                y=ys,
                mode="lines",
                line=dict(color=color, width=width),
                customdata=steps,
                hovertemplate=f"{name}<br>step %{{customdata}}, at %{{x:.1f}} s<extra></extra>",
            )
        )


def _raster_timeline(fig: go.Figure, t: dict, bins: int) -> None:
    """The timeline as one heatmap image (no per-interval shapes: thousands of SVG
    segments or a WebGL context cost the browser about a second), with a legend of
    the categories shown."""
    centres, z, categories = timeline_raster(t, bins)
    order = _ordered_categories(categories)
    remap = np.array([order.index(c) for c in categories], dtype=np.int16)
    shown = np.where(z >= 0, remap[np.clip(z, 0, None)], -1)
    k = len(order)
    styles = [_category_style(c) for c in order]
    scale = []
    for i, (_name, color) in enumerate(styles):  # one flat band of the scale per category
        scale += [[i / k, color], [(i + 1) / k, color]]
    # hover names kept short: one per sampled cell (the legend has the long ones)
    names = np.array([c.replace("idle:", "idle: ").replace("_", " ") for c in order] + [""], dtype=object)
    fig.add_trace(
        go.Heatmap(
            x=centres.astype(np.float32),
            y=np.arange(len(t["lanes"]), dtype=np.int16),
            z=np.where(shown >= 0, shown, np.nan).astype(np.float32),
            zmin=-0.5,
            zmax=k - 0.5,
            colorscale=scale,
            showscale=False,
            text=names[shown].tolist(),
            name="timeline",
            hovertemplate="%{text}<br>at %{x:.1f} s<extra></extra>",
        )
    )
    for name, color in styles:  # legend entries (a heatmap has none of its own)
        fig.add_trace(
            go.Scatter(
                x=[None], y=[None], mode="markers", name=name, marker=dict(symbol="square", size=11, color=color)
            )
        )


# -- headline cards -------------------------------------------------------------------
def summary_cards(job: dict) -> list[dict]:
    """The replay's headline figures: [{key, label, value, hint}] (speedup as the API
    reports it, to 3 decimals; accuracy as a percentage)."""
    result = job.get("result") or {}
    a_name, b_name = policy_names(job)
    a, b = result.get("a") or {}, result.get("b") or {}
    cards = []
    total = (result.get("compare") or {}).get("total") or {}
    speedup = num(total.get("speedup"))
    if b_name:
        cards.append(
            {
                "key": "speedup",
                "label": f"Speedup of {b_name}",
                "value": "—" if speedup is None else f"{speedup:.3f}x",
                "hint": f"over {a_name}; {saved_words(num(total.get('saved_s')))} of {_dur(a.get('makespan_s'))}",
            }
        )
    cards.append(
        {
            "key": "makespan-a",
            "label": f"Time, {a_name}",
            "value": _dur(a.get("makespan_s")),
            "hint": f"replayed idle GPU share {_share(a.get('idle_fraction'))} on {a.get('n_gpus') or '—'} GPUs"
            f": {REPLAYED_IDLE_DEFINITION}",
        }
    )
    if b_name:
        cards.append(
            {
                "key": "makespan-b",
                "label": f"Time, {b_name}",
                "value": _dur(b.get("makespan_s")),
                "hint": f"replayed idle GPU share {_share(b.get('idle_fraction'))}",
            }
        )
    rows = {r["metric"]: r for r in accuracy_rows(result)}
    if "rollout_s" in rows:
        r = rows["rollout_s"]
        cards.append(
            {
                "key": "accuracy-rollout",
                "label": "Rollout accuracy",
                "value": _share(r["calibrated"]),
                "hint": f"calibrated, on {r['steps']} step(s) not fitted; naive {_share(r['naive'])}",
            }
        )
    else:
        cal = result.get("calibration")
        cards.append(
            {
                "key": "accuracy-rollout",
                "label": "Rollout accuracy",
                "value": "—",
                "hint": "calibrated on every replayed step: nothing left to test"
                if cal
                else (result.get("calibration_note") or "not calibrated"),
            }
        )
    return cards


def _dur(seconds) -> str:
    s = num(seconds)
    if s is None:
        return "—"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _share(x) -> str:
    x = num(x)
    return "—" if x is None else f"{100 * x:.1f}%"
