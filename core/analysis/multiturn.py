"""Multi-turn (agentic / tool-use) rollouts: turns, tool calls, context growth, prefix
cache, and engine latency against tokens.

`analyze_multiturn(data, ...)` reads the `turns` table (step, group_idx, sample_idx,
turn, prompt_tokens, cached_tokens, completion_tokens, engine_latency_s,
tool_call_count), `tool_calls`, and the `samples` columns num_turns / num_tool_calls.
A trajectory is one (step, group_idx, sample_idx). Validation trajectories
(samples.validate) are left out unless `include_validation`.

Tool calls per trajectory (``tool_calls_basis`` says which was used): the number of
stored tool-call rows of the trajectory ("tool_calls") when the trace has tool-call
rows; else the trajectory's own count samples.num_tool_calls ("samples"); else, as a
last resort, the sum of the per-turn tool_call_count ("turns"). The per-turn counts
are not summed when a trajectory-level count exists: in Search-R1 traces a turn's
tool_call_count is not the number of calls that turn made (a 2-turn trajectory with
12 calls records [1, 42]), so their sum overstates calls up to 3x.

Result fields:

``steps``: one entry per step:
    ``step``, ``trajectories``, ``turns`` (turn rows), ``turns_mean``, ``turns_max``,
    ``turns_hist`` (list: index = turns per trajectory, value = trajectories),
    ``tool_calls_mean``, ``tool_calls_max``, ``tool_calls_hist`` (same shape; None when
    the trace has no tool-call counts), ``tool_calls_basis`` (see above),
    ``prompt_tokens``, ``cached_tokens`` (sums over turns), ``cache_hit_rate`` = cached /
    prompt tokens, ``by_turn``: a column dict indexed by turn number {turn, count, prompt_sum, cached_sum, completion_sum,
    latency_sum, prompt_mean (context growth), cached_mean, completion_mean,
    latency_mean, cache_hit_rate}, and ``latency_fit`` (see below) of the step's turns.
``latency_fit``: least squares engine_latency_s ~ a + b * prompt_tokens +
    c * completion_tokens over turns: {n, a (s), b (s per prompt token), c (s per
    completion token), r2, caveats}: ``caveats`` says in words when the fit is not to
    be read as per-token costs (R² below `LOW_R2`: tokens explain little of the latency;
    a negative coefficient: not a physical cost); ``fit_sums`` holds its normal-equation sums (features in
    thousands of tokens) so fits merge across step ranges.
``totals`` (additive across step ranges): ``latency_by_prompt`` and
    ``latency_by_completion``: {count, latency_sum} per `stats.LOG_BIN_EDGES` bin of the
    turn's prompt / completion tokens; ``fit_sums``.
``summary``: ``trajectories``, ``turns_mean``, ``tool_calls_mean``, ``turns_hist``,
    ``tool_calls_hist``, ``tool_calls_basis``, ``cache_hit_rate``, ``by_turn`` (as per step, over all steps),
    ``latency_fit`` (all turns), ``latency_by_prompt`` / ``latency_by_completion``
    {bin_lo, bin_hi, count, latency_mean} for non-empty bins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from core.analysis.grouping import Groups, composite_key, group_rows, training_mask, validation_trajectory_filter
from core.analysis.stats import LOG_BIN_EDGES, ratio
from core.analysis.tables import TraceData
from core.jsonable import json_safe

N_BINS = len(LOG_BIN_EDGES) - 1
KTOK = 1000.0  # fit features in thousands of tokens keep the normal equations well scaled


def analyze_multiturn(data: TraceData, include_validation: bool = False) -> dict:
    """Per-step multi-turn figures and merged summary (see module docstring)."""
    return finish_multiturn(per_step_multiturn(data, include_validation))


def _bin(values: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(LOG_BIN_EDGES, np.maximum(values, 1), side="right") - 1
    return np.clip(idx, 0, N_BINS - 1)


def fit_sums(prompt: np.ndarray | Sequence[float], completion: npt.ArrayLike, latency: npt.ArrayLike) -> dict:
    """Normal-equation sums for latency ~ a + b*prompt + c*completion (features / 1000)."""
    return fit_sums_by_group(np.zeros(len(prompt), dtype=np.int64), 1, prompt, completion, latency)[0]


def fit_sums_by_group(
    code: npt.ArrayLike, n_groups: int, prompt: npt.ArrayLike, completion: npt.ArrayLike, latency: npt.ArrayLike
) -> list[dict]:
    """`fit_sums` for each group code 0..n_groups-1, in one vectorised pass."""
    p = np.asarray(prompt, dtype=np.float64) / KTOK
    c = np.asarray(completion, dtype=np.float64) / KTOK
    y = np.asarray(latency, dtype=np.float64)
    ok = np.isfinite(p) & np.isfinite(c) & np.isfinite(y)
    code, p, c, y = np.asarray(code)[ok], p[ok], c[ok], y[ok]

    def total(w: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(code, weights=w, minlength=n_groups)

    n, sp, sc, spp, scc, spc = total(), total(p), total(c), total(p * p), total(c * c), total(p * c)
    sy, spy, scy, syy = total(y), total(p * y), total(c * y), total(y * y)
    return [
        {
            "n": int(n[g]),
            "xtx": [[n[g], sp[g], sc[g]], [sp[g], spp[g], spc[g]], [sc[g], spc[g], scc[g]]],
            "xty": [sy[g], spy[g], scy[g]],
            "y_sum": sy[g],
            "yy": syy[g],
        }
        for g in range(n_groups)
    ]


def add_fit_sums(a: dict, b: dict) -> dict:
    return {
        "n": a["n"] + b["n"],
        "xtx": (np.asarray(a["xtx"]) + np.asarray(b["xtx"])).tolist(),
        "xty": (np.asarray(a["xty"]) + np.asarray(b["xty"])).tolist(),
        "y_sum": a["y_sum"] + b["y_sum"],
        "yy": a["yy"] + b["yy"],
    }


def solve_fit(sums: dict) -> dict:
    """Coefficients and r2 from `fit_sums`; None where the data cannot determine them."""
    n = sums["n"]
    out = {"n": n, "a": None, "b": None, "c": None, "r2": None, "caveats": []}
    if n < 3:
        return out
    xtx, xty = np.asarray(sums["xtx"]), np.asarray(sums["xty"])
    beta, *_ = np.linalg.lstsq(xtx, xty, rcond=None)
    sse = sums["yy"] - 2 * beta @ xty + beta @ xtx @ beta
    sst = sums["yy"] - sums["y_sum"] ** 2 / n
    out.update(
        a=float(beta[0]), b=float(beta[1]) / KTOK, c=float(beta[2]) / KTOK, r2=float(1 - sse / sst) if sst > 0 else None
    )
    out["caveats"] = fit_caveats(out)
    return out


# Below this R² the token counts explain too little of the latency to read the fit as costs.
LOW_R2 = 0.5


def fit_caveats(fit: dict) -> list[str]:
    """Why the latency fit should not be read as per-token costs (empty: no reason)."""
    out = []
    if fit.get("r2") is not None and fit["r2"] < LOW_R2:
        out.append(
            f"R² {fit['r2']:.2f} < {LOW_R2}: token counts explain little of the latency "
            "(batching, queueing and cache hits vary it)"
        )
    for key, what in (("b", "prompt"), ("c", "completion"), ("a", "fixed")):
        v = fit.get(key)
        if v is not None and v < 0:
            out.append(f"negative {what} coefficient: not a physical cost (correlated inputs or a poor model)")
    return out


def _trim(hist: np.ndarray) -> list[int]:
    nz = np.flatnonzero(hist)
    return hist[: nz[-1] + 1].tolist() if len(nz) else []


def per_step_multiturn(data: TraceData, include_validation: bool = False) -> dict:
    zero_bins = {"count": [0] * N_BINS, "latency_sum": [0.0] * N_BINS}
    out = {
        "kind": "multiturn",
        "steps": [],
        "totals": {
            "latency_by_prompt": zero_bins,
            "latency_by_completion": dict(zero_bins),
            "fit_sums": fit_sums([], [], []),
        },
    }
    t = data.turns
    if t is not None and len(t):
        _from_turns(data, include_validation, out)
    elif data.samples is not None and data.samples.num_turns is not None and len(data.samples):
        _from_samples(data, include_validation, out)
    return out


def _per_trajectory_steps(traj_step: np.ndarray, n_turns: np.ndarray, n_tools: np.ndarray | None) -> tuple:
    """Per-step trajectory figures from per-trajectory arrays (traj_step ascending)."""
    sg = group_rows(traj_step)
    code = sg.code()
    entries = []
    tturns = np.add.reduceat(n_turns, sg.starts)
    mturns = np.maximum.reduceat(n_turns, sg.starts)
    thist = np.bincount(code * (int(n_turns.max()) + 1) + n_turns, minlength=len(sg) * (int(n_turns.max()) + 1))
    thist = thist.reshape(len(sg), -1)
    if n_tools is not None:
        w = int(n_tools.max()) + 1
        ctools = np.add.reduceat(n_tools, sg.starts)
        mtools = np.maximum.reduceat(n_tools, sg.starts)
        chist = np.bincount(code * w + n_tools, minlength=len(sg) * w).reshape(len(sg), -1)
    for i in range(len(sg)):
        n = int(sg.counts[i])
        entries.append(
            {
                "step": int(sg.keys[i]),
                "trajectories": n,
                "turns": int(tturns[i]),
                "turns_mean": float(tturns[i]) / n,
                "turns_max": int(mturns[i]),
                "turns_hist": _trim(thist[i]),
                "tool_calls_mean": None if n_tools is None else float(ctools[i]) / n,
                "tool_calls_max": None if n_tools is None else int(mtools[i]),
                "tool_calls_hist": None if n_tools is None else _trim(chist[i]),
            }
        )
    return sg, entries


def _from_samples(data: TraceData, include_validation: bool, out: dict) -> None:
    s = data.samples
    assert s is not None  # checked by analyze_multiturn
    keep = training_mask(s.validate, len(s), include_validation)
    step = np.asarray(s.step, dtype=np.int64)[keep]
    order = np.argsort(step, kind="stable")
    n_turns = np.asarray(s.num_turns, dtype=np.int64)[keep][order]
    n_tools = None if s.num_tool_calls is None else np.asarray(s.num_tool_calls, dtype=np.int64)[keep][order]
    if len(step) == 0:
        return
    _, entries = _per_trajectory_steps(step[order], n_turns, n_tools)
    for e in entries:
        e.update(
            tool_calls_basis=None if n_tools is None else "samples",
            prompt_tokens=None,
            cached_tokens=None,
            cache_hit_rate=None,
            by_turn=None,
            latency_fit=None,
            fit_sums=None,
        )
    out["steps"] = entries


def _matched_counts(traj_keys: np.ndarray, row_keys: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per trajectory key (sorted, unique): the sum of `weights` of the rows with that key."""
    pos = np.searchsorted(traj_keys, row_keys)
    pos_ok = pos < len(traj_keys)
    hit = np.zeros(len(row_keys), dtype=bool)
    hit[pos_ok] = traj_keys[pos[pos_ok]] == row_keys[pos_ok]
    return np.bincount(pos[hit], weights=weights[hit], minlength=len(traj_keys)).astype(np.int64)


