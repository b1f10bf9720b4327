"""Length distributions per step: prompt, response and total (prompt + response).

`analyze_lengths(data, ...)` reads the `samples` columns step, prompt_len, response_len
and, when present, validate, truncated and task_id. Training and validation samples are
kept apart. Result fields (all plain JSON):

``max_response_len``, ``max_response_len_source``
    The trace's cap and where it came from: "param" (given), "trace"
    (TraceData.max_response_len: given at upload, recorded or inferred at ingestion),
    "inferred" (no cap known: the largest response length is taken as the cap when at
    least `infer_cap_min_hits` samples reach it exactly), or None.
``truncation_basis``
    How ``truncation_rate`` counts, by the one definition of core/analysis/truncation.py:
    "trace" (the per-sample ``truncated`` column, which ingestion settled: the engine's
    stop reason where recorded, else the response at the cap), "cap" (no such column:
    the share of responses at the cap), or None (unknown).
``bin_edges``
    `stats.LOG_BIN_EDGES`, shared by every histogram below (bin i is [e_i, e_{i+1})).
``steps`` / ``validation_steps``
    One entry per step, ascending: ``step``; ``prompt``, ``response``, ``total``: the
    `stats.distribution_stats` dict (count, sum, mean, std, cv, min, p10..p99, max,
    tail_ratio = max/mean, skewness, truncation_rate -- response only, None elsewhere);
    ``response`` also has ``n_at_max`` (samples equal to the step's max); ``hist``:
    {prompt, response, total} counts per log bin.
``tasks``
    When task ids are given: one entry per task with ``task_id``, ``task`` (name or
    None), ``steps`` (per step: step, prompt, response stats as above), ``hist``
    {prompt, response} over the task's training samples, ``summary`` (pooled, see below)
    and ``drift`` {response: {mean, p99}}.
``summary`` / ``validation_summary``
    {prompt, response, total}: pooled over all steps. count, sum, mean, std, cv, min,
    max, tail_ratio, skewness and truncation_rate are exact; p10..p99 are interpolated
    geometrically inside the pooled log histogram (bins are 2^(1/4) wide, so within
    ~19%); ``percentile_method`` says so. Plus ``steps``, ``samples`` and
    ``step_tail_ratio`` {min, mean, max} of the per-step response max/mean.
``drift``
    For prompt, response, total and each of mean, p99 and tail_ratio: `data.trend` over
    the training steps (least-squares slope per step, intercept, r2, first, last,
    relative_change = (last - first) / first, fitted_relative_change).

Pooled figures and drift are computed from the per-step entries only, so results over
disjoint step ranges merge exactly (`reduce_lengths`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

from core.analysis.data_efficiency import select_groups
from core.analysis.grouping import Groups, composite_key, group_rows, sort_within_groups
from core.analysis.stats import (
    LOG_BIN_EDGES,
    PERCENTILES,
    count_at_least,
    grouped_distribution_stats,
    grouped_log_histogram,
    trend,
)
from core.analysis.tables import TraceData
from core.jsonable import json_safe

QUANTITIES = ("prompt", "response", "total")
DRIFT_METRICS = ("mean", "p99", "tail_ratio")


def analyze_lengths(
    data: TraceData,
    max_response_len: int | None = None,
    by_task: bool = True,
    infer_cap_min_hits: int = 2,
    groups: str = "all",
) -> dict:
    """Per-step length statistics, per task, pooled summary and drift (see module doc).
    `groups` = "used": only the prompt groups DAPO used for training (needs its marks)."""
    res = finish_lengths(per_step_lengths(select_groups(data, groups), max_response_len, by_task), infer_cap_min_hits)
    if groups != "all":
        res["groups"] = groups
    return res


def per_step_lengths(data: TraceData, max_response_len: int | None = None, by_task: bool = True) -> dict:
    """The per-step part of the result (no summary/drift yet); mergeable across step ranges."""
    s = data.samples
    cap, source = None, None
    if max_response_len:
        cap, source = int(max_response_len), "param"
    elif data.max_response_len:
        cap, source = int(data.max_response_len), "trace"
    column = s is not None and s.truncated is not None
    out = {
        "kind": "lengths",
        "max_response_len": cap,
        "max_response_len_source": source,
        "truncation_basis": "trace" if column else ("cap" if cap else None),
        "bin_edges": LOG_BIN_EDGES.tolist(),
        "steps": [],
        "validation_steps": [],
        "tasks": [],
    }
    if s is None or len(s) == 0:
        return out
    prompt, response = _lengths(s.prompt_len), _lengths(s.response_len)
    validate = np.zeros(len(s), dtype=bool) if s.validate is None else np.asarray(s.validate, dtype=bool)
    truncated = None if s.truncated is None else np.asarray(s.truncated, dtype=bool)
    for name, mask in (("steps", ~validate), ("validation_steps", validate)):
        if mask.any():
            out[name] = _step_entries(
                _rows(s.step, mask), _rows(prompt, mask), _rows(response, mask), _rows(truncated, mask), cap
            )
    if by_task and s.task_id is not None:
        train = ~validate
        out["tasks"] = _task_entries(
            _rows(s.task_id, train),
            _rows(s.step, train),
            _rows(prompt, train),
            _rows(response, train),
            _rows(truncated, train),
            cap,
            data.task_names,
        )
    return out


def _lengths(col: npt.ArrayLike) -> np.ndarray:
    # integer columns stay in their width (sorting int32 is faster than int64)
    a = np.asarray(col)
    return a if np.issubdtype(a.dtype, np.integer) else a.astype(np.int64)


@overload
def _rows(col: np.ndarray, mask: np.ndarray) -> np.ndarray: ...
@overload
def _rows(col: None, mask: np.ndarray) -> None: ...
@overload
def _rows(col: np.ndarray | None, mask: np.ndarray) -> np.ndarray | None: ...
def _rows(col: np.ndarray | None, mask: np.ndarray) -> np.ndarray | None:
    """col[mask], without the copy when every row is kept (the common no-validation case)."""
    if col is None:
        return None
    return col if mask.all() else col[mask]


def _total(prompt: np.ndarray, response: np.ndarray) -> np.ndarray:
    if len(prompt) and int(prompt.max()) + int(response.max()) <= np.iinfo(np.int32).max:
        return np.add(prompt, response, dtype=np.result_type(prompt, response, np.int32))
    return np.add(prompt, response, dtype=np.int64)


def _group_stats(
    g: Groups, prompt: np.ndarray, response: np.ndarray, truncated: np.ndarray | None, cap: int | None, with_total: bool
) -> dict:
    """Per group of `g`: the stats dicts and log histograms of prompt, response (and total)."""
    starts, counts = g.starts, g.counts
    p, r = g.sort(prompt), g.sort(response)
    values = {"prompt": p, "response": r}
    if with_total:
        values["total"] = _total(p, r)
    stats, hists = {}, {}
    for name, v in values.items():
        v = sort_within_groups(v, starts, counts)
        at_cap = cap if name == "response" and truncated is None else None
        stats[name] = grouped_distribution_stats(v, starts, counts, at_cap)
        hists[name] = grouped_log_histogram(v, starts, counts)
        if name == "response":
            n_at_max = count_at_least(v, starts, counts, v[starts + counts - 1])
    rates = None
    if truncated is not None:
        rates = (np.add.reduceat(g.sort(truncated).astype(np.int64), starts) / counts).tolist()
    for i, st in enumerate(stats["response"]):
        st["n_at_max"] = int(n_at_max[i])
        if rates is not None:
            st["truncation_rate"] = rates[i]
    return {"stats": stats, "hists": hists}


def _step_entries(
    step: np.ndarray, prompt: np.ndarray, response: np.ndarray, truncated: np.ndarray | None, cap: int | None
) -> list[dict]:
    g = group_rows(np.asarray(step, dtype=np.int64))
    res = _group_stats(g, prompt, response, truncated, cap, with_total=True)
    stats, hists = res["stats"], {k: h.tolist() for k, h in res["hists"].items()}
    return [
        {
            "step": step_value,
            "prompt": stats["prompt"][i],
            "response": stats["response"][i],
            "total": stats["total"][i],
            "hist": {"prompt": hists["prompt"][i], "response": hists["response"][i], "total": hists["total"][i]},
        }
        for i, step_value in enumerate(g.keys.tolist())
    ]


def _task_entries(
    task: np.ndarray,
    step: np.ndarray,
    prompt: np.ndarray,
    response: np.ndarray,
    truncated: np.ndarray | None,
    cap: int | None,
    names: Mapping[int, str],
) -> list[dict]:
    task = np.asarray(task, dtype=np.int64)
    step = np.asarray(step, dtype=np.int64)
    g = group_rows(composite_key(task, step))
    task_of, step_of = g.sort(task)[g.starts].tolist(), g.sort(step)[g.starts].tolist()
    res = _group_stats(g, prompt, response, truncated, cap, with_total=False)
    stats, hists = res["stats"], res["hists"]
    tasks: dict[int, dict] = {}
    for i, (tid, st) in enumerate(zip(task_of, step_of)):
        # groups are ordered by (task, step): a task's groups are contiguous
        entry = tasks.setdefault(tid, {"task_id": tid, "task": names.get(tid), "steps": [], "_groups": [i, i + 1]})
        entry["_groups"][1] = i + 1
        entry["steps"].append({"step": st, "prompt": stats["prompt"][i], "response": stats["response"][i]})
    for entry in tasks.values():
        lo, hi = entry.pop("_groups")
        # the task's histogram over all its samples is the sum of its per-step ones
        entry["hist"] = {q: hists[q][lo:hi].sum(axis=0).tolist() for q in ("prompt", "response")}
    return [tasks[k] for k in sorted(tasks)]


# --------------------------------------------------------------------------- finish / reduce


def finish_lengths(partial: dict, infer_cap_min_hits: int = 2) -> dict:
    """Add truncation inference, pooled summaries and drift to a per-step result."""
    res = dict(partial)
    if res["truncation_basis"] is None:
        _infer_truncation(res, infer_cap_min_hits)
    res["summary"] = _summary(res["steps"], QUANTITIES)
    res["validation_summary"] = _summary(res["validation_steps"], QUANTITIES)
    res["drift"] = {
        q: {m: trend([e["step"] for e in res["steps"]], [e[q].get(m) for e in res["steps"]]) for m in DRIFT_METRICS}
        for q in QUANTITIES
    }
    for task in res["tasks"]:
        task["summary"] = _summary(task["steps"], ("prompt", "response"), task["hist"])
        task["drift"] = {
            "response": {
                m: trend([e["step"] for e in task["steps"]], [e["response"].get(m) for e in task["steps"]])
                for m in ("mean", "p99")
            }
        }
    return json_safe(res)


def reduce_lengths(partials: list[dict], infer_cap_min_hits: int = 2) -> dict:
    """Merge results computed over disjoint step ranges into the whole-trace result."""
    if not partials:
        raise ValueError("nothing to reduce")
    first = partials[0]
    inferred = first["max_response_len_source"] == "inferred"  # a part's inference: infer again over all
    merged = {
        "kind": "lengths",
        "max_response_len": None if inferred else first["max_response_len"],
        "max_response_len_source": None if inferred else first["max_response_len_source"],
        "truncation_basis": None if inferred else first["truncation_basis"],
        "bin_edges": first["bin_edges"],
        "steps": sorted((e for p in partials for e in p["steps"]), key=lambda e: e["step"]),
        "validation_steps": sorted((e for p in partials for e in p["validation_steps"]), key=lambda e: e["step"]),
    }
    tasks: dict[int, dict] = {}
    for p in partials:
        for t in p["tasks"]:
            cur = tasks.get(t["task_id"])
            if cur is None:
                tasks[t["task_id"]] = {
                    "task_id": t["task_id"],
                    "task": t["task"],
                    "steps": list(t["steps"]),
                    "hist": {k: list(v) for k, v in t["hist"].items()},
                }
            else:
                cur["steps"].extend(t["steps"])
                cur["hist"] = {k: [a + b for a, b in zip(cur["hist"][k], t["hist"][k])] for k in cur["hist"]}
    for t in tasks.values():
        t["steps"].sort(key=lambda e: e["step"])
    merged["tasks"] = [tasks[k] for k in sorted(tasks)]
    res = finish_lengths(merged, infer_cap_min_hits)
    if "groups" in first:
        res["groups"] = first["groups"]
    return res


def _infer_truncation(res: dict, min_hits: int) -> None:
    """No cap known: take the trace's largest response length as the cap if it repeats."""
    main = [e["response"] for e in res["steps"] + res["validation_steps"]]
    everything = main + [e["response"] for t in res["tasks"] for e in t["steps"]]
    cap = max((st["max"] for st in main), default=None)
    hits = sum(st["n_at_max"] for st in main if st["max"] == cap) if cap is not None else 0
    if cap is None or hits < min_hits:
        res["max_response_len"], res["max_response_len_source"] = None, None
        for st in everything:
            st["truncation_rate"] = None
        return
    res["max_response_len"], res["max_response_len_source"] = int(cap), "inferred"
    res["truncation_basis"] = "cap"
    for st in everything:
        st["truncation_rate"] = st["n_at_max"] / st["count"] if st["max"] == cap else 0.0


