"""DP-rank load imbalance per training step, recorded and after rebalancing.

`analyze_imbalance(data, ...)` reads the `samples` columns step, group_idx, prompt_len,
response_len, dp_rank (and validate). Two loads per sample, s = prompt + response:

- ``tokens``: s (what verl logs as global_seqlen),
- ``cost``: 24576*s + s^2, verl's `calculate_workload` training-cost proxy (linear
  FLOPs of a 7B dense model plus quadratic attention; only ratios matter).

For each step and load: the recorded per-rank loads (summed over the samples the rank
held), and the loads after repartitioning the step's items over the same `dp_size` ranks
with `balancing.karmarkar_karp(..., equal_size=True)` (each rank gets the same number of
items, as verl does) and with `balancing.lpt`. Items are prompt groups by default (a
group's samples stay on one rank, as GRPO needs them together for the advantage); with
`keep_groups=False` they are single samples. Only the balanced loads are needed, so all
steps (and both loads) with the same item count are balanced at once by the batched
`balancing.karmarkar_karp_loads` / `balancing.lpt_loads`, which give exactly the loads
of the scalar functions (`per_step_imbalance(..., batched=False)` still calls those, one
step at a time; the tests compare the two).

Result fields:

``dp_size``, ``item`` ("group" or "sample"), ``cost_linear`` (24576)
``steps``: one entry per training step with ``step``, ``samples``, ``items`` and, for
    each load in {``tokens``, ``cost``}:
    ``recorded`` (load per dp rank 0..dp_size-1), ``mean``, ``recorded_max``,
    ``recorded_min``, ``max_over_mean``, ``max_over_min`` (None when a rank got
    nothing), ``largest_item``; ``kk_max``, ``kk_min``, ``kk_max_over_mean``,
    ``kk_max_over_min``, ``lpt_max``, ``lpt_min``, ``lpt_max_over_mean``,
    ``lpt_max_over_min``; ``kk_saving`` = 1 - kk_max / recorded_max and ``lpt_saving``
    likewise: the share of the slowest rank's time (training time, which every rank
    waits for) that balancing would save; negative when the heuristic did worse than the
    recorded assignment, which can happen (see balancing.py), and is reported as is.
    ``best_split`` ("recorded", "kk" or "lpt": the split with the smallest max, ties to
    the earlier), ``best_max`` and ``saving`` = max(0, 1 - best_max / recorded_max): what
    the best available split saves, never negative (a heuristic that loses to the
    recorded split is not a saving; the recorded split is then the best).
``summary``: per load: ``max_over_min`` and ``max_over_mean`` {mean, max} over steps,
    the same for kk and lpt, ``kk_saving`` / ``lpt_saving`` {mean, min, max}, and
    ``kk_time_saved`` / ``lpt_time_saved`` = 1 - sum of balanced maxima / sum of
    recorded maxima (the whole-run saving if step time follows the slowest rank);
    ``saving`` {mean, min, max} over steps and ``time_saved`` = 1 - sum of best maxima /
    sum of recorded maxima (>= 0), ``best_split_steps`` {recorded, kk, lpt}: steps where
    each split was best.

Bound stated in balancing.py and tested: the balanced max never exceeds
mean + largest item, so balancing never loses whenever recorded_max >= mean + largest_item.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt

from core.analysis.balancing import karmarkar_karp, karmarkar_karp_loads, lpt, lpt_loads, partition_loads
from core.analysis.data_efficiency import select_groups
from core.analysis.grouping import Groups, composite_key, group_rows, sorted_run_starts, training_mask
from core.analysis.stats import ratio
from core.analysis.tables import TraceData
from core.jsonable import json_safe

COST_LINEAR = 24576
LOADS = ("tokens", "cost")
BATCH_WEIGHTS = 1 << 22  # item weights balanced in one batch (bounds the temporaries)


def analyze_imbalance(
    data: TraceData,
    dp_size: int | None = None,
    keep_groups: bool = True,
    include_validation: bool = False,
    cost_linear: int = COST_LINEAR,
    groups: str = "all",
) -> dict:
    """Recorded vs KK/LPT-balanced DP loads per step (see module docstring).
    `groups` = "used": only the prompt groups DAPO used for training (needs its marks)."""
    data = select_groups(data, groups)
    res = finish_imbalance(per_step_imbalance(data, dp_size, keep_groups, include_validation, cost_linear))
    if groups != "all":
        res["groups"] = groups
    return res


def per_step_imbalance(
    data: TraceData,
    dp_size: int | None = None,
    keep_groups: bool = True,
    include_validation: bool = False,
    cost_linear: int = COST_LINEAR,
    *,
    batched: bool = True,
) -> dict:
    """Per-step figures (no summary); batched=False: the scalar reference path."""
    s = data.samples
    out: dict[str, Any] = {
        "kind": "imbalance",
        "dp_size": dp_size,
        "item": "group" if keep_groups else "sample",
        "cost_linear": cost_linear,
        "steps": [],
    }
    if s is None or s.dp_rank is None or len(s) == 0:
        return out
    keep = training_mask(s.validate, len(s), include_validation)
    every = bool(keep.all())  # no copies when every row is kept

    def rows(col: npt.ArrayLike) -> np.ndarray:
        return np.asarray(col) if every else np.asarray(col)[keep]

    step, rank = rows(s.step), rows(s.dp_rank)
    if len(step) == 0:
        return out
    seq = np.add(rows(s.prompt_len), rows(s.response_len), dtype=np.int64)
    cost = seq + cost_linear
    cost *= seq  # cost_linear * s + s^2, without a third temporary
    loads = {"tokens": seq, "cost": cost}
    k = max(int(dp_size or 0), int(rank.max()) + 1)
    out["dp_size"] = k
    by_step = group_rows(step)
    recorded = _recorded_loads(step, rank, loads, by_step, k)

    # items: prompt groups (or single samples), each with its summed loads
    if keep_groups:
        group = rows(s.group_idx)
        starts = sorted_run_starts(step, group)  # rows from the database are in key order
        if starts is not None:
            istep = step[starts]
            isums = {name: np.add.reduceat(v, starts) for name, v in loads.items()}
        else:
            items = group_rows(composite_key(step, group))
            istep = items.sort(step)[items.starts]
            isums = {name: items.sum(v) for name, v in loads.items()}
    else:
        order = None if by_step.order is None else np.argsort(step, kind="stable")
        istep = step if order is None else step[order]
        isums = {name: v if order is None else v[order] for name, v in loads.items()}

    lo = np.searchsorted(istep, by_step.keys, side="left")
    n_items = np.searchsorted(istep, by_step.keys, side="right") - lo
    if batched:
        balanced = balanced_loads(isums, lo, n_items, k)
    lo, n_items = lo.tolist(), n_items.tolist()
    for g, st in enumerate(by_step.keys.tolist()):
        i0, i1 = lo[g], lo[g] + n_items[g]
        entry = {"step": st, "samples": int(by_step.counts[g]), "items": i1 - i0}
        for name in LOADS:
            if batched:
                b = balanced[name]
                entry[name] = figures(
                    recorded[name][g].tolist(), b["largest"][g], {algo: b[algo][g] for algo in ("kk", "lpt")}
                )
            else:
                entry[name] = load_figures(recorded[name][g].tolist(), isums[name][i0:i1], k)
        out["steps"].append(entry)
    return out


def balanced_loads(item_loads: dict[str, np.ndarray], starts: np.ndarray, counts: np.ndarray, k: int) -> dict:
    """{load: {"kk": [...], "lpt": [...], "largest": [...]}}: per step g (whose items are
    item_loads[load][starts[g] : starts[g] + counts[g]]), the KK (equal size) and LPT
    per-rank loads as lists of k ints, and the largest item. Steps with the same item
    count go in one batch, both loads stacked (per-iteration numpy overhead is paid once
    for all of them), in blocks of at most BATCH_WEIGHTS weights."""
    n_steps = len(starts)
    out: dict[str, dict[str, list]] = {
        name: {"kk": [None] * n_steps, "lpt": [None] * n_steps, "largest": [0] * n_steps} for name in LOADS
    }
    for count in np.unique(counts).tolist():
        same = np.flatnonzero(counts == count)
        per_block = max(1, BATCH_WEIGHTS // max(2 * count, 1))
        for b0 in range(0, len(same), per_block):
            steps = same[b0 : b0 + per_block]
            index = starts[steps][:, None] + np.arange(count)
            weights = np.concatenate([item_loads[name][index] for name in LOADS])
            results = {
                "kk": karmarkar_karp_loads(weights, k, equal_size=True).tolist(),
                "lpt": lpt_loads(weights, k).tolist(),
                "largest": weights.max(axis=1).tolist() if count else [0] * len(weights),
            }
            for li, name in enumerate(LOADS):
                rows = slice(li * len(steps), (li + 1) * len(steps))
                for key, values in results.items():
                    for g, v in zip(steps.tolist(), values[rows]):
                        out[name][key][g] = v
    return out


def _recorded_loads(
    step: np.ndarray, rank: npt.ArrayLike, loads: dict[str, np.ndarray], by_step: Groups, k: int
) -> dict[str, np.ndarray]:
    """{load: (steps, k) int64 summed load per step (as in `by_step`) and dp rank}."""
    n_steps = len(by_step)
    rank = np.asarray(rank)
    if int(rank.min()) >= 0 and all(int(v.min()) >= 0 and v.sum(dtype=np.float64) < 2**53 for v in loads.values()):
        # one bincount per load: float64 sums of non-negative integers stay exact below 2^53
        if by_step.order is None:
            code = by_step.code()
        else:
            code = np.searchsorted(by_step.keys, step)
        cell = code * k + rank
        return {
            name: np.bincount(cell, weights=v, minlength=n_steps * k).astype(np.int64).reshape(n_steps, k)
            for name, v in loads.items()
        }
    # otherwise one sorted pass over (step, rank) with integer sums
    by_rank = group_rows(composite_key(step, rank))
    rstep, rrank = by_rank.sort(step)[by_rank.starts], by_rank.sort(rank)[by_rank.starts]
    r0 = np.searchsorted(rstep, by_step.keys, side="left")
    r1 = np.searchsorted(rstep, by_step.keys, side="right")
    out = {}
    for name, v in loads.items():
        sums = by_rank.sum(v)
        table = np.zeros((n_steps, k), dtype=np.int64)
        for g in range(n_steps):
            table[g][rrank[r0[g] : r1[g]]] = sums[r0[g] : r1[g]]
        out[name] = table
    return out


def load_figures(recorded: list[int], item_loads: npt.ArrayLike, k: int) -> dict:
    """Recorded vs KK- and LPT-balanced per-rank loads for one step and one load kind,
    by the scalar partition functions (the reference for the batched path)."""
    weights = np.asarray(item_loads)
    largest = weights.max().item() if len(weights) else 0
    return figures(
        recorded,
        largest,
        {
            "kk": _part_loads(weights, karmarkar_karp(weights, k, equal_size=True)),
            "lpt": _part_loads(weights, lpt(weights, k)),
        },
    )


def figures(recorded: list[int], largest_item: float, balanced: dict[str, list]) -> dict:
    """One step's figures for one load from its recorded per-rank loads, its largest
    item and the balanced per-rank loads {"kk": [...], "lpt": [...]} (plain numbers)."""
    total = sum(recorded)
    mean = total / len(recorded) if recorded else 0.0
    rmax, rmin = max(recorded, default=0), min(recorded, default=0)
    fig: dict[str, Any] = {
        "recorded": recorded,
        "mean": mean,
        "recorded_max": rmax,
        "recorded_min": rmin,
        "max_over_mean": ratio(rmax, mean),
        "max_over_min": ratio(rmax, rmin),
        "largest_item": largest_item,
    }
    for name in ("kk", "lpt"):
        loads = balanced[name]
        bmax, bmin = max(loads), min(loads)
        bmean = sum(loads) / len(loads)
        fig.update(
            {
                f"{name}_max": bmax,
                f"{name}_min": bmin,
                f"{name}_max_over_mean": ratio(bmax, bmean),
                f"{name}_max_over_min": ratio(bmax, bmin),
                f"{name}_saving": None if rmax == 0 else 1.0 - bmax / rmax,
            }
        )
    # the best split available: the recorded one when neither heuristic beats it
    best = min(("recorded", rmax), ("kk", fig["kk_max"]), ("lpt", fig["lpt_max"]), key=lambda kv: kv[1])
    fig.update(
        best_split=best[0],
        best_max=best[1],
        saving=None if rmax == 0 else max(0.0, 1.0 - best[1] / rmax),
    )
    return fig


def _part_loads(weights: np.ndarray, parts: list[list[int]]) -> list:
    """`balancing.partition_loads` in one reduceat (same values: exact integer sums)."""
    sizes = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    if weights.dtype.kind not in "iu" or not sizes.all():
        return partition_loads(weights, parts)
    flat = np.fromiter(itertools.chain.from_iterable(parts), dtype=np.int64, count=int(sizes.sum()))
    return np.add.reduceat(weights[flat], np.cumsum(sizes) - sizes).tolist()


def finish_imbalance(partial: dict) -> dict:
    res = dict(partial)
    steps = res["steps"]
    summary: dict[str, int | dict] = {"steps": len(steps)}
    for name in LOADS:
        figs = [e[name] for e in steps]
        part = {}
        for key in (
            "max_over_min",
            "max_over_mean",
            "kk_max_over_min",
            "kk_max_over_mean",
            "lpt_max_over_min",
            "lpt_max_over_mean",
        ):
            vals = [f[key] for f in figs if f[key] is not None]
            part[key] = {"mean": sum(vals) / len(vals), "max": max(vals)} if vals else None
        for algo in ("kk", "lpt"):
            vals = [f[f"{algo}_saving"] for f in figs if f[f"{algo}_saving"] is not None]
            part[f"{algo}_saving"] = (
                {"mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)} if vals else None
            )
            part[f"{algo}_time_saved"] = (
                1.0 - sum(f[f"{algo}_max"] for f in figs) / sum(f["recorded_max"] for f in figs)
                if figs and sum(f["recorded_max"] for f in figs) > 0
                else None
            )
        vals = [f["saving"] for f in figs if f.get("saving") is not None]
        part["saving"] = {"mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)} if vals else None
        recorded_total = sum(f["recorded_max"] for f in figs)
        part["time_saved"] = (
            1.0 - sum(f["best_max"] for f in figs) / recorded_total if figs and recorded_total > 0 else None
        )
        part["best_split_steps"] = {
            split: sum(1 for f in figs if f.get("best_split") == split) for split in ("recorded", "kk", "lpt")
        }
        summary[name] = part
    res["summary"] = summary
    return json_safe(res)


def reduce_imbalance(partials: list[dict]) -> dict:
    """Merge results over disjoint step ranges."""
    if not partials:
        raise ValueError("nothing to reduce")
    sizes = [p["dp_size"] for p in partials if p["dp_size"]]
    merged = {
        "kind": "imbalance",
        "dp_size": max(sizes) if sizes else None,
        "item": partials[0]["item"],
        "cost_linear": partials[0]["cost_linear"],
        "steps": sorted((e for p in partials for e in p["steps"]), key=lambda e: e["step"]),
    }
    res = finish_imbalance(merged)
    if "groups" in partials[0]:
        res["groups"] = partials[0]["groups"]
    return res