def _from_turns(data: TraceData, include_validation: bool, out: dict) -> None:
    t = data.turns
    assert t is not None  # checked by analyze_multiturn
    keep = np.ones(len(t), dtype=bool)
    if not include_validation:
        keep = validation_trajectory_filter(data, t.step, t.group_idx, t.sample_idx)
    step = np.asarray(t.step, dtype=np.int64)[keep]
    if len(step) == 0:
        return
    n = len(step)

    def col(x: npt.ArrayLike | None, dtype: npt.DTypeLike, fill: float) -> np.ndarray:
        return np.full(n, fill, dtype=dtype) if x is None else np.asarray(x, dtype=dtype)[keep]

    grp, smp = col(t.group_idx, np.int64, 0), col(t.sample_idx, np.int64, 0)
    turn = col(t.turn, np.int64, 0)
    prompt = col(t.prompt_tokens, np.int64, 0)
    cached = col(t.cached_tokens, np.int64, 0)
    completion = col(t.completion_tokens, np.int64, 0)
    latency = col(t.engine_latency_s, np.float64, np.nan)

    traj_step, n_turns, n_tools, basis = _trajectories(data, keep, step, grp, smp)
    sg, entries = _per_trajectory_steps(traj_step, n_turns, n_tools)
    for e in entries:
        e["tool_calls_basis"] = basis
    total_fit = _add_turn_figures(entries, sg, step, turn, prompt, cached, completion, latency)
    out["steps"] = entries
    lat_ok = np.isfinite(latency)
    out["totals"] = {
        "latency_by_prompt": _latency_bins(prompt[lat_ok], latency[lat_ok]),
        "latency_by_completion": _latency_bins(completion[lat_ok], latency[lat_ok]),
        "fit_sums": total_fit,
    }


