"""Holistic Trace Analysis (HTA 0.5.0)'s view of a trace, shared by the HTA analyzers
(gpu_breakdown, gpu_launch, gpu_memory_bw, gpu_annotations, gpu_stragglers, gpu_diff).


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

import numpy as np

from core.analysis.gpu_events import TraceEvents
from core.analysis.gpu_kinds import GpuKind
from core.analysis.gpu_timeline import (
    event_names,
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


def type_codes(names: Sequence[str], codes: np.ndarray) -> np.ndarray:
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


def name_codes(events: Events, names: Sequence[str] | Mapping[int, str] | None = None) -> tuple[np.ndarray, list[str]]:
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


def compute_mask(events: Events, names: Sequence[str] | Mapping[int, str] | None = None) -> np.ndarray:
    """HTA's COMPUTATION kernels (as hta_compute_mask), decided once per distinct name."""
    kind = np.asarray(events["kind"])
    try:
        codes, table = name_codes(events, names)
    except KeyError:
        return kind == GpuKind.COMPUTE
    not_compute = np.array([_NOT_COMPUTE.match(n) is not None for n in table] or [False], dtype=bool)
    return (kind == GpuKind.COMPUTE) & ~not_compute[codes] if len(codes) else kind == GpuKind.COMPUTE
