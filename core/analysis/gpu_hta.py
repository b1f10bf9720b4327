"""The rest of Holistic Trace Analysis (HTA 0.5.0), reproduced on columns.

Two inputs:
- `events`: the `gpu_events` columns (GPU side only; see core/analysis/gpu_timeline.py)
  for communication/computation overlap, the kernel breakdown and per-ProfilerStep
  temporal and idle breakdowns;
- `TraceEvents` (core/analysis/gpu_events.py: every event of the trace) for the CUDA
  queue length, time blocked on a full launch queue, kernel-launch statistics, the
  memory-bandwidth summary and the user-annotation breakdown, which need CPU-side events.

HTA's view of a trace is rebuilt by `hta_frames`: the events with a `dur` and a `cat`
(not "Trace", not python_function), timestamps rounded inward (start up, end down, as
`round_down_time_stamps`), and — when a rank has two or more ProfilerStep annotations —
the window of `_filter_irrelevant_gpu_kernels`: CPU-side events starting before the last
ProfilerStep starts, and GPU events (stream >= 0 and correlation >= 0) whose correlation
matches one of those CPU events (an inner join: a GPU event matched by two CPU events
counts twice, as in HTA). Each function names the HTA call it reproduces and its rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.analysis.gpu_events import PH_COMPLETE, TraceEvents
from core.analysis.gpu_intervals import dense_codes, merge_by_group, union_by_group
from core.analysis.gpu_kinds import GpuKind
from core.analysis.gpu_timeline import (
    _subset,
    _times,
    event_names,
    hta_window_mask,
    idle_breakdown,
    temporal_breakdown,
)

Events = Mapping[str, "np.ndarray | list"]

# get_runtime_launch_events_query: CUDA / HIP / MTIA calls that enqueue GPU work
RUNTIME_LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "runFunction - job_prep_and_submit_for_execution",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipMemsetAsync",
        "hipMemcpyAsync",
        "hipMemcpyWithStream",
    }
)
# cuda_kernel_launch_stats: kernel launches, plus memcpy / memset with include_memory_events
LAUNCH_KERNEL_NAMES = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "runFunction - job_prep_and_submit_for_execution"}
)
LAUNCH_MEMORY_NAMES = frozenset({"cudaMemcpyAsync", "cudaMemsetAsync"})
CUDA_MAX_LAUNCH_QUEUE_PER_STREAM = 1024
SYNC_NAMES = frozenset({"Event Sync", "Context Sync"})

_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
KERNEL_TYPES = ("COMMUNICATION", "MEMORY", "COMPUTATION", "OTHER")


def hta_kernel_type(name: str) -> str:
    """HTA's get_kernel_type."""
    if _COMM.match(name):
        return "COMMUNICATION"
    if _MEMORY.match(name):
        return "MEMORY"
    if _NOT_COMPUTE.match(name) is None:
        return "COMPUTATION"
    return "OTHER"


def memory_kernel_type(name: str) -> str:
    """HTA's get_memory_kernel_type: "Memset", "Memcpy DtoH", ... or "Memcpy Unknown"."""
    if name[:6] == "Memset":
        return "Memset"
    if name[:6] != "Memcpy":
        return "Memcpy Unknown"
    return name[:11]


def _type_codes(names: Sequence[str], codes: np.ndarray) -> np.ndarray:
    """KERNEL_TYPES index of each event, from the distinct names' types."""
    table = np.array([KERNEL_TYPES.index(hta_kernel_type(n)) for n in names] or [0], dtype=np.int8)
    return table[codes]


# --- HTA's view of a trace -------------------------------------------------------------


@dataclass
class Frame:
    """One rank's events as HTA keeps them (indices into the TraceEvents, rounded times)."""

    rank: int
    idx: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    gpu: np.ndarray  # stream != -1 (HTA's "GPU kernels" in most analyses)
    iteration: np.ndarray

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.ts