def _trajectories(
    data: TraceData, keep: np.ndarray, step: np.ndarray, grp: np.ndarray, smp: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str | None]:
    """The turn rows grouped by (step, group, sample): each trajectory's step, turn count
    and tool-call count (tool-call rows, else samples.num_tool_calls, else the turns'
    own counts, matched by key), and which of those the counts come from."""
    t, tc, s = data.turns, data.tool_calls, data.samples
    assert t is not None
    n = len(step)
    other: tuple[np.ndarray, ...] | None = None
    weights = np.zeros(0, dtype=np.int64)
    basis = None
    if tc is not None:  # present (maybe empty in this step range) when the trace has tool calls
        other, basis = (tc.step, tc.group_idx, tc.sample_idx), "tool_calls"
        weights = np.ones(len(tc), dtype=np.int64)
    elif s is not None and s.num_tool_calls is not None and len(s):
        other, basis = (s.step, s.group_idx, s.sample_idx), "samples"
        weights = np.asarray(s.num_tool_calls, dtype=np.int64)
    elif t.tool_call_count is not None:
        basis = "turns"
    cols: tuple[np.ndarray, ...] = (step, grp, smp)
    if other is not None:
        cols = tuple(np.concatenate([a, np.asarray(b, dtype=np.int64)]) for a, b in zip(cols, other))
    key = composite_key(*cols)
    tkey, okey = key[:n], key[n:]
    tg = group_rows(tkey)
    n_tools: np.ndarray | None = None
    if other is not None:
        n_tools = _matched_counts(tg.keys, okey, weights)
    elif basis == "turns" and t.tool_call_count is not None:
        n_tools = tg.sum(np.asarray(t.tool_call_count, dtype=np.int64)[keep])
    return tg.sort(step)[tg.starts], tg.counts, n_tools, basis


