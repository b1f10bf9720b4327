"""Stage-time figures from the `/steps` and `/rank-timings` payloads.

Step rows carry measured stage timings in seconds (`t_gen`, `t_reward`,
`t_old_log_prob`, `t_ref`, `t_adv`, `t_update_actor`, `t_step`, each possibly null);
rank-timing rows carry a per-rank duration of one phase (`{step, rank, phase, seconds}`),
e.g. the reward time of every rank.
"""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, integer_ticks, num, rows_height, step_series, styled_figure
from dashboard.theme import STAGE_LABELS, STAGES, UNITS, stage_color


def has_stage_timings(steps: list[dict]) -> bool:
    return any(num(s.get(f"t_{st}")) is not None for s in steps for st in (*STAGES, "step"))


def trace_has_stage_timings(trace: dict) -> bool:
    """Did ingestion record any per-step stage time (t_gen, ..., t_step) for this trace
    (`GET /traces/{id}`: metadata.columns.steps)?"""
    steps = ((trace.get("metadata") or {}).get("columns") or {}).get("steps") or []
    return any(str(c).startswith("t_") for c in steps)


def stage_time_figure(steps: list[dict], *, title: str = "Stage time per step") -> go.Figure:
    """Stacked bars: seconds per stage per step; `other` is t_step minus the named
    stages when the log has t_step (framework overhead, data loading, ...)."""
    rows = sorted(steps, key=lambda s: s["step"])
    if not has_stage_timings(rows):
        return empty_figure(
            "This trace has no per-step stage timings: upload the run's verl metric log (JSON lines with timing_s/* per step, "
            "see docs/formats.md) together with its trace files",
            title,
        )
    x = [r["step"] for r in rows]
    fig = styled_figure(
        title, x_title=UNITS["step"], y_title=UNITS["seconds"], barmode="stack", bargap=0.1, hovermode="x unified"
    )
    named = [0.0] * len(rows)
    for st in STAGES:
        ys = [num(r.get(f"t_{st}")) for r in rows]
        if all(y is None for y in ys):
            continue
        named = [a + (y or 0.0) for a, y in zip(named, ys)]
        fig.add_trace(
            step_series(
                x,
                ys,
                name=STAGE_LABELS[st],
                color=stage_color(st),
                stacked=True,
                hovertemplate=f"{STAGE_LABELS[st]} %{{y:.2f}} s<extra></extra>",
            )
        )
    other = []
    for r, total in zip(rows, named):
        t_step = num(r.get("t_step"))
        other.append(max(t_step - total, 0.0) if t_step is not None else None)
    if any(o for o in other):
        fig.add_trace(
            step_series(
                x,
                other,
                name=STAGE_LABELS["other"],
                color=stage_color("other"),
                stacked=True,
                hovertemplate="other %{y:.2f} s<extra></extra>",
            )
        )
    return integer_ticks(fig)


def stage_segments(step: dict | None, rank_timings: list[dict]) -> list[dict]:
    """Per-rank stage segments of one step: `{rank, stage, start, end}` in seconds from
    the step start. Stages run in order and every stage starts at a barrier (the end
    of the previous stage on its slowest rank); a rank that finished early gets a
    `wait` segment up to the barrier. A stage uses the rank's own time when the trace
    has it (rank-timings), else the step's measured time for every rank."""
    per_rank: dict[tuple[int, str], float] = {}
    extra_phases: list[str] = []
    for rt in rank_timings:
        sec = num(rt.get("seconds"))
        if sec is None:
            continue
        phase = str(rt.get("phase"))
        per_rank[(int(rt["rank"]), phase)] = sec
        if phase not in STAGES and phase not in extra_phases:
            extra_phases.append(phase)
    ranks = sorted({r for r, _ in per_rank}) or [0]
    segments: list[dict] = []
    barrier = 0.0
    for stage in (*STAGES, *extra_phases):
        step_time = num((step or {}).get(f"t_{stage}"))
        durations = {r: per_rank.get((r, stage), step_time) for r in ranks}
        if all(d is None for d in durations.values()):
            continue
        ends = {}
        for r, d in durations.items():
            d = d or 0.0
            segments.append({"rank": r, "stage": stage, "start": barrier, "end": barrier + d})
            ends[r] = barrier + d
        stage_end = max(ends.values())
        for r, e in ends.items():
            if e < stage_end:
                segments.append({"rank": r, "stage": "wait", "start": e, "end": stage_end})
        barrier = stage_end
    return segments


def stage_gantt_figure(step: dict | None, rank_timings: list[dict], *, step_no: int | None = None) -> go.Figure:
    """Gantt of one step: a row per rank, a bar per stage, grey where a rank waits."""
    title = f"Stages per rank, step {step_no}" if step_no is not None else "Stages per rank"
    segs = stage_segments(step, rank_timings)
    if not segs:
        return empty_figure(
            "No stage or per-rank timings for this step: upload the verl metric log or "
            "PolyTrace reward_timings_step_N.jsonl files (docs/formats.md)",
            title,
        )
    ranks = sorted({s["rank"] for s in segs})
    fig = styled_figure(
        title,
        x_title="time from step start (s)",
        y_title=UNITS["rank"],
        barmode="overlay",
        height=rows_height(len(ranks), per_row=18 if len(ranks) < 64 else 5),
        bargap=0.15,
    )
    order = [st for st in dict.fromkeys(s["stage"] for s in segs) if st != "wait"] + ["wait"]
    for stage in order:
        part = [s for s in segs if s["stage"] == stage]
        if not part:
            continue
        label = STAGE_LABELS.get(stage, stage)
        fig.add_trace(
            go.Bar(
                name=label,
                orientation="h",
                y=[f"rank {s['rank']}" for s in part],
                base=[s["start"] for s in part],
                x=[s["end"] - s["start"] for s in part],
                marker_color=stage_color(stage),
                hovertemplate=f"%{{y}}<br>{label}: %{{x:.2f}} s (from %{{base:.2f}} s)<extra></extra>",
            )
        )
    # Categories (not numbers): ranks 0 and 4 of a 2-engine run sit next to each other.
    fig.update_yaxes(
        autorange="reversed", type="category", categoryorder="array", categoryarray=[f"rank {r}" for r in ranks]
    )
    return fig
