"""HTA's CUDA launch-queue length (and time blocked on a full queue) and kernel-launch
statistics, on every event of a trace (`TraceEvents`: they need the CPU-side runtime
calls). Each function names the HTA call it reproduces and its rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from core.analysis.gpu_events import TraceEvents
from core.analysis.gpu_frames import (
    CUDA_MAX_LAUNCH_QUEUE_PER_STREAM,
    LAUNCH_KERNEL_NAMES,
    LAUNCH_MEMORY_NAMES,
    RUNTIME_LAUNCH_NAMES,
    Frame,
    hta_frames,
)

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
        order = hta_sort(t)
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
            "launch_delay_median_us": stat(np.median, delay),
            "launch_delay_p95_us": stat(lambda x: np.quantile(x, 0.95), delay),
            "launch_delay_mean_us": stat(np.mean, delay),
            "cpu_duration_median_us": stat(np.median, cpu_d),
            "cpu_duration_mean_us": stat(np.mean, cpu_d),
            "gpu_duration_median_us": stat(np.median, gpu_d),
            "gpu_duration_mean_us": stat(np.mean, gpu_d),
            "n_gpu_shorter_than_cpu": int((gpu_d < cpu_d).sum()),
            "n_runtime_outliers": int((cpu_d > runtime_cutoff_us).sum()),
            "n_launch_delay_outliers": int((delay > launch_delay_cutoff_us).sum()),
        }
        for k, v in row.items():
            cols.setdefault(k, []).append(v)
    return {k: np.asarray(v) for k, v in cols.items()}


def hta_sort(t: np.ndarray) -> np.ndarray:
    """The permutation pandas' sort_values(by="ts") gives (numpy quicksort, which is
    not stable: ties come out in the order HTA's results depend on)."""
    return np.argsort(np.asarray(t, dtype=np.float64), kind="quicksort")


def codes_of(values: list[str]) -> tuple[np.ndarray, list[str]]:
    table: dict[str, int] = {}
    codes = np.fromiter((table.setdefault(v, len(table)) for v in values), np.int64, len(values))
    return codes, list(table)


def stat(fn: Callable[[np.ndarray], Any], x: np.ndarray) -> float:
    return float(fn(x)) if len(x) else float("nan")