def _add_turn_figures(
    entries: list[dict],
    sg: Groups,
    step: np.ndarray,
    turn: np.ndarray,
    prompt: np.ndarray,
    cached: np.ndarray,
    completion: np.ndarray,
    latency: np.ndarray,
) -> dict:
    """Each step's context growth, cache hits, per-turn figures and latency fit, added to
    its entry; returns the fit's sums over every step."""
    # per (step, turn number): sums for context growth, cache hits and latency
    step_code = np.searchsorted(sg.keys, step)
    width = int(turn.max()) + 1
    cell = step_code * width + turn
    size = len(sg) * width

    def by_cell(weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(cell, weights=weights, minlength=size).reshape(len(sg), width)

    cnt = by_cell()
    psum, csum, osum = by_cell(prompt), by_cell(cached), by_cell(completion)
    has_lat = np.isfinite(latency)
    lsum = by_cell(np.where(has_lat, latency, 0.0))
    lcnt = by_cell(has_lat.astype(np.float64))
    ptot, ctot = psum.sum(axis=1), csum.sum(axis=1)

    step_fits = fit_sums_by_group(step_code, len(sg), prompt, completion, latency)
    total_fit = fit_sums([], [], [])
    for i, e in enumerate(entries):
        fs = step_fits[i]
        total_fit = add_fit_sums(total_fit, fs)
        turns_here = np.flatnonzero(cnt[i])
        last = int(turns_here[-1]) + 1 if len(turns_here) else 0
        e.update(
            prompt_tokens=int(ptot[i]),
            cached_tokens=int(ctot[i]),
            cache_hit_rate=ratio(ctot[i], ptot[i]),
            by_turn=_by_turn(
                cnt[i, :last], psum[i, :last], csum[i, :last], osum[i, :last], lsum[i, :last], lcnt[i, :last]
            ),
            latency_fit=solve_fit(fs),
            fit_sums=fs,
        )
    return total_fit


def _latency_bins(tokens: np.ndarray, latency: np.ndarray) -> dict:
    """Turns counted and their latency summed per token-count bin."""
    bins = _bin(tokens)
    return {
        "count": np.bincount(bins, minlength=N_BINS).tolist(),
        "latency_sum": np.bincount(bins, weights=latency, minlength=N_BINS).tolist(),
    }


def _by_turn(
    cnt: np.ndarray, psum: np.ndarray, csum: np.ndarray, osum: np.ndarray, lsum: np.ndarray, lcnt: np.ndarray
) -> dict:
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "turn": list(range(len(cnt))),
            "count": cnt.astype(np.int64).tolist(),
            "prompt_sum": psum.tolist(),
            "cached_sum": csum.tolist(),
            "completion_sum": osum.tolist(),
            "latency_sum": lsum.tolist(),
            "latency_count": lcnt.astype(np.int64).tolist(),
            "prompt_mean": (psum / cnt).tolist(),
            "cached_mean": (csum / cnt).tolist(),
            "completion_mean": (osum / cnt).tolist(),
            "latency_mean": (lsum / lcnt).tolist(),
            "cache_hit_rate": (csum / psum).tolist(),
        }


