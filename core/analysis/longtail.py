"""The rollout long tail: how long engines wait for their longest samples.

Model (the design's "one decoding slot per sample, equal per-token speed"): every sample
of a step starts decoding at time 0 and emits one token per time unit, so a sample of
response length L finishes at time L. An engine (the rollout replica that held the
sample: `engine_key` = "dp_rank" by default, or "rank", or None for one engine per step;
a missing column also means one engine per step, and the result's ``engine_key`` says
which was used) is busy until its longest sample ends; the step's rollout ends when the slowest engine
does, at T = the step's longest response. Time is in token-time units (one decode
iteration); with the measured rollout time t_gen of the step, one unit is t_gen / T
seconds. Validation samples are left out unless `include_validation`.

Basis (``basis`` in the result): when every kept sample has a measured completion time
-- samples.latency_s (the summed engine_latency_s of its turns, multi-turn traces) plus
the summed latency_s of its tool calls -- the figures below use those times in seconds
instead of response lengths ("time"); otherwise response lengths in token-time units
("tokens"). With "time", rollout_len, tokens, tail_len and the idle accounts are in
seconds (``tokens`` is then the summed completion time), and idle_engine_seconds /
tail_seconds are the measured figures.

Per engine e with n_e samples, token sum S_e, longest M_e and mean m_e = S_e / n_e:
- ``idle_fraction`` = 1 - S_e / (n_e * M_e): share of the engine's slot-time that is
  empty before it finishes (the design's definition);
- ``tail_time_share``: with f = `tail_fraction` (0.1), the time from the moment a share
  1 - f of the engine's samples have finished (the ceil((1 - f) * n)-th shortest length)
  to the end, over M_e: how much of the rollout the last 10% of requests take (the paper
  reports up to 50%);
- ``tail_sample_share``: share of samples still decoding during the last f of the
  rollout time (length > (1 - f) * M_e).

Per step (entries of ``steps``), over the step's samples and engines:
``step``, ``samples``, ``engines``, ``rollout_len`` (T), ``tokens`` (sum of lengths),
``tail_len`` (the length by which 1 - f of all samples finished), ``tail_time_share``,
``tail_sample_share`` (as above over all the step's samples), ``at_max_share`` (share
of the step's samples equal to its longest, e.g. at the length cap) and ``tail_tied``
(True when tail_len = the longest: more than `tail_fraction` of the samples end together
at the longest length, e.g. the cap, so tail_time_share is 0 by ties, not because the
tail is short), ``basis`` (as the result's),
and the engine-time
account, counting an engine as busy in proportion to its running samples:
``engine_time`` = E * T, ``idle_token_time`` = sum_e (T - m_e) (engine x token-time the
engines idle), split into ``idle_within_engines`` = sum_e (M_e - m_e) (each engine's own
tail) and ``idle_waiting`` = sum_e (T - M_e) (finished engines waiting for the slowest);
``idle_fraction`` = idle_token_time / engine_time; ``engine_idle_fraction_mean`` /
``_max`` over engines; ``t_gen`` (seconds, when the trace has it), ``idle_engine_seconds``
= idle_token_time * t_gen / T, ``tail_seconds`` = tail_time_share * t_gen (None without
t_gen); ``engine`` is a column dict {engine, samples, tokens, max_len, mean_len,
idle_fraction, tail_time_share, tail_sample_share} with one value per engine.

``summary``: ``steps``; {mean, max} over steps of idle_fraction, tail_time_share,
tail_sample_share and engine_idle_fraction_mean; sums of idle_token_time, engine_time,
and of idle_engine_seconds / t_gen over the steps that have them; ``tail_tied_steps``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from core.analysis.grouping import Groups, composite_key, group_blocks, group_rows, sort_within_groups, training_mask
from core.analysis.stats import count_at_least
from core.analysis.tables import TraceData
from core.jsonable import json_safe


def analyze_longtail(
    data: TraceData,
    engine_key: str | None = "dp_rank",
    tail_fraction: float = 0.1,
    include_validation: bool = False,
) -> dict:
    """Per-step and per-engine long-tail figures (see module docstring)."""
    return finish_longtail(per_step_longtail(data, engine_key, tail_fraction, include_validation))


def tail_figures(lengths_sorted: np.ndarray, starts: np.ndarray, counts: np.ndarray, f: float) -> dict:
    """Long-tail figures per group of lengths sorted ascending within each group
    (the groups back to back: starts[i + 1] = starts[i] + counts[i])."""
    v = np.asarray(lengths_sorted)
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    ends = starts + counts - 1
    # exact integer sums for integer lengths (what a float64 sum of them gives too)
    total = np.add.reduceat(v, starts, dtype=np.int64 if v.dtype.kind in "iub" else np.float64).astype(np.float64)
    longest = v[ends].astype(np.float64)
    k = np.maximum(np.ceil((1.0 - f) * counts - 1e-9).astype(np.int64), 1)
    tail_len = v[starts + k - 1].astype(np.float64)
    # samples longer than (1 - f) * longest: the group's rows past that value
    running = count_at_least(v, starts, counts, np.nextafter((1.0 - f) * longest, np.inf))
    at_max = count_at_least(v, starts, counts, longest)
    with np.errstate(divide="ignore", invalid="ignore"):
        idle = np.where(longest > 0, 1.0 - total / (counts * longest), 0.0)
        tail_share = np.where(longest > 0, (longest - tail_len) / longest, 0.0)
    return {
        "samples": counts,
        "tokens": total,
        "max_len": longest,
        "mean_len": total / counts,
        "tail_len": tail_len,
        "idle_fraction": idle,
        "tail_time_share": tail_share,
        "tail_sample_share": running / counts,
        "at_max_share": at_max / counts,
    }


def completion_times(data: TraceData) -> np.ndarray | None:
    """Per sample row: measured completion time = samples.latency_s + the summed
    latency_s of the sample's tool calls; None unless every row has a finite latency_s."""
    s = data.samples
    if s is None or s.latency_s is None or len(s) == 0:
        return None
    lat = np.asarray(s.latency_s, dtype=np.float64)
    if not np.isfinite(lat).all():
        return None
    tc = data.tool_calls
    if tc is None or len(tc) == 0:
        return lat
    n = len(s)
    key = composite_key(
        *(
            np.concatenate([np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)])
            for a, b in ((s.step, tc.step), (s.group_idx, tc.group_idx), (s.sample_idx, tc.sample_idx))
        )
    )
    skey, ckey = key[:n], key[n:]
    order = np.argsort(skey, kind="stable")
    pos = np.searchsorted(skey[order], ckey)
    ok = pos < n
    ok[ok] = skey[order][pos[ok]] == ckey[ok]
    tool = np.asarray(tc.latency_s, dtype=np.float64)
    tool = np.where(np.isfinite(tool), tool, 0.0)
    extra = np.zeros(n)
    np.add.at(extra, order[pos[ok]], tool[ok])
    return lat + extra


