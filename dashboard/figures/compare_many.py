"""Many traces side by side (pure builders from API payloads): per-step panels aligned
by step with a per-trace offset, and the table of differences.

A run is a dict: {"id", "name", "offset", "summary" (the summaries payload or None),
"steps" (step rows), "results" ({kind: analysis result})}. Per-step figures:
- lengths: the response p50 and p99 of each step (summaries);
- long tail: the rollout idle fraction per step (the "longtail" analysis), else the
  response max/mean per step (summaries);
- imbalance: max/mean DP token load per step ("imbalance" analysis);
- data efficiency: share of generated response tokens used for training per trainer
  step ("data_efficiency" analysis);
- stage times: mean seconds per stage over the steps that logged it, one bar per run;
- GPU: mean over ranks of the compute / non-compute / idle share ("gpu_timeline").
The differences table compares each run with the first one (the reference): delta =
run - reference, ratio = run / reference.
"""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, num, numbers, pct
from dashboard.figures.headlines import gpu_idle_share, imbalance_headline, rollout_idle_share
from dashboard.figures.metrics import PALETTE, with_gaps
from dashboard.theme import STAGE_LABELS, STAGES, base_layout, stage_color


def _label(run: dict) -> str:
    off = int(run.get("offset") or 0)
    return f"{run['name']} (#{run['id']})" + (f" {off:+d}" if off else "")


def _lines(runs: list[dict], per_run, title: str, y_title: str, empty: str, *, dash_second: bool = False) -> go.Figure:
    fig = go.Figure()
    for i, run in enumerate(runs):
        color = PALETTE[i % len(PALETTE)]
        for j, (name, steps, values) in enumerate(per_run(run)):
            off = int(run.get("offset") or 0)
            xs, ys = with_gaps([s + off for s in steps], values)
            if not any(y is not None for y in ys):
                continue
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    name=f"{_label(run)}{' ' + name if name else ''}",
                    line=dict(color=color, dash="dot" if j and dash_second else "solid"),
                    connectgaps=False,
                    meta={"trace_id": run["id"], "series": name},
                )
            )
    if not fig.data:
        return empty_figure(empty, title)
    fig.update_layout(**base_layout(title=dict(text=title), hovermode="x"))
    fig.update_xaxes(title_text="step (after offset)", showspikes=True, spikemode="across")
    fig.update_yaxes(title_text=y_title)
    return fig


def _summary_rows(run: dict) -> list[dict]:
    return [r for r in (run.get("summary") or {}).get("steps", []) if r.get("count")]


def lengths_figure(runs: list[dict]) -> go.Figure:
    def per_run(run):
        rows = _summary_rows(run)
        steps = [r["step"] for r in rows]
        return [("p50", steps, [num(r.get("p50")) for r in rows]), ("p99", steps, [num(r.get("p99")) for r in rows])]

    return _lines(
        runs, per_run, "Response length p50 (solid) and p99 (dotted)", "tokens", "No run has samples", dash_second=True
    )


def longtail_figure(runs: list[dict]) -> go.Figure:
    def per_run(run):
        res = (run.get("results") or {}).get("longtail")
        steps_res = [s for s in (res or {}).get("steps", []) if isinstance(s, dict) and "idle_fraction" in s]
        if steps_res:
            return [("idle", [s["step"] for s in steps_res], [pct(s["idle_fraction"]) for s in steps_res])]
        return []

    return _lines(
        runs,
        per_run,
        "Rollout idle share per step (long-tail analysis)",
        "% of engine time",
        "No run has a long-tail result yet",
    )


def imbalance_figure(runs: list[dict]) -> go.Figure:
    def per_run(run):
        res = (run.get("results") or {}).get("imbalance")
        rows = [s for s in (res or {}).get("steps", []) if isinstance(s, dict)]
        return [("", [s["step"] for s in rows], [num((s.get("tokens") or {}).get("max_over_mean")) for s in rows])]

    return _lines(
        runs,
        per_run,
        "DP imbalance: max/mean token load per step",
        "max / mean",
        "No run has an imbalance result (needs dp_rank per sample)",
    )


def data_efficiency_figure(runs: list[dict]) -> go.Figure:
    def per_run(run):
        res = (run.get("results") or {}).get("data_efficiency")
        rows = [s for s in (res or {}).get("steps", []) if isinstance(s, dict)]
        key = "trainer_step" if rows and "trainer_step" in rows[0] else "step"
        rows = [s for s in rows if s.get(key) is not None]
        return [("", [s[key] for s in rows], [100 * (num(s.get("used_token_share")) or 0) for s in rows])]

    return _lines(
        runs,
        per_run,
        "Response tokens used for training per trainer step (DAPO)",
        "% of generated",
        "No run has DAPO filter marks (dapo_filter_indices.jsonl)",
    )


def stage_means(steps: list[dict]) -> dict[str, float]:
    out = {}
    for st in (*STAGES, "step"):
        vals = numbers(s.get(f"t_{st}") for s in steps)
        if vals:
            out[st] = sum(vals) / len(vals)
    return out