def _add_padded(items: Iterable[npt.ArrayLike | None]) -> np.ndarray:
    lists = [np.asarray(x, dtype=np.float64) for x in items if x is not None]
    if not lists:
        return np.zeros(0)
    out = np.zeros(max(len(x) for x in lists))
    for x in lists:
        out[: len(x)] += x
    return out


def finish_multiturn(partial: dict) -> dict:
    res = dict(partial)
    steps = res["steps"]
    trajectories = sum(e["trajectories"] for e in steps)
    has_tools = bool(steps) and all(e["tool_calls_mean"] is not None for e in steps)
    turns_rows = [e for e in steps if e.get("by_turn")]
    summary = {
        "steps": len(steps),
        "trajectories": trajectories,
        "turns_mean": ratio(sum(e["turns"] for e in steps), trajectories),
        "turns_hist": _add_padded([e["turns_hist"] for e in steps]).astype(np.int64).tolist(),
        "tool_calls_mean": (
            ratio(sum(e["tool_calls_mean"] * e["trajectories"] for e in steps), trajectories) if has_tools else None
        ),
        "tool_calls_hist": (
            _add_padded([e["tool_calls_hist"] for e in steps]).astype(np.int64).tolist() if has_tools else None
        ),
        "tool_calls_basis": next((e.get("tool_calls_basis") for e in steps if e.get("tool_calls_basis")), None),
        "cache_hit_rate": (
            ratio(sum(e["cached_tokens"] for e in turns_rows), sum(e["prompt_tokens"] for e in turns_rows))
            if turns_rows
            else None
        ),
        "by_turn": None,
        "latency_fit": solve_fit(res["totals"]["fit_sums"]),
        "latency_by_prompt": _bins(res["totals"]["latency_by_prompt"]),
        "latency_by_completion": _bins(res["totals"]["latency_by_completion"]),
    }
    if turns_rows:
        parts = {
            k: _add_padded([e["by_turn"][k] for e in turns_rows])
            for k in ("count", "prompt_sum", "cached_sum", "completion_sum", "latency_sum", "latency_count")
        }
        summary["by_turn"] = _by_turn(
            parts["count"],
            parts["prompt_sum"],
            parts["cached_sum"],
            parts["completion_sum"],
            parts["latency_sum"],
            parts["latency_count"],
        )
    res["summary"] = summary
    return json_safe(res)


def _bins(b: dict) -> dict:
    cnt = np.asarray(b["count"], dtype=np.float64)
    nz = np.flatnonzero(cnt)
    return {
        "bin_lo": LOG_BIN_EDGES[nz].tolist(),
        "bin_hi": LOG_BIN_EDGES[nz + 1].tolist(),
        "count": cnt[nz].astype(np.int64).tolist(),
        "latency_mean": (np.asarray(b["latency_sum"], dtype=np.float64)[nz] / cnt[nz]).tolist(),
    }


def reduce_multiturn(partials: list[dict]) -> dict:
    if not partials:
        raise ValueError("nothing to reduce")
    totals = {
        name: {k: np.sum([p["totals"][name][k] for p in partials], axis=0).tolist() for k in ("count", "latency_sum")}
        for name in ("latency_by_prompt", "latency_by_completion")
    }
    fs = partials[0]["totals"]["fit_sums"]
    for p in partials[1:]:
        fs = add_fit_sums(fs, p["totals"]["fit_sums"])
    totals["fit_sums"] = fs
    merged = {
        "kind": "multiturn",
        "steps": sorted((e for p in partials for e in p["steps"]), key=lambda e: e["step"]),
        "totals": totals,
    }
    return finish_multiturn(merged)
