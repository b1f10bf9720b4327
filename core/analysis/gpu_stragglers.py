"""Stragglers across ranks: per ProfilerStep, which ranks hold the others up.

In synchronous data-parallel training every rank meets the others in collectives, so a
slow rank shows up twice: it has more computation than its peers (the peers then sit in
NCCL kernels waiting for it) and it tends to finish the step last. Both are measured here
on the GPU timeline of each (step, rank), using only the events assigned to that step
(events with step -1 are ignored):

- compute_us: union of compute kernels (`GpuKind.COMPUTE`) — the work the rank had;
- gpu_end_us: end of the rank's last GPU event in the step. Ranks on different hosts
  compare wall clocks, so treat end differences below the hosts' clock skew as noise;
  compute time needs no cross-host clock and is the primary signal.

A rank is a straggler in a step when its compute time exceeds the step's median over
ranks by more than `tolerance` (default 5 %). Steps with a single rank have no stragglers.

`potential_stragglers` reproduces HTA's get_potential_stragglers on `TraceEvents`
(its rules in its docstring).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from core.analysis.gpu_events import TraceEvents
from core.analysis.gpu_frames import Events, Frame, hta_frames
from core.analysis.gpu_intervals import dense_codes, union_by_group
from core.analysis.gpu_kinds import GpuKind


def _group_median(codes: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of `values` within each group 0..n_groups-1 (vectorised: sort once)."""
    order = np.lexsort((values, codes))
    sorted_vals = values[order]
    counts = np.bincount(codes, minlength=n_groups)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    med = np.full(n_groups, np.nan)
    ok = counts > 0
    med[ok] = 0.5 * (sorted_vals[lo[ok]] + sorted_vals[hi[ok]])
    return med


def stragglers(events: Events, *, tolerance: float = 0.05) -> dict[str, dict[str, np.ndarray]]:
    """Per (step, rank) GPU figures and per-step straggler summary.

    ``per_rank`` one row per step and rank: step, rank, gpu_start_us, gpu_end_us (first
        start / last end of the rank's GPU events in the step), busy_us (union of all its
        GPU activity), compute_us, communication_us (unions of those kinds),
        compute_vs_median (compute_us / the step's median compute_us), end_lag_us
        (gpu_end_us minus the step's median gpu_end_us), finish_order (0 = first rank to
        finish the step), is_last (finished the step last), is_straggler (see module).
    ``per_step`` one row per step: step, n_ranks, median_compute_us, max_compute_us,
        slowest_rank (largest compute), compute_max_over_median, last_rank (finished
        last), end_spread_us (last minus first gpu_end_us), n_stragglers.
    """
    step = np.asarray(events["step"], dtype=np.int64)
    keep = step >= 0
    step = step[keep]
    rank = np.asarray(events["rank"], dtype=np.int64)[keep]
    kind = np.asarray(events["kind"], dtype=np.int64)[keep]
    start = np.asarray(events["start_us"], dtype=np.float64)[keep]
    end = start + np.asarray(events["dur_us"], dtype=np.float64)[keep]

    codes, (g_step, g_rank) = dense_codes(step, rank)
    n = len(g_step)
    everything = union_by_group(codes, start, end, n)
    compute_mask = kind == GpuKind.COMPUTE
    comm_mask = kind == GpuKind.COMMUNICATION
    compute = union_by_group(codes[compute_mask], start[compute_mask], end[compute_mask], n).busy
    comm = union_by_group(codes[comm_mask], start[comm_mask], end[comm_mask], n).busy
    gpu_end = np.full(n, -np.inf)
    np.maximum.at(gpu_end, codes, end)

    # rows are sorted by (step, rank), so each step is a contiguous block
    step_codes, (steps,) = dense_codes(g_step)
    n_steps = len(steps)
    med_compute = _group_median(step_codes, compute, n_steps)
    med_end = _group_median(step_codes, gpu_end, n_steps)
    n_ranks = np.bincount(step_codes, minlength=n_steps)

    with np.errstate(invalid="ignore", divide="ignore"):
        vs_median = compute / med_compute[step_codes]
    order = np.lexsort((g_rank, gpu_end, step_codes))
    block_start = np.r_[0, np.cumsum(n_ranks)[:-1]]
    finish_order = np.empty(n, dtype=np.int64)
    finish_order[order] = np.arange(n) - block_start[step_codes[order]]
    is_last = finish_order == n_ranks[step_codes] - 1
    multi = n_ranks[step_codes] > 1
    is_straggler = multi & (compute > (1.0 + tolerance) * med_compute[step_codes])

    per_rank = {
        "step": g_step.astype(np.int64),
        "rank": g_rank.astype(np.int64),
        "gpu_start_us": everything.first_start,
        "gpu_end_us": gpu_end,
        "busy_us": everything.busy,
        "compute_us": compute,
        "communication_us": comm,
        "compute_vs_median": vs_median,
        "end_lag_us": gpu_end - med_end[step_codes],
        "finish_order": finish_order,
        "is_last": is_last & multi,
        "is_straggler": is_straggler,
    }

    per_step = _per_step_summary(steps, step_codes, n_ranks, g_rank, compute, med_compute, gpu_end, order, is_straggler)
    return {"per_rank": per_rank, "per_step": per_step}


