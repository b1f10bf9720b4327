"""The `gpu_timeline` analysis: every GPU-timeline table for one Kineto trace, as JSON.

Result fields: ``temporal`` (per rank, `temporal_breakdown` columns), ``idle`` (per rank
and stream, `idle_breakdown`), ``kernel_types`` (`kernel_type_breakdown`),
``stragglers`` ({"per_rank", "per_step"} of `stragglers`), ``ranks`` (the ranks seen).
Tables are lists of row dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from core.analysis.gpu_stragglers import stragglers
from core.analysis.gpu_timeline import idle_breakdown, kernel_type_breakdown, temporal_breakdown
from core.analysis.tables import TraceData
from core.jsonable import json_safe


def rows(table: Mapping[str, np.ndarray]) -> list[dict]:
    """Column table -> list of row dicts (JSON-safe)."""
    cols = {k: json_safe(np.asarray(v)) for k, v in table.items()}
    n = len(next(iter(cols.values()), []))
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


def _tables(value):
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
) -> dict:
    temporal = temporal_breakdown(events, step_windows, names=names, hta_compat=hta_compat)
    return {
        "ranks": sorted({int(r) for r in np.unique(np.asarray(events["rank"]))}),
        "temporal": rows(temporal),
        "idle": rows(idle_breakdown(events, step_windows, hta_compat=hta_compat)),
        "kernel_types": _tables(kernel_type_breakdown(events, names=names)),
        "stragglers": _tables(stragglers(events, tolerance=straggler_tolerance)),
    }


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
    )
