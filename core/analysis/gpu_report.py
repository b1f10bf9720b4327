"""The `gpu_timeline` analysis: every GPU-timeline table for one Kineto trace, as JSON.

Result fields: ``temporal`` (per rank, `temporal_breakdown` columns), ``idle`` (per rank
and stream, `idle_breakdown`), ``kernel_types`` (`kernel_type_breakdown`),
``stragglers`` ({"per_rank", "per_step"} of `stragglers`), ``ranks`` (the ranks seen);
from the HTA analyzers (HTA 0.5.0's other analyses: gpu_breakdown, gpu_launch,
gpu_memory_bw, gpu_annotations, gpu_stragglers): ``comm_comp_overlap`` (per
rank), ``kernel_breakdown`` ({"by_type", "kernels"}), ``per_step`` ({"temporal",
"idle"} per ProfilerStep) and, when every event of the trace was kept at ingest
(`TraceData.gpu_trace`), ``queue_length`` ({"summary", "blocked"} per rank and stream),
``launch_stats`` (per rank), ``memory_bw`` (per rank and copy kind) and
``user_annotations`` (per rank and annotation), ``potential_stragglers`` (HTA's
late-start rule over ranks); ``cpu_side`` says whether those four
could be computed. Tables are lists of row dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.analysis.gpu_annotations import user_annotation_breakdown
from core.analysis.gpu_breakdown import comm_comp_overlap, gpu_kernel_breakdown, per_step_breakdowns
from core.analysis.gpu_events import TraceEvents
from core.analysis.gpu_frames import hta_frames
from core.analysis.gpu_launch import kernel_launch_stats, queue_length
from core.analysis.gpu_memory_bw import memory_bw_summary
from core.analysis.gpu_stragglers import potential_stragglers, stragglers
from core.analysis.gpu_timeline import idle_breakdown, kernel_type_breakdown, temporal_breakdown
from core.analysis.tables import TraceData
from core.jsonable import json_safe


def rows(table: Mapping[str, np.ndarray | list]) -> list[dict]:
    """Column table -> list of row dicts (JSON-safe)."""
    cols = {k: json_safe(np.asarray(v)) for k, v in table.items()}
    n = len(next(iter(cols.values()), []))
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


def _tables(value: Any) -> Any:
    if isinstance(value, Mapping) and value and all(isinstance(v, Mapping) for v in value.values()):
        return {k: _tables(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return rows(value)
    return json_safe(value)


def gpu_timeline_report(
    events: Mapping[str, np.ndarray],
    names: Sequence[str],
    step_windows: Mapping | None = None,
    *,
    hta_compat: bool = True,
    straggler_tolerance: float = 0.05,
    trace_events: TraceEvents | None = None,
) -> dict:
    temporal = temporal_breakdown(events, step_windows, names=names, hta_compat=hta_compat)
    out = {
        "ranks": sorted({int(r) for r in np.unique(np.asarray(events["rank"]))}),
        "temporal": rows(temporal),
        "idle": rows(idle_breakdown(events, step_windows, hta_compat=hta_compat)),
        "kernel_types": _tables(kernel_type_breakdown(events, names=names)),
        "stragglers": _tables(stragglers(events, tolerance=straggler_tolerance)),
        "comm_comp_overlap": rows(comm_comp_overlap(events, step_windows, names=names, hta_compat=hta_compat)),
        "kernel_breakdown": _tables(gpu_kernel_breakdown(events, step_windows, names=names)),
        "per_step": _tables(per_step_breakdowns(events, step_windows, names=names))
        if "step" in events
        else {"temporal": [], "idle": []},
        "cpu_side": trace_events is not None and len(trace_events) > 0,
    }
    if trace_events is not None and out["cpu_side"]:
        frames = hta_frames(trace_events)
        out["queue_length"] = _tables(queue_length(trace_events, frames))
        out["launch_stats"] = rows(kernel_launch_stats(trace_events, frames))
        out["memory_bw"] = rows(memory_bw_summary(trace_events, frames))
        out["user_annotations"] = rows(user_annotation_breakdown(trace_events, frames))
        hta_stragglers = potential_stragglers(trace_events, frames)
        if "metric" in hta_stragglers:
            hta_stragglers["metric"] = rows(hta_stragglers["metric"])
            hta_stragglers["counts"] = [{"rank": r, "steps": c} for r, c in sorted(hta_stragglers["counts"].items())]
        out["potential_stragglers"] = json_safe(hta_stragglers)
    return out


def analyze_gpu_timeline(data: TraceData, *, hta_compat: bool = True, straggler_tolerance: float = 0.05) -> dict:
    """The registry's entry: `gpu_timeline_report` over a trace's stored GPU events."""
    if data.gpu_events is None or not len(data.gpu_events):
        raise ValueError("the trace has no GPU events")
    return gpu_timeline_report(
        data.gpu_events.as_mapping(),
        data.gpu_names,
        data.gpu_step_windows,
        hta_compat=hta_compat,
        straggler_tolerance=straggler_tolerance,
        trace_events=data.gpu_trace,
    )