def hta_frames(ev: TraceEvents, *, include_last_step: bool = False, window: bool = True) -> dict[int, Frame]:
    """Per rank, the events HTA's TraceAnalysis keeps (see the module docstring);
    `window=False`: every parsed event, as HTA's TraceDiff sees a trace."""
    cats_bad = {i for i, c in enumerate(ev.cats) if c in ("", "Trace", "python_function")}
    bad = np.array([i in cats_bad for i in range(len(ev.cats))] or [False], dtype=bool)
    base = ~np.isnan(ev.dur) & ~bad[ev.cat] & ~np.isnan(ev.ts)
    step_name = np.array(["ProfilerStep" in n for n in ev.names] or [False], dtype=bool)
    step_num = np.full(max(len(ev.names), 1), -1, dtype=np.int64)
    for i, n in enumerate(ev.names):
        m = re.match(r"ProfilerStep\s*#\s*(\d+)", n)
        if m:
            step_num[i] = int(m.group(1))
    sync = ev.name_mask(SYNC_NAMES)
    n_step_symbols = int(step_name[: len(ev.names)].sum())
    frames = {}
    for r in ev.ranks():
        idx = np.flatnonzero(base & (ev.rank == r))
        ts0 = ev.ts[idx]
        ts = np.ceil(ts0)
        end = np.floor(ts0 + ev.dur[idx])
        stream = ev.stream[idx]
        corr = ev.correlation[idx]
        gpu_filter = ((stream >= 0) & (corr >= 0)) | sync[idx]
        names = ev.name[idx]
        is_step = ~gpu_filter & step_name[names]
        # iteration (add_iteration): CPU-side events by the enclosing ProfilerStep, GPU
        # events by their correlated CPU event
        iteration = np.full(len(idx), -1, dtype=np.int64)
        steps_here = np.flatnonzero(is_step & (step_num[names] >= 0))
        cpu_side = stream < 0
        for j in steps_here.tolist():  # file order: a later step annotation wins, as in HTA
            inside = cpu_side & (ts >= ts[j]) & (ts < ts[j] + (end[j] - ts[j]))
            iteration[inside] = step_num[names[j]]
        keep_rows = np.arange(len(idx))
        if window and n_step_symbols >= 2 and is_step.any():
            last_start = ts[is_step].max()
            last_end = end[is_step].max()
            cpu_ok = ~gpu_filter & ((ts <= last_end) if include_last_step else (ts < last_start))
            cpu_rows = np.flatnonzero(cpu_ok)
            # inner join of GPU events with the kept CPU events on correlation
            keys, counts = np.unique(corr[cpu_rows], return_counts=True)
            g_rows = np.flatnonzero(gpu_filter)
            pos = np.searchsorted(keys, corr[g_rows])
            pos = np.clip(pos, 0, max(len(keys) - 1, 0))
            hit = (len(keys) > 0) & (keys[pos] == corr[g_rows]) if len(keys) else np.zeros(len(g_rows), bool)
            mult = np.where(hit, counts[pos] if len(keys) else 0, 0)
            keep_rows = np.r_[np.repeat(g_rows, mult), cpu_rows]
        # GPU iteration = iteration of a CPU event with the same correlation
        cpu_corr = np.flatnonzero(cpu_side & (corr > 0))
        if len(cpu_corr):
            order = np.argsort(corr[cpu_corr], kind="stable")
            keys = corr[cpu_corr][order]
            its = iteration[cpu_corr][order]
            gsel = np.flatnonzero(~cpu_side)
            pos = np.clip(np.searchsorted(keys, corr[gsel]), 0, len(keys) - 1)
            ok = keys[pos] == corr[gsel]
            iteration[gsel[ok]] = its[pos[ok]]
        frames[r] = Frame(
            rank=r,
            idx=idx[keep_rows],
            ts=ts[keep_rows],
            end=end[keep_rows],
            gpu=(stream != -1)[keep_rows],
            iteration=iteration[keep_rows],
        )
    return frames


def name_codes(events: Events, names=None) -> tuple[np.ndarray, list[str]]:
    """(code per event, distinct names): `name_id` and the lookup when the events carry
    them (no per-event string list is built), else the interned `name` column."""
    if "name_id" in events and names is not None and "name" not in events:
        ids = np.asarray(events["name_id"], dtype=np.int64)
        if isinstance(names, Mapping):
            top = int(ids.max()) + 1 if len(ids) else 0
            table = [names.get(i, "") for i in range(top)]
        else:
            table = list(names)
        return ids, table
    values = event_names(events, names)
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int64, len(values))
    return codes, list(index)


