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

from core.analysis.gpu_events import TraceEvents
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


# --- complete export: every kept event (TraceEvents) ---------------------------------------

RANK_PID_STRIDE = 100_000_000  # several ranks in one file: pid -> rank * stride + pid


def select_events(
    ev: TraceEvents,
    *,
    ranks: int | Sequence[int] | None = None,
    window_us: tuple[float, float] | None = None,
    step: int | None = None,
    step_windows: Mapping | None = None,
) -> np.ndarray:
    """Indices of the events of `ev` (a TraceEvents) an export of this selection holds.

    `window_us` = (t0, t1): events overlapping [t0, t1) (instants and flow points with
    t0 <= ts < t1). `step`: the CPU-side events inside the rank's ProfilerStep window
    (`step_windows` = {rank: [[step, start, end], ...]}) plus the GPU events and flow
    arrows whose correlation id one of those CPU events carries (GPU work launched in the
    step runs after it on the GPU clock). Metadata events of the selected ranks always
    come along.
    """
    from core.analysis.gpu_events import PH_COMPLETE, PH_META

    keep = np.ones(len(ev), dtype=bool)
    if ranks is not None:
        keep &= np.isin(ev.rank, np.atleast_1d(np.asarray(ranks, dtype=np.int64)))
    ts = ev.ts
    dur = np.where(np.isnan(ev.dur), 0.0, ev.dur)
    is_meta = ev.ph == PH_META
    with np.errstate(invalid="ignore"):
        if window_us is not None:
            t0, t1 = window_us
            span = ev.ph == PH_COMPLETE
            inside = np.where(span, (ts < t1) & (ts + dur > t0), (ts >= t0) & (ts < t1))
            keep &= inside | is_meta
        if step is not None:
            gpu_side = ev.stream >= 0
            chosen = np.zeros(len(ev), dtype=bool)
            for r, wins in (step_windows or {}).items():
                for s, a, b in wins:
                    if int(s) == int(step):
                        chosen |= (ev.rank == int(r)) & ~gpu_side & (ts >= a) & (ts < b)
            corr = np.unique(ev.correlation[chosen & (ev.correlation >= 0)])
            linked = (gpu_side & np.isin(ev.correlation, corr)) | (
                (ev.flow_id >= 0) & np.isin(ev.flow_id, corr) & ~(ev.ph == PH_COMPLETE)
            )
            keep &= chosen | linked | is_meta
    return np.flatnonzero(keep)


def full_chrome_trace(ev: TraceEvents, idx: np.ndarray, *, max_events: int = 2_000_000) -> dict:
    """Chrome trace-event JSON of the events `idx` of `ev` (a TraceEvents), in file order:
    complete events, flow arrows (ph s / f with their id, bp "e"), instants and metadata,
    with the kept args (stream, device, correlation, External id, bytes, memory bandwidth).
    One rank keeps its original pids; several ranks get pid = rank * 1e8 + pid and
    "rank N" in their process names, so Perfetto keeps them apart."""
    from core.analysis.gpu_events import PH_META

    idx = np.asarray(idx, dtype=np.int64)
    meta_rows = idx[ev.ph[idx] == PH_META]
    idx = idx[ev.ph[idx] != PH_META]
    matched = len(idx)
    idx = idx[:max_events]
    ranks = sorted({int(r) for r in np.unique(ev.rank[idx])} | {int(r) for r in np.unique(ev.rank[meta_rows])})
    multi = len(ranks) > 1
    trace = _metadata_events(ev, ranks, multi) + _trace_events(ev, idx, multi)
    return {
        "traceEvents": trace,
        "displayTimeUnit": "ms",
        "otherData": {
            "matched_events": matched,
            "exported_events": len(idx),
            "dropped_events": matched - len(idx),
            "ranks": ranks,
            "pid_per_rank": RANK_PID_STRIDE if multi else None,
        },
    }


def _ids(ev: TraceEvents, values: np.ndarray) -> list:
    """Ids as the file had them: labels (text ids) are stored as codes <= -2."""
    out = values.tolist()
    if ev.labels:
        out = [ev.labels[-2 - v] if v <= -2 else v for v in out]
    return out


def _metadata_events(ev: TraceEvents, ranks: list[int], multi: bool) -> list[dict]:
    """The ranks' metadata events; with several ranks, pids and process names per rank."""
    out = []
    for m in (ev.meta[i] for i in range(len(ev.meta))):
        if m["rank"] not in ranks:
            continue
        pid = m["pid"]
        if multi and isinstance(pid, int):
            pid = m["rank"] * RANK_PID_STRIDE + pid
        entry = {"ph": "M", "name": m["name"], "pid": pid, "tid": m["tid"], "args": dict(m.get("args", {}))}
        if multi and m["name"] == "process_name" and "name" in entry["args"]:
            entry["args"]["name"] = f"rank {m['rank']} {entry['args']['name']}"
        out.append(entry)
    return out


_ARG_IDS = (("external_id", "External id"), ("device", "device"), ("stream", "stream"), ("correlation", "correlation"))


def _trace_events(ev: TraceEvents, idx: np.ndarray, multi: bool) -> list[dict]:
    """The events `idx` as trace events (columns read once, as lists)."""
    from core.analysis.gpu_events import PHASES

    rank_l = ev.rank[idx].tolist()
    pid_l = _ids(ev, ev.pid[idx])
    if multi:
        pid_l = [r * RANK_PID_STRIDE + p if isinstance(p, int) else f"{r}:{p}" for r, p in zip(rank_l, pid_l)]
    tid_l = _ids(ev, ev.tid[idx])
    names, cats = ev.names, ev.cats
    cols = {
        "ph": ev.ph[idx].tolist(),
        "cat": ev.cat[idx].tolist(),
        "name": ev.name[idx].tolist(),
        "ts": ev.ts[idx].tolist(),
        "dur": ev.dur[idx].tolist(),
        "stream": ev.stream[idx].tolist(),
        "device": ev.device[idx].tolist(),
        "correlation": ev.correlation[idx].tolist(),
        "external_id": ev.external_id[idx].tolist(),
        "bytes": ev.bytes[idx].tolist(),
        "bw": ev.bandwidth_gbps[idx].tolist(),
        "flow_id": _ids(ev, ev.flow_id[idx]),
        "bp": ev.flow_bp_e[idx].tolist(),
    }
    out = []
    for i in range(len(idx)):
        ph = PHASES[cols["ph"][i]]
        e: dict = {"ph": ph if ph != "other" else "X", "pid": pid_l[i], "tid": tid_l[i]}
        cat = cats[cols["cat"][i]]
        if cat:
            e["cat"] = cat
        e["name"] = names[cols["name"][i]]
        ts, d = cols["ts"][i], cols["dur"][i]
        if ts == ts:  # not NaN
            e["ts"] = ts
        if d == d:
            e["dur"] = d
        if ph in ("s", "f"):
            if cols["flow_id"][i] != -1:
                e["id"] = cols["flow_id"][i]
            if cols["bp"][i]:
                e["bp"] = "e"
        else:
            args = _event_args(cols, i)
            if args:
                e["args"] = args
        out.append(e)
    return out


def _event_args(cols: dict, i: int) -> dict:
    args: dict = {out_key: cols[key][i] for key, out_key in _ARG_IDS if cols[key][i] != -1}
    if cols["bytes"][i] == cols["bytes"][i]:
        args["bytes"] = cols["bytes"][i]
    if cols["bw"][i] == cols["bw"][i]:
        args["memory bandwidth (GB/s)"] = cols["bw"][i]
    return args
