"""Export GPU events as Chrome trace-event JSON (opens in Perfetto and chrome://tracing).

Layout: one process per rank (pid = rank, named "rank N"), one thread per CUDA stream
(tid = stream, named "stream S"); every GPU event is a complete event (ph "X") with ts and
dur in microseconds, cat = its kind (compute / communication / memory) and args step,
kind and, when known, launch_us (start of the CPU runtime call that launched it).
The result is a plain dict; serialise it with orjson / json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from core.analysis.gpu_timeline import KIND_NAMES, event_names

Events = Mapping[str, "np.ndarray | list"]

DEFAULT_MAX_EVENTS = 500_000


def chrome_trace_export(
    events: Events,
    *,
    ranks: int | Sequence[int] | None = None,
    step: int | None = None,
    window_us: tuple[float, float] | None = None,
    names: Sequence[str] | Mapping[int, str] | None = None,
    name_contains: str | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
) -> dict:
    """Chrome trace-event JSON of the selected GPU events.

    Selection (all optional, combined with AND): `ranks` (one or several), `step` (a
    ProfilerStep number), `window_us` = (t0, t1) keeps events overlapping [t0, t1),
    `name_contains` (case-insensitive substring of the kernel name). `names` is the
    lookup when `events` carry `name_id` instead of `name`. At most `max_events` events
    are written (the earliest); ``otherData`` says how many matched and were dropped.
    """
    rank = np.asarray(events["rank"], dtype=np.int64)
    start = np.asarray(events["start_us"], dtype=np.float64)
    dur = np.asarray(events["dur_us"], dtype=np.float64)
    keep = np.ones(len(rank), dtype=bool)
    if ranks is not None:
        keep &= np.isin(rank, np.atleast_1d(np.asarray(ranks, dtype=np.int64)))
    if step is not None:
        keep &= np.asarray(events["step"], dtype=np.int64) == step
    if window_us is not None:
        t0, t1 = window_us
        keep &= (start < t1) & (start + dur > t0)
    all_names: list[str] | None = None
    if name_contains is not None:
        all_names = event_names(events, names)
        needle = name_contains.lower()
        keep &= np.fromiter((needle in n.lower() for n in all_names), dtype=bool, count=len(all_names))

    idx = np.flatnonzero(keep)
    idx = idx[np.argsort(start[idx], kind="stable")]
    matched = len(idx)
    idx = idx[:max_events]
    if all_names is None:
        all_names = event_names(events, names) if len(idx) else []
    sel_names = [all_names[i] for i in idx.tolist()]
    sel_rank = rank[idx].tolist()
    sel_stream = np.asarray(events["stream"], dtype=np.int64)[idx].tolist()
    sel_kind = [KIND_NAMES.get(int(k), "other") for k in np.asarray(events["kind"])[idx].tolist()]
    sel_step = np.asarray(events["step"], dtype=np.int64)[idx].tolist()
    launch = events.get("launch_us")
    sel_launch = np.asarray(launch, dtype=np.float64)[idx].tolist() if launch is not None else [float("nan")] * len(idx)

    trace: list[dict] = []
    for r in sorted(set(sel_rank)):
        trace.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
    for r, s in sorted(set(zip(sel_rank, sel_stream))):
        trace.append({"ph": "M", "name": "thread_name", "pid": r, "tid": s, "args": {"name": f"stream {s}"}})
        trace.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": s, "args": {"sort_index": s}})
    for name, r, s, kind, st, ts, d, lu in zip(
        sel_names, sel_rank, sel_stream, sel_kind, sel_step, start[idx].tolist(), dur[idx].tolist(), sel_launch
    ):
        args = {"step": st, "kind": kind}
        if lu == lu:  # not NaN
            args["launch_us"] = lu
        trace.append({"ph": "X", "cat": kind, "name": name, "pid": r, "tid": s, "ts": ts, "dur": d, "args": args})
    return {
        "traceEvents": trace,
        "displayTimeUnit": "ms",
        "otherData": {"matched_events": matched, "exported_events": len(idx), "dropped_events": matched - len(idx)},
    }
