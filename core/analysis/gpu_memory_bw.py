"""HTA's memory-bandwidth summary (memcpy / memset kernels), on `TraceEvents`."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.analysis.gpu_events import TraceEvents
from core.analysis.gpu_frames import (
    Frame,
    hta_frames,
    hta_kernel_type,
    memory_kernel_type,
)
from core.analysis.gpu_launch import codes_of, hta_sort

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
        kind_codes, kind_names = codes_of(kinds)
        # HTA: starts then ends, sorted together by ts (quicksort), then per kind a cumsum
        t = np.r_[ts, ts + dur]
        v = np.r_[bw, -bw]
        k_all = np.r_[kind_codes, kind_codes]
        order = hta_sort(t)
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
