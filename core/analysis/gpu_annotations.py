"""HTA's user-annotation breakdown (CPU or GPU user annotations), on `TraceEvents`."""

from __future__ import annotations

import numpy as np

from core.analysis.gpu_breakdown import aggregate_kernels
from core.analysis.gpu_events import TraceEvents
from core.analysis.gpu_frames import (
    Frame,
    hta_frames,
)

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
        aggregate_kernels(rows, ev.name[f.idx[m]], ev.names, f.dur[m], r, "", num_kernels, duration_ratio)
    order = sorted(range(len(rows["name"])), key=lambda i: (rows["rank"][i], rows["name"][i]))
    return {
        k: ([rows[k][i] for i in order] if k == "name" else np.asarray([rows[k][i] for i in order]))
        for k in rows
        if k != "kernel_type"
    }