def stages_figure(runs: list[dict]) -> go.Figure:
    means = [stage_means(r.get("steps") or []) for r in runs]
    if not any(means):
        return empty_figure("No run has per-step stage timings (upload the framework's metric log)")
    fig = go.Figure()
    names = [_label(r) for r in runs]
    for st in STAGES:
        ys = [m.get(st) for m in means]
        if any(y is not None for y in ys):
            fig.add_trace(go.Bar(x=names, y=ys, name=STAGE_LABELS.get(st, st), marker_color=stage_color(st)))
    other = [max(0.0, m["step"] - sum(m.get(st, 0.0) for st in STAGES)) if "step" in m else None for m in means]
    if any(o for o in other):
        fig.add_trace(go.Bar(x=names, y=other, name="other", marker_color="#bbb"))
    fig.update_layout(**base_layout(title=dict(text="Mean stage time per step"), barmode="stack"))
    fig.update_yaxes(title_text="seconds")
    return fig


def gpu_figure(runs: list[dict]) -> go.Figure:
    names: list[str] = []
    parts: dict[str, list[float | None]] = {"compute_pct": [], "non_compute_pct": [], "idle_pct": []}
    for r in runs:
        rows = (r.get("results") or {}).get("gpu_timeline", {}).get("temporal") if r.get("results") else None
        if not isinstance(rows, list) or not rows:
            continue
        names.append(_label(r))
        for k in parts:
            vals = numbers(x.get(k) for x in rows if isinstance(x, dict))
            parts[k].append(sum(vals) / len(vals) if vals else None)
    if not names:
        return empty_figure("No run has GPU events (attach its Kineto traces)")
    fig = go.Figure()
    for k, label, color in (
        ("compute_pct", "compute", "#2ca02c"),
        ("non_compute_pct", "non-compute", "#ff7f0e"),
        ("idle_pct", "idle", "#bbb"),
    ):
        fig.add_trace(go.Bar(x=names, y=parts[k], name=label, marker_color=color))
    fig.update_layout(
        **base_layout(title=dict(text="GPU time, mean over ranks (HTA temporal breakdown)"), barmode="stack")
    )
    fig.update_yaxes(title_text="% of time")
    return fig


def _median(values):
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    m = len(vals) // 2
    return vals[m] if len(vals) % 2 else (vals[m - 1] + vals[m]) / 2


def run_figures(run: dict) -> dict[str, float | None]:
    """The compared figures of one run (definitions in FIGURES)."""
    rows = _summary_rows(run)
    steps = run.get("steps") or []
    means = stage_means(steps)
    results = run.get("results") or {}
    imb, _saved = imbalance_headline(results.get("imbalance"))
    eff = (results.get("data_efficiency") or {}).get("summary") or {}
    gpu = gpu_idle_share(results.get("gpu_timeline"))
    idle = rollout_idle_share(results.get("longtail"))
    total = sum(r.get("count") or 0 for r in rows)
    return {
        "steps": float(len({s["step"] for s in steps} | {r["step"] for r in rows})) or None,
        "samples": float(total) or None,
        "response_mean": (sum((r.get("mean") or 0) * r["count"] for r in rows) / total) if total else None,
        "response_p99": _median([num(r.get("p99")) for r in rows]),
        "tail_ratio": _median([num(r.get("tail_ratio")) for r in rows]),
        "rollout_idle": None if idle is None else 100 * idle,
        "imbalance": imb,
        "t_step": means.get("step"),
        "t_gen": means.get("gen"),
        "used_tokens": None if eff.get("used_token_share") is None else 100 * eff["used_token_share"],
        "gpu_idle": None if gpu is None else 100 * gpu,
    }


FIGURES = (
    ("steps", "Steps", ""),
    ("samples", "Samples", ""),
    ("response_mean", "Mean response length (tokens, over all samples)", ""),
    ("response_p99", "Response p99 (tokens, median over steps)", ""),
    ("tail_ratio", "Tail ratio (response max/mean, median over steps)", ""),
    ("rollout_idle", "Rollout idle share (%, mean over steps)", ""),
    ("imbalance", "DP imbalance (max/mean token load, mean over steps)", ""),
    ("t_step", "Step time (s, mean over logged steps)", ""),
    ("t_gen", "Generation time (s, mean over logged steps)", ""),
    ("used_tokens", "Response tokens used for training (%, DAPO)", ""),
    ("gpu_idle", "GPU idle (%, mean over ranks)", ""),
)


def diff_rows(runs: list[dict]) -> list[dict]:
    """Per figure: each run's value, and its delta and ratio to the first run."""
    values = [run_figures(r) for r in runs]
    out = []
    for key, label, _ in FIGURES:
        per = [v[key] for v in values]
        if all(p is None for p in per):
            continue
        ref = per[0]
        cells = []
        for p in per:
            delta = None if p is None or ref is None else p - ref
            ratio = None if p is None or not ref else p / ref
            cells.append({"value": p, "delta": delta, "ratio": ratio})
        out.append({"key": key, "label": label, "runs": cells})
    return out