def compute_mask(events: Events, names=None) -> np.ndarray:
    """HTA's COMPUTATION kernels (as hta_compute_mask), decided once per distinct name."""
    kind = np.asarray(events["kind"])
    try:
        codes, table = name_codes(events, names)
    except KeyError:
        return kind == GpuKind.COMPUTE
    not_compute = np.array([_NOT_COMPUTE.match(n) is not None for n in table] or [False], dtype=bool)
    return (kind == GpuKind.COMPUTE) & ~not_compute[codes] if len(codes) else kind == GpuKind.COMPUTE


# --- communication / computation overlap (gpu_events) ----------------------------------


def comm_comp_overlap(
    events: Events,
    step_windows=None,
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
        events, compute, comm = _subset(events, keep), compute[keep], comm[keep]
    rank = np.asarray(events["rank"], dtype=np.int64)
    codes, (ranks,) = dense_codes(rank)
    n = len(ranks)
    start, end = _times(events, hta_compat)
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
    step_windows=None,
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
    sub = _subset(events, keep)
    name_codes_kept = codes_all[keep]
    start, end = _times(sub, True)
    dur = end - start
    type_of_name = _type_codes(distinct, np.arange(len(distinct))) if distinct else np.zeros(0, np.int8)
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
            _aggregate_kernels(rows, name_codes_kept[m], distinct, dur[m], r, kt, num_kernels, duration_ratio)
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


def _aggregate_kernels(rows, name_code, table, dur, rank, kind, num_kernels, duration_ratio, allow=()) -> None:
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


def _append(rows, name, rank, kind, s, mx, mn, mean, std) -> None:
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
    step_windows=None,
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


# --- CUDA queue length (TraceEvents) ----------------------------------------------------


def queue_length(
    ev: TraceEvents,
    frames: dict[int, Frame] | None = None,
    *,
    max_queue_length: int = CUDA_MAX_LAUNCH_QUEUE_PER_STREAM,
) -> dict[str, dict[str, np.ndarray]]:
    """Outstanding GPU operations per (rank, stream) (HTA get_queue_length_time_series /
    _summary, get_time_spent_blocked_on_full_queue).

    The series steps +1 at each runtime launch call (cudaLaunchKernel, cudaMemcpyAsync,
    ... with correlation > 0) whose correlated GPU event runs on the stream, and -1 when
    that GPU event starts; HTA summarises its values at those change points (not
    time-weighted): ``summary``: rank, stream, count, mean, std, min, p25, p50, p75, max.
    ``blocked``: rank, stream, duration_at_max_us (time the queue stood at
    `max_queue_length` or more), relative_duration (of the rank's trace duration, first to
    last event start); only streams that reached it.
    """
    frames = frames if frames is not None else hta_frames(ev)
    launch_name = ev.name_mask(RUNTIME_LAUNCH_NAMES)
    summary: dict[str, list] = {
        k: [] for k in ("rank", "stream", "count", "mean", "std", "min", "p25", "p50", "p75", "max")
    }
    blocked: dict[str, list] = {k: [] for k in ("rank", "stream", "duration_at_max_us", "relative_duration")}
    for r, f in frames.items():
        corr = ev.correlation[f.idx]
        stream = ev.stream[f.idx]
        rt = np.flatnonzero(launch_name[f.idx] & (corr > 0) & ~f.gpu)
        gk = np.flatnonzero(f.gpu)
        # +1 rows: runtime calls, joined to the GPU event's stream (first match by correlation)
        g_order = gk[np.argsort(corr[gk], kind="stable")]
        keys = corr[g_order]
        pos = np.clip(np.searchsorted(keys, corr[rt]), 0, max(len(keys) - 1, 0))
        found = (keys[pos] == corr[rt]) if len(keys) else np.zeros(len(rt), bool)
        plus_stream = np.where(found, stream[g_order[pos]] if len(keys) else -1, -1)
        # -1 rows: GPU events whose correlation has a runtime launch call
        minus = gk[np.isin(corr[gk], corr[rt])]
        t = np.r_[f.ts[rt], f.ts[minus]]
        s = np.r_[plus_stream, stream[minus]]
        d = np.r_[np.ones(len(rt), np.int64), -np.ones(len(minus), np.int64)]
        ok = np.r_[found, np.ones(len(minus), dtype=bool)]
        # HTA sorts the concatenation (launches, then GPU events) by ts with pandas'
        # default quicksort, and equal timestamps keep that sort's order: sort the same
        # array the same way so ties resolve identically.
        order = _hta_sort(t)
        t, s, d, ok = t[order], s[order], d[order], ok[order]
        # NaN streams (runtime calls without a GPU event) are dropped by HTA's groupby
        t, s, d = t[ok], s[ok], d[ok]
        trace_dur = float(f.ts.max() - f.ts.min()) if len(f.ts) else np.nan
        for st in np.unique(s).tolist():
            m = s == st
            tt, q = t[m], np.cumsum(d[m])
            summary["rank"].append(r)
            summary["stream"].append(int(st))
            summary["count"].append(len(q))
            summary["mean"].append(float(q.mean()))
            summary["std"].append(float(q.std(ddof=1)) if len(q) > 1 else np.nan)
            summary["min"].append(float(q.min()))
            for key, p in (("p25", 25), ("p50", 50), ("p75", 75)):
                summary[key].append(float(np.percentile(q, p)))
            summary["max"].append(float(q.max()))
            full = q >= max_queue_length
            if full.any():
                dur = np.r_[np.diff(tt), np.nan]
                at_max = float(np.nansum(dur[full]))
                blocked["rank"].append(r)
                blocked["stream"].append(int(st))
                blocked["duration_at_max_us"].append(at_max)
                blocked["relative_duration"].append(at_max / trace_dur if trace_dur else np.nan)
    return {
        "summary": {k: np.asarray(v) for k, v in summary.items()},
        "blocked": {k: np.asarray(v) for k, v in blocked.items()},
    }


# --- kernel launch statistics (TraceEvents) ---------------------------------------------


def _concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """concatenate(arange(s, s + n) for s, n in zip(starts, lengths)), without a loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    first = np.cumsum(lengths) - lengths  # where each range begins in the output
    return np.repeat(np.asarray(starts, dtype=np.int64) - first, lengths) + np.arange(total, dtype=np.int64)


def kernel_launch_stats(
    ev: TraceEvents,
    frames: dict[int, Frame] | None = None,
    *,
    runtime_cutoff_us: float = 50.0,
    launch_delay_cutoff_us: float = 100.0,
    include_memory_events: bool = True,
) -> dict[str, np.ndarray]:
    """Per rank, how the CPU launch calls relate to the GPU events they launch (HTA
    get_cuda_kernel_launch_stats): CPU runtime call and GPU event joined on correlation;
    cpu_duration = the call's duration, gpu_duration = the GPU event's, launch_delay =
    GPU start - call end (clipped at 0).

    Columns: rank, n_launches, launch_delay_median_us, launch_delay_p95_us,
    launch_delay_mean_us, cpu_duration_median_us / _mean_us, gpu_duration_median_us /
    _mean_us, and HTA's outlier counts: n_gpu_shorter_than_cpu (GPU event shorter than
    its launch call), n_runtime_outliers (call longer than `runtime_cutoff_us`),
    n_launch_delay_outliers (delay above `launch_delay_cutoff_us`).
    """
    frames = frames if frames is not None else hta_frames(ev)
    wanted = set(LAUNCH_KERNEL_NAMES) | (set(LAUNCH_MEMORY_NAMES) if include_memory_events else set())
    launch_name = ev.name_mask(wanted)
    cols: dict[str, list] = {}
    for r, f in frames.items():
        corr = ev.correlation[f.idx]
        ids = np.unique(corr[launch_name[f.idx]])
        dur = f.dur
        cpu = np.flatnonzero(~f.gpu & np.isin(corr, ids))
        gpu = np.flatnonzero(f.gpu & np.isin(corr, ids))
        # inner merge on correlation (all pairs)
        g_order = gpu[np.argsort(corr[gpu], kind="stable")]
        keys = corr[g_order]
        lo = np.searchsorted(keys, corr[cpu], side="left")
        hi = np.searchsorted(keys, corr[cpu], side="right")
        n_pairs = hi - lo
        ci = np.repeat(cpu, n_pairs)
        gi = g_order[_concat_ranges(lo, n_pairs)]
        cpu_d = dur[ci]
        gpu_d = dur[gi]
        delay = np.clip(f.ts[gi] - f.ts[ci] - cpu_d, 0, None)
        row = {
            "rank": r,
            "n_launches": len(ci),
            "launch_delay_median_us": _stat(np.median, delay),
            "launch_delay_p95_us": _stat(lambda x: np.quantile(x, 0.95), delay),
            "launch_delay_mean_us": _stat(np.mean, delay),
            "cpu_duration_median_us": _stat(np.median, cpu_d),
            "cpu_duration_mean_us": _stat(np.mean, cpu_d),
            "gpu_duration_median_us": _stat(np.median, gpu_d),
            "gpu_duration_mean_us": _stat(np.mean, gpu_d),
            "n_gpu_shorter_than_cpu": int((gpu_d < cpu_d).sum()),
            "n_runtime_outliers": int((cpu_d > runtime_cutoff_us).sum()),
            "n_launch_delay_outliers": int((delay > launch_delay_cutoff_us).sum()),
        }
        for k, v in row.items():
            cols.setdefault(k, []).append(v)
    return {k: np.asarray(v) for k, v in cols.items()}


def _hta_sort(t: np.ndarray) -> np.ndarray:
    """The permutation pandas' sort_values(by="ts") gives (numpy quicksort, which is
    not stable: ties come out in the order HTA's results depend on)."""
    return np.argsort(np.asarray(t, dtype=np.float64), kind="quicksort")


