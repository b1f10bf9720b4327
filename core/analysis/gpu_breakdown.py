"""HTA's communication/computation overlap, kernel breakdown and per-ProfilerStep
temporal and idle breakdowns, on the `gpu_events` columns (core/analysis/gpu_timeline.py).
Each function names the HTA call it reproduces and its rules."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from core.analysis.gpu_frames import (
    KERNEL_TYPES,
    Events,
    compute_mask,
    name_codes,
    type_codes,
)
from core.analysis.gpu_intervals import dense_codes, merge_by_group, union_by_group
from core.analysis.gpu_kinds import GpuKind
from core.analysis.gpu_timeline import (
    StepWindows,
    event_times,
    hta_window_mask,
    idle_breakdown,
    subset_events,
    temporal_breakdown,
)

# --- communication / computation overlap (gpu_events) ----------------------------------


def comm_comp_overlap(
    events: Events,
    step_windows: StepWindows | None = None,
    *,
    names: Sequence[str] | Mapping[int, str] | None = None,
    hta_compat: bool = True,
) -> dict[str, np.ndarray]:
    """Per rank, the share of communication time during which computation also ran
    (HTA get_comm_comp_overlap): time when both a communication kernel (NCCL) and a
    computation kernel run / the union of communication kernels, in percent.

    Columns: rank, comm_us (union of communication), comp_us (union of computation),
    overlap_us, comm_comp_overlap_pct (NaN when the rank has no communication).
    """
    compute = compute_mask(events, names)
    comm = np.asarray(events["kind"]) == GpuKind.COMMUNICATION
    if hta_compat:
        keep = hta_window_mask(events, step_windows)
        events, compute, comm = subset_events(events, keep), compute[keep], comm[keep]
    rank = np.asarray(events["rank"], dtype=np.int64)
    codes, (ranks,) = dense_codes(rank)
    n = len(ranks)
    start, end = event_times(events, hta_compat)
    a = union_by_group(codes[comm], start[comm], end[comm], n).busy
    b = union_by_group(codes[compute], start[compute], end[compute], n).busy
    both = comm | compute
    ab = union_by_group(codes[both], start[both], end[both], n).busy
    overlap = a + b - ab
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(a > 0, 100.0 * overlap / a, np.nan)
    return {
        "rank": ranks.astype(np.int64),
        "comm_us": a,
        "comp_us": b,
        "overlap_us": overlap,
        "comm_comp_overlap_pct": pct,
    }


# --- kernel breakdown (gpu_events) ------------------------------------------------------


def gpu_kernel_breakdown(
    events: Events,
    step_windows: StepWindows | None = None,
    *,
    names: Sequence[str] | Mapping[int, str] | None = None,
    duration_ratio: float = 0.8,
    num_kernels: int = 10,
    include_memory_kernels: bool = True,
) -> dict[str, dict]:
    """HTA get_gpu_kernel_breakdown on HTA's window (rounded times).

    ``by_type``: kernel_type (COMPUTATION, COMMUNICATION, MEMORY and "A overlapping B"
    for times when several types ran together), sum_us over all ranks, percentage (of
    the summed busy time; HTA rounds it to 0.1).
    ``kernels``: per rank and type, the kernels by summed duration: name, rank,
    kernel_type, sum_us, max_us, min_us, mean_us, std_us (sample std, 0 for one event);
    beyond `num_kernels` kernels, those past the `duration_ratio` quantile of the
    cumulative sum (or past rank `num_kernels`) fold into "others", whose statistics
    are — as in HTA — taken over the folded kernels' sums.
    """
    keep = hta_window_mask(events, step_windows)
    codes_all, distinct = name_codes(events, names)
    sub = subset_events(events, keep)
    name_codes_kept = codes_all[keep]
    start, end = event_times(sub, True)
    dur = end - start
    type_of_name = type_codes(distinct, np.arange(len(distinct))) if distinct else np.zeros(0, np.int8)
    ktype = type_of_name[name_codes_kept] if len(name_codes_kept) else np.zeros(0, np.int8)
    rank = np.asarray(sub["rank"], dtype=np.int64)
    analysed = ["COMPUTATION", "COMMUNICATION"] + (["MEMORY"] if include_memory_kernels else [])

    totals: dict[str, float] = {}
    rows: dict[str, list] = {
        k: [] for k in ("name", "rank", "kernel_type", "sum_us", "max_us", "min_us", "mean_us", "std_us")
    }
    for r in np.unique(rank).tolist():
        in_rank = rank == r
        # sweep: bit per analysed type over its merged intervals
        bounds_t, bounds_d = [], []
        for bit, kt in enumerate(analysed):
            m = in_rank & (ktype == KERNEL_TYPES.index(kt))
            _, s_, e_ = merge_by_group(np.zeros(int(m.sum()), np.int64), start[m], end[m])
            bounds_t += [s_, e_]
            bounds_d += [np.full(len(s_), 1 << bit), np.full(len(e_), -(1 << bit))]
        t = np.concatenate(bounds_t) if bounds_t else np.zeros(0)
        d = np.concatenate(bounds_d) if bounds_d else np.zeros(0, np.int64)
        order = np.argsort(t, kind="stable")
        t, d = t[order], d[order]
        running = np.cumsum(d)
        length = np.r_[np.diff(t), 0.0]
        for mask_value in np.unique(running[running > 0]).tolist():
            label = " overlapping ".join(kt for bit, kt in enumerate(analysed) if mask_value & (1 << bit))
            totals[label] = totals.get(label, 0.0) + float(length[running == mask_value].sum())
        for kt in analysed:
            m = np.flatnonzero(in_rank & (ktype == KERNEL_TYPES.index(kt)))
            if not len(m):
                continue
            aggregate_kernels(rows, name_codes_kept[m], distinct, dur[m], r, kt, num_kernels, duration_ratio)
    grand = sum(totals.values())
    by_type = sorted(totals.items(), key=lambda kv: -kv[1])
    return {
        "by_type": {
            "kernel_type": [k for k, _ in by_type],
            "sum_us": np.array([v for _, v in by_type], dtype=np.float64),
            "percentage": np.array([100.0 * v / grand if grand else np.nan for _, v in by_type]),
        },
        "kernels": {k: (np.asarray(v) if k not in ("name", "kernel_type") else v) for k, v in rows.items()},
    }


def aggregate_kernels(
    rows: dict[str, list],
    name_code: np.ndarray,
    table: Sequence[str],
    dur: np.ndarray,
    rank: int,
    kind: str,
    num_kernels: int,
    duration_ratio: float,
    allow: Collection[str] = (),
) -> None:
    """HTA _aggr_gpu_kernel_time for one (rank, type): appends to `rows`. `name_code`
    indexes `table` (the names)."""
    used, codes = np.unique(np.asarray(name_code, dtype=np.int64), return_inverse=True)
    codes = codes.reshape(-1)
    distinct = np.array([table[i] for i in used.tolist()], dtype=object)
    k = len(distinct)
    cnt = np.bincount(codes, minlength=k)
    sums = np.bincount(codes, weights=dur, minlength=k)
    mx = np.full(k, -np.inf)
    mn = np.full(k, np.inf)
    np.maximum.at(mx, codes, dur)
    np.minimum.at(mn, codes, dur)
    mean = sums / cnt
    sq = np.bincount(codes, weights=(dur - mean[codes]) ** 2, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.where(cnt > 1, np.sqrt(sq / (cnt - 1)), 0.0)
    order = np.argsort(-sums, kind="stable")
    distinct, sums, mx, mn, mean, std = distinct[order], sums[order], mx[order], mn[order], mean[order], std[order]
    out_name = list(distinct)
    if k > num_kernels:
        keep = np.array([n in allow for n in distinct], dtype=bool)
        cum = np.cumsum(sums)
        q = float(np.quantile(cum, duration_ratio))
        fold = ~keep & ((cum > q) | (np.arange(k) >= num_kernels))
        kept = np.flatnonzero(~fold)
        folded = np.flatnonzero(fold)
        out = [(distinct[i], sums[i], sums[i], sums[i], sums[i], 0.0) for i in kept]
        if len(folded):
            s = sums[folded]
            out.append(("others", s.sum(), s.max(), s.min(), s.mean(), float(np.std(s, ddof=1)) if len(s) > 1 else 0.0))
        # HTA re-aggregates the sums by name: a kept kernel's stats become its sum
        out.sort(key=lambda x: x[0])
        for name, a, b, c, d, e in out:
            _append(rows, name, rank, kind, a, b, c, d, e)
        return
    for i in range(k):
        _append(rows, out_name[i], rank, kind, sums[i], mx[i], mn[i], mean[i], std[i])


def _append(
    rows: dict[str, list], name: str, rank: int, kind: str, s: float, mx: float, mn: float, mean: float, std: float
) -> None:
    rows["name"].append(str(name))
    rows["rank"].append(int(rank))
    rows["kernel_type"].append(kind)
    rows["sum_us"].append(float(s))
    rows["max_us"].append(float(mx))
    rows["min_us"].append(float(mn))
    rows["mean_us"].append(float(mean))
    rows["std_us"].append(float(std))


# --- per ProfilerStep (gpu_events) ------------------------------------------------------


def per_step_breakdowns(
    events: Events,
    step_windows: StepWindows | None = None,
    *,
    names: Sequence[str] | Mapping[int, str] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """The temporal and idle breakdowns of each ProfilerStep (the HTA functions applied
    to each iteration's events, HTA's window kept: the last step, which HTA drops, has no
    row). ``temporal``: step + the temporal_breakdown columns; ``idle``: step + the
    idle_breakdown columns."""
    step = np.asarray(events["step"], dtype=np.int64)
    keep = hta_window_mask(events, step_windows)
    # HTA's compute rule decided once; each step's subset then carries it in `kind`
    # (3 = a GPU event HTA does not count as computation), so no names are needed
    kind = np.asarray(events["kind"]).astype(np.int8)
    hta_kind = np.where(
        compute_mask(events, names), np.int8(GpuKind.COMPUTE), np.where(kind == GpuKind.COMPUTE, np.int8(3), kind)
    )
    base = {k: np.asarray(v) for k, v in events.items() if k not in ("name", "name_id")}
    base["kind"] = hta_kind
    order = np.argsort(step, kind="stable")
    sorted_steps = step[order]
    out_t: dict[str, list] = {}
    out_i: dict[str, list] = {}
    for s in np.unique(step[keep & (step >= 0)]).tolist():
        lo, hi = np.searchsorted(sorted_steps, [s, s + 1])
        rows_s = order[lo:hi]
        rows_s = np.sort(rows_s[keep[rows_s]])
        sub = {k: v[rows_s] for k, v in base.items()}
        # one step: the window rule keeps everything; rounding still applies
        t = temporal_breakdown(sub, None, hta_compat=True)
        i = idle_breakdown(sub, None, hta_compat=True)
        for table, part in ((out_t, t), (out_i, i)):
            n = len(next(iter(part.values())))
            table.setdefault("step", []).append(np.full(n, s, dtype=np.int64))
            for k, v in part.items():
                table.setdefault(k, []).append(np.asarray(v))
    return {
        "temporal": {k: np.concatenate(v) for k, v in out_t.items()},
        "idle": {k: np.concatenate(v) for k, v in out_i.items()},
    }