def _summary(entries: list[dict], quantities: Iterable[str], hists: dict | None = None) -> dict:
    out: dict[str, dict | int | None] = {}
    for q in quantities:
        hist = hists[q] if hists is not None else _add_lists([e["hist"][q] for e in entries])
        out[q] = pool_stats([e[q] for e in entries], hist)
    out["steps"] = len(entries)
    out["samples"] = int(sum(e["response"]["count"] for e in entries))
    tails = [e["response"]["tail_ratio"] for e in entries if e["response"].get("count")]
    out["step_tail_ratio"] = {"min": min(tails), "mean": sum(tails) / len(tails), "max": max(tails)} if tails else None
    return out


def _add_lists(lists: list[list[int]]) -> list[int]:
    if not lists:
        return [0] * (len(LOG_BIN_EDGES) - 1)
    return np.sum(np.asarray(lists, dtype=np.int64), axis=0).tolist()


def pool_stats(entries: list[dict], hist: list[int]) -> dict:
    """`distribution_stats`-shaped figures for the union of groups, from their stats.

    Moments are pooled exactly from (count, mean, std, skewness); percentiles are read
    from the pooled log histogram (geometric interpolation inside a bin).
    """
    entries = [e for e in entries if e.get("count")]
    n = sum(e["count"] for e in entries)
    if n == 0:
        return {"count": 0}
    s1 = sum(e["sum"] for e in entries)
    mean = s1 / n
    s2 = sum(e["count"] * (e["std"] ** 2 + e["mean"] ** 2) for e in entries)
    s3 = sum(
        e["count"] * (e["skewness"] * e["std"] ** 3 + 3 * e["mean"] * e["std"] ** 2 + e["mean"] ** 3) for e in entries
    )
    var = max(s2 / n - mean**2, 0.0)
    std = math.sqrt(var)
    m3 = s3 / n - 3 * mean * s2 / n + 2 * mean**3
    lo, hi = min(e["min"] for e in entries), max(e["max"] for e in entries)

    def pooled_rate(key: str) -> float | None:
        rates = [e.get(key) for e in entries]
        return sum(e["count"] * e[key] for e in entries) / n if rates and all(r is not None for r in rates) else None

    out = {
        "count": n,
        "sum": s1,
        "mean": mean,
        "std": std,
        "cv": std / mean if mean else 0.0,
        "min": lo,
        **{f"p{q}": v for q, v in zip(PERCENTILES, hist_percentiles(hist, PERCENTILES, lo, hi))},
        "max": hi,
        "tail_ratio": hi / mean if mean else 0.0,
        "skewness": m3 / std**3 if std > 0 else 0.0,
        "truncation_rate": pooled_rate("truncation_rate"),
        "percentile_method": "log-histogram",
    }
    return out


def hist_percentiles(
    hist: npt.ArrayLike, qs: Sequence[float], lo: float | None = None, hi: float | None = None
) -> list[float | None]:
    """Percentiles from counts per `LOG_BIN_EDGES` bin, clamped to [lo, hi]."""
    h = np.asarray(hist, dtype=np.float64)
    n = h.sum()
    if n == 0:
        return [None] * len(qs)
    cum = np.cumsum(h)
    out = []
    for q in qs:
        target = q / 100.0 * n
        i = int(np.searchsorted(cum, target, side="left"))
        i = min(i, len(h) - 1)
        before = cum[i] - h[i]
        frac = 0.0 if h[i] == 0 else min(max((target - before) / h[i], 0.0), 1.0)
        e0, e1 = float(LOG_BIN_EDGES[i]), float(LOG_BIN_EDGES[i + 1])
        v = e0 * (e1 / e0) ** frac
        if lo is not None:
            v = max(v, float(lo))
        if hi is not None:
            v = min(v, float(hi))
        out.append(v)
    return out
