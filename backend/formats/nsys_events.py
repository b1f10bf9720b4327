"""Every event the Nsight Systems reader takes from an export, kept beside the database
as the same `TraceEvents` columns the Kineto reader keeps (backend/formats/kineto_events.py),
so the CPU-side GPU analyses (queue length, launch statistics, memory bandwidth,
user annotations), the trace diff, the event search and the Chrome-trace export read an
nsys trace as they read a Kineto one.

What becomes what, in Kineto's terms: kernels, memcpy and memset are ``X`` events of cat
``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` with pid = device and tid = stream; CUDA
runtime calls are ``cuda_runtime`` events (names without nsys' ``_v7000`` API-version
suffix, so ``cudaLaunchKernel`` reads as in Kineto); NVTX ranges are ``user_annotation``
events, and each is projected onto the GPU as Kineto does for its annotations: a
``gpu_user_annotation`` from the first start to the last end of the GPU work launched
inside the range on its rank (HTA's user-annotation breakdown reads those). Correlation
ids are renumbered per (process, correlationId): CUPTI numbers them
per process, and one export may hold several processes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backend.formats.kineto_events import write_columns
from core.analysis.gpu_events import PH_COMPLETE

CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "user_annotation", "gpu_user_annotation")
CAT_CODE = {c: i for i, c in enumerate(CATS)}
# kept-event files of nsys exports are numbered from here: Kineto files read ahead in
# other processes take 0, 1, ... in the same folder, whatever the order of the upload
KEPT_INDEX_BASE = 1 << 20
KEPT_STATE = "nsys_files_kept"


@dataclass
class EventPart:
    """Events of one kind: rank, cat, name code, times (us) and ids, equal-length arrays."""

    cat: str
    rank: np.ndarray
    name: np.ndarray  # codes into the shared name table
    ts: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    correlation: np.ndarray
    stream: np.ndarray | None = None  # GPU events only (pid = device)
    bytes: np.ndarray | None = None  # memcpy / memset only


def trace_columns(parts: list[EventPart]) -> dict[str, np.ndarray]:
    """The `TraceEvents` columns of all parts, ordered by start time."""
    parts = [p for p in parts if len(p.ts)]

    def cat(get, default, dtype) -> np.ndarray:
        arrays = [np.full(len(p.ts), default, dtype) if get(p) is None else np.asarray(get(p), dtype) for p in parts]
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype)

    cols = {
        "rank": cat(lambda p: p.rank, -1, np.int64),
        "ph": cat(lambda p: None, PH_COMPLETE, np.int8),
        "cat": cat(lambda p: np.full(len(p.ts), CAT_CODE[p.cat]), 0, np.int32),
        "name": cat(lambda p: p.name, 0, np.int32),
        "ts": cat(lambda p: p.ts, np.nan, np.float64),
        "dur": cat(lambda p: p.dur, np.nan, np.float64),
        "pid": cat(lambda p: p.pid, -1, np.int64),
        "tid": cat(lambda p: p.tid, -1, np.int64),
        "stream": cat(lambda p: p.stream, -1, np.int64),
        "device": cat(lambda p: p.pid if p.stream is not None else None, -1, np.int64),
        "correlation": cat(lambda p: p.correlation, -1, np.int64),
        "external_id": cat(lambda p: None, -1, np.int64),
        "bytes": cat(lambda p: p.bytes, np.nan, np.float64),
        "flow_id": cat(lambda p: None, -1, np.int64),
        "flow_bp_e": cat(lambda p: None, 0, np.int8),
    }
    with np.errstate(invalid="ignore", divide="ignore"):
        # Kineto's "memory bandwidth (GB/s)": bytes over the copy's duration
        cols["bandwidth_gbps"] = np.where(cols["dur"] > 0, cols["bytes"] / (cols["dur"] * 1e3), np.nan)
    order = np.argsort(cols["ts"], kind="stable")
    return {k: v[order] for k, v in cols.items()}


def project_ranges(
    ranges: tuple[np.ndarray, np.ndarray, np.ndarray], gpu: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(range index, first start, last end, the first-launched GPU event) of the GPU work
    launched in each range.

    `ranges`: rank, start, end of the CPU ranges; `gpu`: rank, launch, start, end of the
    GPU events (any time unit; launch -1 when unknown). Ranges that launched nothing are
    left out."""
    r_rank, r_start, r_end = ranges
    g_rank, g_launch, g_start, g_end = gpu
    known = np.flatnonzero(g_launch >= 0)
    order = known[np.lexsort((g_launch[known], g_rank[known]))]
    t0 = min(int(g_launch[known].min(initial=0)), int(r_start.min(initial=0)))
    rank, launch = g_rank[order], g_launch[order] - t0
    start, end = g_start[order], g_end[order]
    r_start, r_end = r_start - t0, r_end - t0
    # one sorted key per event: (rank, launch) ranks apart, so searchsorted finds a
    # range's launches among its own rank's
    ranks = np.unique(np.r_[rank, r_rank])
    span = max(int(launch.max(initial=0)), int(r_end.max(initial=0))) + 1
    key = np.searchsorted(ranks, rank).astype(np.int64) * span + launch
    base = np.searchsorted(ranks, r_rank).astype(np.int64) * span
    first = np.searchsorted(key, base + r_start, side="left")
    last = np.searchsorted(key, base + r_end, side="left")
    hit = np.flatnonzero(last > first)
    if not len(hit):
        return hit, start[:0], end[:0], hit
    # min start / max end over each range's slice: reduceat over (first, last) pairs
    # (a sentinel ends the arrays, so `last` may point past the final event)
    pairs = np.column_stack([first[hit], last[hit]]).ravel()
    starts = np.minimum.reduceat(np.r_[start, 0], pairs)[::2]
    ends = np.maximum.reduceat(np.r_[end, 0], pairs)[::2]
    return hit, starts, ends, order[first[hit]]


def keep_events(state: dict, folder, file: str, parts: list[EventPart], names: list[str]) -> None:
    """Write the file's events next to the other kept files of the upload."""
    index = state.get(KEPT_STATE, 0)
    state[KEPT_STATE] = index + 1
    strings = {"names": names, "cats": list(CATS), "labels": [], "meta": []}
    write_columns(folder, KEPT_INDEX_BASE + index, file, trace_columns(parts), strings)