def _per_step_summary(
    steps: np.ndarray,
    step_codes: np.ndarray,
    n_ranks: np.ndarray,
    g_rank: np.ndarray,
    compute: np.ndarray,
    med_compute: np.ndarray,
    gpu_end: np.ndarray,
    order: np.ndarray,
    is_straggler: np.ndarray,
) -> dict:
    """Per step (rows grouped by step in contiguous blocks): the largest compute and its
    rank, the rank that finished last, the spread of finishing times, stragglers."""
    n = len(g_rank)
    block_start = np.r_[0, np.cumsum(n_ranks)[:-1]]
    by_compute = np.lexsort((-g_rank, compute, step_codes))  # ties -> lowest rank last
    last_of_block = block_start + n_ranks - 1
    slowest = g_rank[by_compute[last_of_block]] if n else np.zeros(0, dtype=np.int64)
    max_compute = compute[by_compute[last_of_block]] if n else np.zeros(0)
    last_rank = g_rank[order[last_of_block]] if n else np.zeros(0, dtype=np.int64)
    first_end = gpu_end[order[block_start]] if n else np.zeros(0)
    last_end = gpu_end[order[last_of_block]] if n else np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        max_over_median = max_compute / med_compute
    return {
        "step": steps.astype(np.int64),
        "n_ranks": n_ranks.astype(np.int64),
        "median_compute_us": med_compute,
        "max_compute_us": max_compute,
        "slowest_rank": slowest.astype(np.int64),
        "compute_max_over_median": max_over_median,
        "last_rank": last_rank.astype(np.int64),
        "end_spread_us": last_end - first_end,
        "n_stragglers": np.bincount(step_codes[is_straggler], minlength=len(steps)).astype(np.int64),
    }


# --- potential stragglers (TraceEvents, several ranks) -----------------------------------


