"""Reward and tool latency per step.

`analyze_latency(data, ...)` reads `rank_timings` (step, rank, phase, seconds, and
batch_size, validate when present), the `steps` timings t_reward and t_step, and
`tool_calls` (step, group_idx, sample_idx, latency_s, tool_name, status). Validation
rows are left out unless `include_validation` (for tool calls: calls of trajectories whose
sample is flagged validate).

Result fields:

``reward_phase`` (the rank_timings phase read, "reward")
``reward``: one entry per step that has reward timings or a measured t_reward:
    ``step``, ``ranks`` (count), ``rank`` / ``seconds`` (one per rank, by rank),
    ``mean``, ``p50``, ``p90``, ``p99``, ``max``, ``min`` (seconds over ranks, numpy's
    linear percentiles), ``few_ranks`` (fewer than `MIN_PERCENTILE_VALUES` ranks: the
    percentiles interpolate between a handful of values, so pages show the values
    themselves), ``max_over_mean`` (the straggler rank vs the average),
    ``per_sample_s`` (summed seconds / summed batch_size, when batch sizes are known),
    ``t_reward`` and ``t_step`` (measured, seconds, None when unknown),
    ``share_of_step`` = max / t_step (ranks score in parallel, the step waits for the
    slowest) and ``measured_share_of_step`` = t_reward / t_step.
``tools``: one entry per step with tool calls: ``step``, ``calls``, ``mean``, ``p50``,
    ``p90``, ``p99``, ``max``, ``sum`` (seconds), ``errors`` (calls whose status is not
    "success", None without a status column), and ``by_tool``: a column dict
    {tool, calls, mean, p50, p90, p99, max, sum, errors} with one value per tool name.
``summary``: ``reward``: steps, {mean, max} over steps of the per-step max,
    max_over_mean, share_of_step and measured_share_of_step; ``tools``: calls, sum,
    mean, max, errors overall and ``by_tool`` {name: {calls, sum, mean, max, errors}}.
    (Whole-run percentiles are not merged: read them per step.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from core.analysis.grouping import (
    composite_key,
    group_percentiles,
    group_rows,
    order_within_groups,
    training_mask,
    validation_trajectory_filter,
)
from core.analysis.stats import ratio
from core.analysis.tables import TraceData
from core.jsonable import json_safe

QS = (50, 90, 99)
# Below this many values a p90 / p99 is an interpolation between a few of them, not a tail.
MIN_PERCENTILE_VALUES = 10
_RANK_FIELDS = ("rank", "seconds", "mean", "p50", "p90", "p99", "max", "min", "max_over_mean", "per_sample_s")


def analyze_latency(data: TraceData, reward_phase: str = "reward", include_validation: bool = False) -> dict:
    """Reward time per step and rank, tool latency per step and tool (see module doc)."""
    return finish_latency(per_step_latency(data, reward_phase, include_validation))


def _nan_none(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def per_step_latency(data: TraceData, reward_phase: str = "reward", include_validation: bool = False) -> dict:
    return {
        "kind": "latency",
        "reward_phase": reward_phase,
        "reward": _reward_steps(data, reward_phase, include_validation),
        "tools": _tool_steps(data, include_validation),
    }


def _reward_steps(data: TraceData, phase: str, include_validation: bool) -> list[dict]:
    rt = data.rank_timings
    entries: dict[int, dict] = {}
    if rt is not None and len(rt):
        keep = (np.asarray(rt.phase).astype(str) == phase) & training_mask(rt.validate, len(rt), include_validation)
        keep &= np.isfinite(np.asarray(rt.seconds, dtype=np.float64))  # unknown times say nothing
        step = np.asarray(rt.step, dtype=np.int64)[keep]
        rank = np.asarray(rt.rank, dtype=np.int64)[keep]
        secs = np.asarray(rt.seconds, dtype=np.float64)[keep]
        batch = None if rt.batch_size is None else np.asarray(rt.batch_size, dtype=np.float64)[keep]
        if len(step):
            by_value = order_within_groups(step, secs)
            g = group_rows(step[by_value])
            sv = secs[by_value]
            pct = group_percentiles(sv, g.starts, g.counts, QS)
            total = np.add.reduceat(sv, g.starts)
            by_rank = np.lexsort((rank, step))  # for the per-rank lists
            rr, rs = rank[by_rank], secs[by_rank]
            bsum = None if batch is None else np.add.reduceat(batch[by_value], g.starts)
            for i, sl in g.slices():
                n = int(g.counts[i])
                mean = float(total[i]) / n
                mx, mn = float(sv[sl.stop - 1]), float(sv[sl.start])
                entries[int(g.keys[i])] = {
                    "step": int(g.keys[i]),
                    "ranks": n,
                    "rank": rr[sl].tolist(),
                    "seconds": rs[sl].tolist(),
                    "mean": mean,
                    **{f"p{q}": float(pct[i, j]) for j, q in enumerate(QS)},
                    "max": mx,
                    "min": mn,
                    "few_ranks": n < MIN_PERCENTILE_VALUES,
                    "max_over_mean": ratio(mx, mean),
                    "per_sample_s": None if bsum is None else ratio(total[i], bsum[i]),
                }
    st = data.steps
    if st is not None and len(st):
        if st.t_reward is not None:
            keepv = training_mask(st.validate, len(st), include_validation)
            known = np.asarray(st.step, dtype=np.int64)[keepv & np.isfinite(np.asarray(st.t_reward, dtype=float))]
            for s in known.tolist():
                entries.setdefault(int(s), {"step": int(s), "ranks": 0, **{k: None for k in _RANK_FIELDS}})
    steps = np.array(sorted(entries), dtype=np.int64)
    t_reward = st.timing("t_reward", steps) if st is not None else np.full(len(steps), np.nan)
    t_step = st.timing("t_step", steps) if st is not None else np.full(len(steps), np.nan)
    out = []
    for i, s in enumerate(steps.tolist()):
        e = entries[s]
        e["t_reward"], e["t_step"] = _nan_none(t_reward[i]), _nan_none(t_step[i])
        e["share_of_step"] = ratio(e.get("max"), e["t_step"])
        e["measured_share_of_step"] = ratio(e["t_reward"], e["t_step"])
        out.append(e)
    return out


def _tool_steps(data: TraceData, include_validation: bool) -> list[dict]:
    tc = data.tool_calls
    if tc is None or len(tc) == 0:
        return []
    keep = np.ones(len(tc), dtype=bool)
    if not include_validation:
        keep = validation_trajectory_filter(data, tc.step, tc.group_idx, tc.sample_idx)
    keep &= np.isfinite(np.asarray(tc.latency_s, dtype=np.float64))
    step = np.asarray(tc.step, dtype=np.int64)[keep]
    lat = np.asarray(tc.latency_s, dtype=np.float64)[keep]
    if len(step) == 0:
        return []
    names = np.asarray(tc.tool_name).astype(str)[keep] if tc.tool_name is not None else np.full(len(step), "tool")
    failed = None if tc.status is None else (np.asarray(tc.status).astype(str)[keep] != "success")
    tool_names, tool_code = np.unique(names, return_inverse=True)

    step_rows = _latency_groups(step, lat, failed)
    tool_rows = _latency_groups(composite_key(step, tool_code), lat, failed, extra=(step, tool_code))
    out = []
    t_step = np.asarray(tool_rows.pop("_step"))
    t_tool = np.asarray(tool_rows.pop("_tool"))
    for i, s in enumerate(step_rows["key"]):
        lo, hi = np.searchsorted(t_step, s, "left"), np.searchsorted(t_step, s, "right")
        entry = {"step": int(s), **{k: v[i] for k, v in step_rows.items() if k != "key"}}
        entry["by_tool"] = {
            "tool": [str(tool_names[t]) for t in t_tool[lo:hi]],
            **{k: v[lo:hi] for k, v in tool_rows.items() if k != "key"},
        }
        out.append(entry)
    return out


def _latency_groups(
    key: np.ndarray, lat: np.ndarray, failed: np.ndarray | None, extra: Sequence[np.ndarray] = ()
) -> dict:
    """Count, mean, p50/p90/p99, max, sum, errors per integer key (lists, key-sorted)."""
    order = order_within_groups(key, lat)
    g = group_rows(np.asarray(key)[order])
    v = lat[order]
    pct = group_percentiles(v, g.starts, g.counts, QS)
    sums = np.add.reduceat(v, g.starts)
    ends = g.starts + g.counts - 1
    out = {
        "key": g.keys.tolist(),
        "calls": g.counts.tolist(),
        "mean": (sums / g.counts).tolist(),
        **{f"p{q}": pct[:, j].tolist() for j, q in enumerate(QS)},
        "max": v[ends].tolist(),
        "sum": sums.tolist(),
        "errors": (
            np.add.reduceat(failed[order].astype(np.int64), g.starts).tolist()
            if failed is not None
            else [None] * len(g.keys)
        ),
    }
    if extra:
        out["_step"] = extra[0][order][g.starts].tolist()
        out["_tool"] = extra[1][order][g.starts].tolist()
    return out


def _mean_max(values: Iterable[float | None]) -> dict | None:
    vals = [v for v in values if v is not None]
    return {"mean": sum(vals) / len(vals), "max": max(vals)} if vals else None


def finish_latency(partial: dict) -> dict:
    res = dict(partial)
    reward, tools = res["reward"], res["tools"]
    by_tool: dict[str, dict] = {}
    for e in tools:
        bt = e["by_tool"]
        for j, name in enumerate(bt["tool"]):
            cur = by_tool.setdefault(name, {"calls": 0, "sum": 0.0, "max": 0.0, "errors": 0})
            cur["calls"] += bt["calls"][j]
            cur["sum"] += bt["sum"][j]
            cur["max"] = max(cur["max"], bt["max"][j])
            known = cur["errors"] is not None and bt["errors"][j] is not None
            cur["errors"] = cur["errors"] + bt["errors"][j] if known else None
    for cur in by_tool.values():
        cur["mean"] = cur["sum"] / cur["calls"] if cur["calls"] else None
    calls = sum(e["calls"] for e in tools)
    errors = [e["errors"] for e in tools]
    res["summary"] = {
        "reward": {
            "steps": len(reward),
            **{
                k: _mean_max(e.get(k2) for e in reward)
                for k, k2 in (
                    ("max", "max"),
                    ("max_over_mean", "max_over_mean"),
                    ("share_of_step", "share_of_step"),
                    ("measured_share_of_step", "measured_share_of_step"),
                )
            },
        },
        "tools": {
            "steps": len(tools),
            "calls": calls,
            "sum": sum(e["sum"] for e in tools),
            "mean": (sum(e["sum"] for e in tools) / calls) if calls else None,
            "max": max((e["max"] for e in tools), default=None),
            "errors": None if (not tools or any(x is None for x in errors)) else sum(errors),
            "by_tool": {k: by_tool[k] for k in sorted(by_tool)},
        },
    }
    return json_safe(res)


def reduce_latency(partials: list[dict]) -> dict:
    if not partials:
        raise ValueError("nothing to reduce")
    merged = {
        "kind": "latency",
        "reward_phase": partials[0]["reward_phase"],
        "reward": sorted((e for p in partials for e in p["reward"]), key=lambda e: e["step"]),
        "tools": sorted((e for p in partials for e in p["tools"]), key=lambda e: e["step"]),
    }
    return finish_latency(merged)