def _codes_of(values: list[str]) -> tuple[np.ndarray, list[str]]:
    table: dict[str, int] = {}
    codes = np.fromiter((table.setdefault(v, len(table)) for v in values), np.int64, len(values))
    return codes, list(table)


def _stat(fn, x: np.ndarray) -> float:
    return float(fn(x)) if len(x) else float("nan")


# --- memory bandwidth (TraceEvents) -----------------------------------------------------


def memory_bw_summary(ev: TraceEvents, frames: dict[int, Frame] | None = None) -> dict[str, np.ndarray]:
    """Memcpy / memset bandwidth per rank and copy kind (HTA get_memory_bw_summary).

    HTA builds a step series per kind (Memcpy DtoH / HtoD / DtoD / ..., Memset): +bandwidth
    (the event's "memory bandwidth (GB/s)" arg) at each start, -bandwidth at each end (a
    0 us event lasts 1 us), and summarises the positive values of its running sum.
    Columns: rank, name, count, mean, std, min, p25, p50, p75, max (GB/s).
    """
    frames = frames if frames is not None else hta_frames(ev)
    is_memory = np.array([hta_kernel_type(n) == "MEMORY" for n in ev.names] or [False], dtype=bool)
    mem_type = [memory_kernel_type(n) for n in ev.names]
    out: dict[str, list] = {k: [] for k in ("rank", "name", "count", "mean", "std", "min", "p25", "p50", "p75", "max")}
    for r, f in frames.items():
        rows = np.flatnonzero(f.gpu & is_memory[ev.name[f.idx]])
        if not len(rows):
            continue
        kinds = [mem_type[i] for i in ev.name[f.idx[rows]].tolist()]
        bw = ev.bandwidth_gbps[f.idx[rows]]
        bw = np.where(np.isnan(bw), -1.0, bw)  # HTA's default for a missing arg
        ts = f.ts[rows]
        dur = f.dur[rows]
        dur = np.where(dur == 0, 1, dur)
        kind_codes, kind_names = _codes_of(kinds)
        # HTA: starts then ends, sorted together by ts (quicksort), then per kind a cumsum
        t = np.r_[ts, ts + dur]
        v = np.r_[bw, -bw]
        k_all = np.r_[kind_codes, kind_codes]
        order = _hta_sort(t)
        v, k_all = v[order], k_all[order]
        for code in np.argsort(kind_names, kind="stable").tolist():
            kind = kind_names[code]
            series = np.cumsum(v[k_all == code])
            pos = series[series > 0]
            if not len(pos):
                continue
            out["rank"].append(r)
            out["name"].append(kind)
            out["count"].append(len(pos))
            out["mean"].append(float(pos.mean()))
            out["std"].append(float(pos.std(ddof=1)) if len(pos) > 1 else np.nan)
            out["min"].append(float(pos.min()))
            for key, p in (("p25", 25), ("p50", 50), ("p75", 75)):
                out[key].append(float(np.percentile(pos, p)))
            out["max"].append(float(pos.max()))
    table: dict[str, Any] = {k: (v if k == "name" else np.asarray(v)) for k, v in out.items()}
    return table