def potential_stragglers(
    ev: TraceEvents,
    frames: dict[int, Frame] | None = None,
    *,
    profiler_steps: Sequence[int] | None = None,
    num_candidates: int = 2,
    min_normalized_duration: float = 0.01,
) -> dict:
    """HTA get_potential_stragglers (find_stragglers_with_late_start_comm_kernels).

    Over the chosen ProfilerSteps (default all): the NCCL kernels (names starting
    "ncclKernel", as HTA) at least `min_normalized_duration` of the mean step time long;
    the last of each (rank, stream, step, name); the (stream, name) whose duration varies
    most across ranks (mean over steps of the std across ranks); for it, each rank's start
    time normalised by the mean step time. Per step the `num_candidates` latest-starting
    ranks are potential stragglers (a rank that starts its last big collective late kept
    the others waiting). Returns {"stragglers": ranks (most often flagged first),
    "counts": {rank: steps flagged}, "kernel": name, "stream", "metric": rows of rank,
    step, normalized_start}, or {"stragglers": [], "note": why} when it cannot tell
    (one rank, or no such kernel; HTA raises then).
    """
    frames = frames if frames is not None else hta_frames(ev)
    num_candidates = max(1, int(num_candidates))
    step_re = re.compile(r"ProfilerStep\s*#\s*(\d+)")
    step_of_name = {i: int(hit.group(1)) for i, n in enumerate(ev.names) if (hit := step_re.match(n))}
    available = sorted(
        {step_of_name[int(i)] for f in frames.values() for i in np.unique(ev.name[f.idx]) if int(i) in step_of_name}
    )
    steps = available if profiler_steps is None else [s for s in profiler_steps if s in available]
    if not steps:
        return {"stragglers": [], "note": "no ProfilerStep annotations to compare ranks by"}
    if len(frames) < 2:
        return {"stragglers": [], "note": "one rank: nothing to compare"}
    last, t_min, mean_iter = _last_comm_kernels(ev, frames, steps, min_normalized_duration)
    if last is None:
        return {"stragglers": [], "note": "no events inside the chosen ProfilerSteps"}
    if not last:
        return {"stragglers": [], "note": "no NCCL kernel (ncclKernel*) long enough to compare ranks by"}
    by_group: dict[tuple, list[float]] = {}
    for (_r, st, it, nm), (_, d) in last.items():
        by_group.setdefault((st, it, nm), []).append(d / mean_iter)
    spread: dict[tuple, list[float]] = {}
    for (st, _it, nm), ds in sorted(by_group.items()):
        if len(ds) > 1:
            spread.setdefault((st, nm), []).append(float(np.std(ds, ddof=1)))
    if not spread:
        return {"stragglers": [], "note": "no NCCL kernel that several ranks ran in the same step"}
    stream, name = max(sorted(spread), key=lambda k: np.mean(spread[k]))
    metric = sorted(
        ((r, it, (ts - t_min) / mean_iter) for (r, st, it, nm), (ts, _) in last.items() if st == stream and nm == name),
        key=lambda x: (x[1], x[0]),
    )
    counts = _late_start_counts(metric, num_candidates)
    ranked = sorted(counts, key=lambda r: (-counts[r], r))
    return {
        "stragglers": ranked[:num_candidates],
        "counts": counts,
        "kernel": ev.names[name],
        "stream": stream,
        "steps": steps,
        "metric": {
            "rank": [m[0] for m in metric],
            "step": [m[1] for m in metric],
            "normalized_start": [m[2] for m in metric],
        },
    }


def _last_comm_kernels(
    ev: TraceEvents, frames: dict[int, Frame], steps: list[int], min_normalized_duration: float
) -> tuple[dict[tuple, tuple[float, float]] | None, float, float]:
    """The last NCCL kernel of each (rank, stream, step, name) at least
    `min_normalized_duration` of the mean step long: {key: (start, duration)}, with the
    first start and the mean step time (None for the kernels: no event in `steps`)."""
    comm_names = np.array([n.startswith("ncclKernel") for n in ev.names] or [False], dtype=bool)
    parts = [(r, f, np.flatnonzero(np.isin(f.iteration, steps))) for r, f in frames.items()]
    if not any(len(m) for _, _, m in parts):
        return None, 0.0, 0.0
    t_min = min(float(f.ts[m].min()) for _, f, m in parts if len(m))
    t_max = max(float((f.ts[m] + f.dur[m]).max()) for _, f, m in parts if len(m))
    n_iters = len({int(x) for _, f, m in parts for x in np.unique(f.iteration[m])})
    mean_iter = (t_max - t_min) / float(n_iters)
    min_dur = mean_iter * min_normalized_duration
    last: dict[tuple, tuple[float, float]] = {}
    for r, f, m in parts:
        stream = ev.stream[f.idx[m]]
        name = ev.name[f.idx[m]]
        sel = (stream > 0) & (f.iteration[m] > 0) & (f.dur[m] >= min_dur) & comm_names[name]
        for j in np.flatnonzero(sel).tolist():  # frame order: the last one wins
            row = m[j]
            last[(r, int(stream[j]), int(f.iteration[row]), int(name[j]))] = (float(f.ts[row]), float(f.dur[row]))
    return last, t_min, mean_iter


def _late_start_counts(metric: list[tuple], num_candidates: int) -> dict[int, int]:
    """Per rank: the steps where it is among the `num_candidates` latest starters."""
    counts: dict[int, int] = {}
    for it in sorted({m[1] for m in metric}):
        group = [m for m in metric if m[1] == it]
        values = sorted((m[2] for m in group), reverse=True)
        threshold = values[min(num_candidates, len(values)) - 1]
        for r, _, v in group:
            counts[r] = counts.get(r, 0) + (1 if v >= threshold else 0)
    return counts