def per_step_longtail(
    data: TraceData, engine_key: str | None = "dp_rank", tail_fraction: float = 0.1, include_validation: bool = False
) -> dict:
    s = data.samples
    col = getattr(s, engine_key, None) if (s is not None and engine_key) else None
    out: dict[str, Any] = {
        "kind": "longtail",
        "engine_key": engine_key if col is not None else None,
        "tail_fraction": tail_fraction,
        "basis": "tokens",
        "steps": [],
    }
    if s is None or len(s) == 0:
        return out
    step, length, engine, out["basis"] = _kept_rows(data, col, include_validation)
    if len(step) == 0:
        return out
    cols, per_engine, bounds = _step_columns(data, step, length, engine, tail_fraction)
    out["steps"] = [_step_entry(cols, per_engine, bounds, i, out["basis"]) for i in range(len(cols["step"]))]
    return out


def _kept_rows(
    data: TraceData, col: np.ndarray | None, include_validation: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(step, length, engine, basis) of the rows the figures count: completion times
    where the trace has them (basis "time"), else response tokens."""
    s = data.samples
    assert s is not None  # checked by the caller
    keep = training_mask(s.validate, len(s), include_validation)
    every = bool(keep.all())  # no copies when every row is kept
    step = np.asarray(s.step) if every else np.asarray(s.step)[keep]
    times = completion_times(data)
    if times is not None:
        basis, length = "time", times if every else times[keep]
    else:
        basis = "tokens"
        length = np.asarray(s.response_len) if every else np.asarray(s.response_len)[keep]
    if not np.issubdtype(length.dtype, np.number):
        length = length.astype(np.int64)
    if col is None:
        engine = np.zeros(len(step), dtype=np.int64)
    else:
        engine = np.asarray(col) if every else np.asarray(col)[keep]
    return step, length, engine, basis


ENGINE_FIGURES = ("samples", "tokens", "max_len", "mean_len", "idle_fraction", "tail_time_share", "tail_sample_share")


def _step_columns(
    data: TraceData, step: np.ndarray, length: np.ndarray, engine: np.ndarray, tail_fraction: float
) -> tuple[dict, dict, list[int]]:
    """Per-step columns (lists), per-engine columns and each step's engine range."""
    # whole-step figures: lengths sorted within each step
    sg = group_rows(step)
    by_step = sg.sort(length)
    step_fig = tail_figures(sort_within_groups(by_step, sg.starts, sg.counts), sg.starts, sg.counts, tail_fraction)

    # per-engine figures: within each step, rows sorted by (engine, length)
    len_sorted, e_starts, e_step, eng_id = _engine_groups(sg.sort(engine), by_step, sg)
    e_counts = np.diff(np.append(e_starts, len(len_sorted)))
    eng_fig = tail_figures(len_sorted, e_starts, e_counts, tail_fraction)
    lo = np.searchsorted(e_step, np.arange(len(sg)), side="left")
    n_eng = np.diff(np.append(lo, len(e_starts)))

    # per-step sums over engines, one reduceat each (T: the step's longest response)
    T = step_fig["max_len"]
    T_e = np.repeat(T, n_eng)
    m, M = eng_fig["mean_len"], eng_fig["max_len"]
    eng_idle = eng_fig["idle_fraction"]
    t_gen = data.steps.timing("t_gen", sg.keys) if data.steps is not None else np.full(len(sg.keys), np.nan)
    per_engine = {"engine": eng_id.tolist(), **{k: eng_fig[k].tolist() for k in ENGINE_FIGURES}}
    cols = {
        k: np.asarray(v).tolist()
        for k, v in (
            ("step", sg.keys),
            ("samples", step_fig["samples"]),
            ("T", T),
            ("tokens", step_fig["tokens"]),
            ("tail_len", step_fig["tail_len"]),
            ("tail_share", step_fig["tail_time_share"]),
            ("tail_samples", step_fig["tail_sample_share"]),
            ("at_max", step_fig["at_max_share"]),
            ("engine_time", n_eng * T),
            ("idle", np.add.reduceat(T_e - m, lo)),
            ("within", np.add.reduceat(M - m, lo)),
            ("waiting", np.add.reduceat(T_e - M, lo)),
            ("eng_idle_mean", np.add.reduceat(eng_idle, lo) / n_eng),
            ("eng_idle_max", np.maximum.reduceat(eng_idle, lo)),
            ("n_eng", n_eng),
            ("t_gen", t_gen),
        )
    }
    return cols, per_engine, np.append(lo, len(e_starts)).tolist()


def _step_entry(cols: dict, per_engine: dict, bounds: list[int], i: int, basis: str) -> dict:
    """Step i's entry of the result."""
    e0, e1 = bounds[i], bounds[i + 1]
    T_i, idle_i, engine_time_i = cols["T"][i], cols["idle"][i], cols["engine_time"][i]
    tg = cols["t_gen"][i] if math.isfinite(cols["t_gen"][i]) else None
    tail_share = cols["tail_share"][i]
    # seconds per unit: measured times are seconds already; tokens scale by t_gen / T
    per_unit = 1.0 if basis == "time" else (tg / T_i if (tg is not None and T_i > 0) else None)
    return {
        "step": cols["step"][i],
        "samples": cols["samples"][i],
        "engines": cols["n_eng"][i],
        "rollout_len": T_i,
        "tokens": cols["tokens"][i],
        "tail_len": cols["tail_len"][i],
        "tail_time_share": tail_share,
        "tail_sample_share": cols["tail_samples"][i],
        "at_max_share": cols["at_max"][i],
        "tail_tied": bool(cols["samples"][i] > 1 and T_i > 0 and cols["tail_len"][i] >= T_i),
        "basis": basis,
        "engine_time": engine_time_i,
        "idle_token_time": idle_i,
        "idle_within_engines": cols["within"][i],
        "idle_waiting": cols["waiting"][i],
        "idle_fraction": idle_i / engine_time_i if engine_time_i > 0 else 0.0,
        "engine_idle_fraction_mean": cols["eng_idle_mean"][i],
        "engine_idle_fraction_max": cols["eng_idle_max"][i],
        "t_gen": tg,
        "idle_engine_seconds": idle_i * per_unit if per_unit is not None else None,
        "tail_seconds": tail_share * T_i * per_unit if per_unit is not None else None,
        "engine": {k: v[e0:e1] for k, v in per_engine.items()},
    }


def _engine_groups(engine: np.ndarray, length: np.ndarray, sg: Groups) -> tuple[np.ndarray, ...]:
    """The rows (grouped by step as in `sg`) regrouped by (step, engine), lengths sorted
    within each group: (sorted lengths, group starts, step index and engine of each group).

    Integers: (engine, length) packed into one int32 (int64 when wide) per row and sorted
    step by step, in blocks of about a million rows so the temporaries stay small."""
    e, v = np.asarray(engine), np.asarray(length)
    if len(e) and np.issubdtype(e.dtype, np.integer) and np.issubdtype(v.dtype, np.integer):
        e_lo, v_lo = int(e.min()), int(v.min())
        width = int(v.max()) - v_lo + 1
        span = (int(e.max()) - e_lo + 1) * width
        if span < 2**62:
            packed_type = np.int32 if span < 2**31 else np.int64
            lengths = np.empty(len(v), dtype=v.dtype)
            starts, steps, engines = [], [], []
            for a, b in group_blocks(sg.counts):
                r0, r1 = int(sg.starts[a]), int(sg.starts[b - 1] + sg.counts[b - 1])
                counts = sg.counts[a:b]
                packed = (e[r0:r1] - e_lo).astype(packed_type) * width + (v[r0:r1] - v_lo).astype(packed_type)
                packed = sort_within_groups(packed, sg.starts[a:b] - r0, counts)
                eng, val = np.divmod(packed, width)
                lengths[r0:r1] = val + v_lo
                code = np.repeat(np.arange(a, b), counts)
                first = np.ones(r1 - r0, dtype=bool)
                first[1:] = (code[1:] != code[:-1]) | (eng[1:] != eng[:-1])
                at = np.flatnonzero(first)
                starts.append(at + r0)
                steps.append(code[at])
                engines.append(eng[at].astype(np.int64) + e_lo)
            return lengths, np.concatenate(starts), np.concatenate(steps), np.concatenate(engines)
    # wide or non-integer values: a lexsort by (step, engine, length)
    code = sg.code()
    order = np.lexsort((v, e, code))
    e, v, code = e[order], v[order], code[order]
    first = np.ones(len(v), dtype=bool)
    first[1:] = (code[1:] != code[:-1]) | (e[1:] != e[:-1])
    at = np.flatnonzero(first)
    return v, at, code[at], e[at]


def _mean_max(values: Iterable[float | None]) -> dict | None:
    vals = [v for v in values if v is not None]
    return {"mean": sum(vals) / len(vals), "max": max(vals)} if vals else None


def finish_longtail(partial: dict) -> dict:
    res = dict(partial)
    steps = res["steps"]
    timed = [e for e in steps if e["t_gen"] is not None or e.get("idle_engine_seconds") is not None]
    res["summary"] = {
        "steps": len(steps),
        **{
            k: _mean_max(e[k] for e in steps)
            for k in ("idle_fraction", "tail_time_share", "tail_sample_share", "engine_idle_fraction_mean")
        },
        "idle_token_time": sum(e["idle_token_time"] for e in steps),
        "engine_time": sum(e["engine_time"] for e in steps),
        "timed_steps": len(timed),
        "idle_engine_seconds": sum(e["idle_engine_seconds"] for e in timed) if timed else None,
        "t_gen": sum(e["t_gen"] for e in timed if e["t_gen"] is not None) if any(e["t_gen"] for e in timed) else None,
        "tail_tied_steps": sum(1 for e in steps if e.get("tail_tied")),
    }
    return json_safe(res)


def reduce_longtail(partials: list[dict]) -> dict:
    if not partials:
        raise ValueError("nothing to reduce")
    merged = {k: partials[0][k] for k in ("kind", "engine_key", "tail_fraction")}
    merged["basis"] = "time" if all(p.get("basis") == "time" for p in partials) else "tokens"
    merged["steps"] = sorted((e for p in partials for e in p["steps"]), key=lambda e: e["step"])
    return finish_longtail(merged)