# --- user annotations (TraceEvents) -----------------------------------------------------


def user_annotation_breakdown(
    ev: TraceEvents,
    frames: dict[int, Frame] | None = None,
    *,
    use_gpu_annotation: bool = True,
    duration_ratio: float = 0.8,
    num_kernels: int = 1000,
) -> dict[str, np.ndarray | list]:
    """Time per user annotation and rank (HTA get_gpu_user_annotation_breakdown): the
    gpu_user_annotation events (the annotation's span on the GPU timeline), or the CPU
    user_annotation events with use_gpu_annotation=False, summed by name.
    Columns: rank, name, sum_us, max_us, min_us, mean_us, std_us (HTA's folding into
    "others" beyond `num_kernels` names)."""
    frames = frames if frames is not None else hta_frames(ev)
    cat = ev.cat_id("gpu_user_annotation" if use_gpu_annotation else "user_annotation")
    rows: dict[str, list] = {
        k: [] for k in ("name", "rank", "kernel_type", "sum_us", "max_us", "min_us", "mean_us", "std_us")
    }
    if cat < 0:
        return {k: v for k, v in rows.items() if k != "kernel_type"}
    for r, f in frames.items():
        m = np.flatnonzero(ev.cat[f.idx] == cat)
        if not len(m):
            continue
        _aggregate_kernels(rows, ev.name[f.idx[m]], ev.names, f.dur[m], r, "", num_kernels, duration_ratio)
    order = sorted(range(len(rows["name"])), key=lambda i: (rows["rank"][i], rows["name"][i]))
    return {
        k: ([rows[k][i] for i in order] if k == "name" else np.asarray([rows[k][i] for i in order]))
        for k in rows
        if k != "kernel_type"
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
    comm_names = np.array([n.startswith("ncclKernel") for n in ev.names] or [False], dtype=bool)
    parts = []
    for r, f in frames.items():
        parts.append((r, f, np.flatnonzero(np.isin(f.iteration, steps))))
    if not any(len(m) for _, _, m in parts):
        return {"stragglers": [], "note": "no events inside the chosen ProfilerSteps"}
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
    counts: dict[int, int] = {}
    for it in sorted({m[1] for m in metric}):
        group = [m for m in metric if m[1] == it]
        values = sorted((m[2] for m in group), reverse=True)
        threshold = values[min(num_candidates, len(values)) - 1]
        for r, _, v in group:
            counts[r] = counts.get(r, 0) + (1 if v >= threshold else 0)
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


# --- trace diff (TraceEvents x 2) ---------------------------------------------------------


def iterations(ev: TraceEvents) -> list[int]:
    """ProfilerStep numbers named in the trace, sorted (HTA LabeledTrace.iterations)."""
    out = set()
    for n in ev.names:
        m = re.match(r"ProfilerStep\s*#\s*(\d+)", n)
        if m:
            out.add(int(m.group(1)))
    return sorted(out)


def ops_summary(
    ev: TraceEvents,
    rank: int | Sequence[int] | None = None,
    iteration: int | Sequence[int] | None = None,
    device: str = "all",
) -> dict[str, tuple[int, float]]:
    """{name: (count, total duration us)} of the ops and kernels of the chosen ranks and
    ProfilerSteps (HTA LabeledTrace.extract_ops + get_ops_summary; defaults: the first
    rank and the first step; device "cpu" = stream -1, "gpu" = the rest)."""
    frames = hta_frames(ev, window=False)
    ranks = sorted(frames) if rank is None else None
    if ranks:
        chosen_ranks = [ranks[0]]
    elif rank is None:
        chosen_ranks = []
    else:
        chosen_ranks = [rank] if isinstance(rank, int) else list(rank)
    its = iterations(ev)
    chosen_its = its[:1] if iteration is None else ([iteration] if isinstance(iteration, int) else list(iteration))
    counts: dict[int, int] = {}
    sums: dict[int, float] = {}
    for r in chosen_ranks:
        if r not in frames:
            raise ValueError(f"rank {r} is not in the trace (ranks: {sorted(frames)})")
        f = frames[r]
        m = np.isin(f.iteration, chosen_its)
        if device == "cpu":
            m &= ~f.gpu
        elif device == "gpu":
            m &= f.gpu
        name = ev.name[f.idx[m]]
        dur = f.dur[m]
        c = np.bincount(name, minlength=len(ev.names))
        t = np.bincount(name, weights=dur, minlength=len(ev.names))
        for i in np.flatnonzero(c).tolist():
            counts[i] = counts.get(i, 0) + int(c[i])
            sums[i] = sums.get(i, 0.0) + float(t[i])
    out: dict[str, tuple[int, float]] = {}
    for i, count in counts.items():
        label = ev.names[i]
        prev = out.get(label, (0, 0.0))
        out[label] = (prev[0] + count, prev[1] + sums[i])
    return out


_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def steps_by_position(a: dict, b: dict) -> tuple[dict, dict]:
    """The compared ProfilerStep annotations paired by position (the first step of A with
    the first of B, ...), named "ProfilerStep#550 / #551": two runs rarely profile the
    same step numbers, and "#550 deleted, #551 added" would lead the diff with noise."""

    def steps(d: dict) -> list[tuple[int, str]]:
        return sorted((int(m.group(1)), k) for k in d if (m := _PROFILER_STEP.match(k)))

    sa, sb = steps(a), steps(b)
    a, b = dict(a), dict(b)
    for (na, ka), (nb, kb) in zip(sa, sb):
        label = ka if na == nb else f"ProfilerStep#{na} / #{nb}"
        a[label], b[label] = a.pop(ka), b.pop(kb)
    return a, b


def trace_diff(
    control: TraceEvents,
    test: TraceEvents,
    *,
    control_rank: int | None = None,
    test_rank: int | None = None,
    control_iteration: int | None = None,
    test_iteration: int | None = None,
    device: str = "all",
    match_steps: bool = True,
) -> dict:
    """Ops and kernels added, removed and changed between two traces, in count and in
    time (HTA TraceDiff.compare_traces / ops_diff; the same defaults: first rank, first
    ProfilerStep of each). `match_steps`: the compared ProfilerStep annotations are
    paired by position (`steps_by_position`); False compares them by name, as HTA does.

    ``rows``: name, control_counts, test_counts, control_total_us, test_total_us,
    diff_counts, diff_duration_us, change ("+" more in test, "-" fewer, "=" same), sorted by
    name; ``ops_diff``: {added, deleted, increased, decreased, unchanged} name counts;
    ``control`` / ``test``: the ranks and steps compared.
    """
    a = ops_summary(control, control_rank, control_iteration, device)
    b = ops_summary(test, test_rank, test_iteration, device)
    if match_steps:
        a, b = steps_by_position(a, b)
    rows: dict[str, list] = {
        k: []
        for k in (
            "name",
            "control_counts",
            "test_counts",
            "control_total_us",
            "test_total_us",
            "diff_counts",
            "diff_duration_us",
            "change",
        )
    }
    groups = {"added": 0, "deleted": 0, "increased": 0, "decreased": 0, "unchanged": 0}
    for name in sorted(set(a) | set(b)):
        ca, ta = a.get(name, (0, 0.0))
        cb, tb = b.get(name, (0, 0.0))
        d = cb - ca
        rows["name"].append(name)
        rows["control_counts"].append(ca)
        rows["test_counts"].append(cb)
        rows["control_total_us"].append(ta)
        rows["test_total_us"].append(tb)
        rows["diff_counts"].append(d)
        rows["diff_duration_us"].append(tb - ta)
        rows["change"].append("+" if d > 0 else "-" if d < 0 else "=")
        if ca == 0 and cb > 0:
            groups["added"] += 1
        if ca > 0 and cb == 0:
            groups["deleted"] += 1
        if ca > 0 and d > 0:
            groups["increased"] += 1
        if cb > 0 and d < 0:
            groups["decreased"] += 1
        if cb > 0 and d == 0:
            groups["unchanged"] += 1

    def chosen(ev, rank, iteration):
        return {
            "rank": ev.ranks()[0] if rank is None else rank,
            "step": (iterations(ev)[:1] or [None])[0] if iteration is None else iteration,
        }

    return {
        "rows": rows,
        "ops_diff": groups,
        "control": chosen(control, control_rank, control_iteration),
        "test": chosen(test, test_rank, test_iteration),
    }


__all__ = [
    "PH_COMPLETE",
    "comm_comp_overlap",
    "gpu_kernel_breakdown",
    "hta_frames",
    "kernel_launch_stats",
    "memory_bw_summary",
    "per_step_breakdowns",
    "potential_stragglers",
    "queue_length",
    "steps_by_position",
    "trace_diff",
    "user_annotation_breakdown",
]
