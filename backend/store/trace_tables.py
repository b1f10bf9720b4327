"""Load a stored trace's columns into the analyses' `TraceData` (the I/O half of a job)."""

from __future__ import annotations

import numpy as np
from sqlalchemy import select
from sqlalchemy.engine import Connection

from backend.formats.kineto_events import load_events
from backend.settings import get_settings
from backend.store.columns import read_columns
from backend.store.models import Step, Trace
from backend.store.queries.gpu_events import kernel_names
from core.analysis.tables import STEP_TIMING_COLUMNS, TraceData

COUNTS = {
    "samples": "n_samples",
    "turns": "n_turns",
    "tool_calls": "n_tool_calls",
    "rank_timings": "n_rank_timings",
    "gpu_events": "n_gpu_events",
}
# columns every gpu_events row has (the reader's required fields)
GPU_EVENT_COLUMNS = ("rank", "stream", "step", "kind", "name_id", "start_us", "dur_us", "launch_us")
KEYS = {
    "samples": ("trace_id", "step", "group_idx", "sample_idx"),
    "turns": ("trace_id", "step", "group_idx", "sample_idx", "turn"),
    "tool_calls": ("trace_id", "step", "group_idx", "sample_idx", "call_idx"),
    "rank_timings": ("trace_id", "step", "rank", "phase"),
}


# Not a table: asks `load_trace_data` for every event of the Kineto files (TraceData.gpu_trace).
TRACE_EVENTS = "kineto_events"


def trace_events_dir(trace_id: int):
    """Where the ingest keeps a Kineto trace's events (backend/formats/kineto_events.py)."""
    return get_settings().data_dir / "kineto" / str(int(trace_id))


def available_columns(trace: Trace) -> dict[str, set[str]]:
    """{table: columns with data} for the trace's non-empty tables."""
    recorded = (trace.meta or {}).get("columns", {})
    out = {}
    for table, count_attr in COUNTS.items():
        if getattr(trace, count_attr):
            base = GPU_EVENT_COLUMNS if table == "gpu_events" else KEYS[table][1:]
            out[table] = set(recorded.get(table, ())) | set(base)
    if trace.n_steps:
        out["steps"] = {"step", "validate"} | (set(recorded.get("steps", ())) & set(STEP_TIMING_COLUMNS))
    return out


def load_trace_tables(
    conn: Connection,
    trace: Trace,
    tables: dict[str, tuple[str, ...]],
    step_range: tuple[int, int] | None = None,
) -> dict[str, dict]:
    """{table: {column: array}}: just the requested columns the trace has, ordered by the
    table's key (steps in [lo, hi) when given); tables the trace lacks are absent."""
    available = available_columns(trace)
    loaded: dict[str, dict] = {}
    for table, wanted in tables.items():
        if table not in available:
            continue
        columns = [c for c in dict.fromkeys(wanted) if c in available[table]]
        if table == "steps":
            loaded["steps"] = _steps(conn, trace.id, columns, step_range)
        elif columns:
            order = ", ".join(KEYS[table][1:]) if table in KEYS else "event_idx"
            loaded[table] = read_columns(conn, table, trace.id, columns, step_range=step_range, order_by=order)
    return loaded


def load_trace_data(
    conn: Connection,
    trace: Trace,
    tables: dict[str, tuple[str, ...]],
    step_range: tuple[int, int] | None = None,
) -> TraceData:
    """`load_trace_tables` as the analyses' `TraceData` (with kernel names and
    ProfilerStep windows when GPU events are read)."""
    loaded = load_trace_tables(conn, trace, tables, step_range)
    gpu_names: list[str] = []
    if "gpu_events" in loaded:
        names = kernel_names(conn, team_id=trace.team_id, trace_id=trace.id)
        gpu_names = [names.get(i, "") for i in range(max(names, default=-1) + 1)]
    gpu_trace = None
    if TRACE_EVENTS in tables and "gpu_events" in loaded:
        gpu_trace = load_events(trace_events_dir(trace.id))
    return TraceData.from_tables(
        loaded,
        max_response_len=trace.max_response_len,
        task_names=dict(enumerate(trace.tasks or [])),
        gpu_names=gpu_names,
        gpu_step_windows=((trace.meta or {}).get("kineto") or {}).get("steps"),
        gpu_trace=gpu_trace,
    )


def _steps(conn: Connection, trace_id: int, columns: list[str], step_range) -> dict:
    cols = [getattr(Step, c) for c in columns]
    query = select(*cols).where(Step.trace_id == trace_id).order_by(Step.step)
    if step_range is not None:
        query = query.where(Step.step >= step_range[0], Step.step < step_range[1])
    rows = conn.execute(query).all()
    out = {}
    for i, name in enumerate(columns):
        values = [r[i] for r in rows]
        if name == "step":
            out[name] = np.array(values, dtype=np.int64)
        elif name == "validate":
            out[name] = np.array([bool(v) for v in values], dtype=bool)
        else:
            out[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return out
