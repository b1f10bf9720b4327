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
``tail_sample_share`` (as above over all the step's samples), and the engine-time
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
and of idle_engine_seconds / t_gen over the steps that have t_gen.
"""

from __future__ import annotations

import math

import numpy as np

from workers.analysis.data import (
    TraceData,
    composite_key,
    group_rows,
    json_safe,
    order_within_groups,
    training_mask,
)


def analyze_longtail(
    data: TraceData,
    engine_key: str | None = "dp_rank",
    tail_fraction: float = 0.1,
    include_validation: bool = False,
) -> dict:
    """Per-step and per-engine long-tail figures (see module docstring)."""
    return finish_longtail(per_step_longtail(data, engine_key, tail_fraction, include_validation))


def tail_figures(lengths_sorted: np.ndarray, starts: np.ndarray, counts: np.ndarray, f: float) -> dict:
    """Long-tail figures per group of lengths sorted ascending within each group."""
    v = np.asarray(lengths_sorted, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    ends = starts + counts - 1
    total = np.add.reduceat(v, starts)
    longest = v[ends]
    k = np.maximum(np.ceil((1.0 - f) * counts - 1e-9).astype(np.int64), 1)
    tail_len = v[starts + k - 1]
    code = np.repeat(np.arange(len(starts)), counts)
    still_running = v > (1.0 - f) * longest[code]
    running = np.add.reduceat(still_running.astype(np.int64), starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        idle = np.where(longest > 0, 1.0 - total / (counts * longest), 0.0)
        tail_share = np.where(longest > 0, (longest - tail_len) / longest, 0.0)
    return {
        "samples": counts, "tokens": total, "max_len": longest, "mean_len": total / counts,
        "tail_len": tail_len, "idle_fraction": idle, "tail_time_share": tail_share,
        "tail_sample_share": running / counts,
    }


def per_step_longtail(data, engine_key="dp_rank", tail_fraction=0.1, include_validation=False) -> dict:
    s = data.samples
    col = getattr(s, engine_key, None) if (s is not None and engine_key) else None
    out = {"kind": "longtail", "engine_key": engine_key if col is not None else None,
           "tail_fraction": tail_fraction, "steps": []}
    if s is None or len(s) == 0:
        return out
    keep = training_mask(s.validate, len(s), include_validation)
    step = np.asarray(s.step, dtype=np.int64)[keep]
    length = np.asarray(s.response_len, dtype=np.int64)[keep]
    if len(step) == 0:
        return out
    engine = np.zeros(len(step), dtype=np.int64) if col is None else np.asarray(col, dtype=np.int64)[keep]

    # whole-step figures: sort by (step, length)
    order = order_within_groups(step, length)
    st_sorted = step[order]
    sg = group_rows(st_sorted)
    step_fig = tail_figures(length[order], sg.starts, sg.counts, tail_fraction)

    # per-engine figures: sort by (step, engine, length)
    ekey = composite_key(step, engine)
    order = order_within_groups(ekey, length)
    eg = group_rows(ekey[order])
    eng_fig = tail_figures(length[order], eg.starts, eg.counts, tail_fraction)
    eng_step, eng_id = step[order][eg.starts], engine[order][eg.starts]
    lo = np.searchsorted(eng_step, sg.keys, side="left")
    hi = np.searchsorted(eng_step, sg.keys, side="right")

    t_gen = data.steps.timing("t_gen", sg.keys) if data.steps is not None else np.full(len(sg.keys), np.nan)
    for i, st in enumerate(sg.keys.tolist()):
        e0, e1 = int(lo[i]), int(hi[i])
        T = float(step_fig["max_len"][i])
        m = eng_fig["mean_len"][e0:e1]
        M = eng_fig["max_len"][e0:e1]
        n_eng = e1 - e0
        idle_time = float((T - m).sum())
        engine_time = n_eng * T
        tg = float(t_gen[i]) if math.isfinite(t_gen[i]) else None
        tail_share = float(step_fig["tail_time_share"][i])
        out["steps"].append({
            "step": st,
            "samples": int(step_fig["samples"][i]),
            "engines": n_eng,
            "rollout_len": T,
            "tokens": float(step_fig["tokens"][i]),
            "tail_len": float(step_fig["tail_len"][i]),
            "tail_time_share": tail_share,
            "tail_sample_share": float(step_fig["tail_sample_share"][i]),
            "engine_time": engine_time,
            "idle_token_time": idle_time,
            "idle_within_engines": float((M - m).sum()),
            "idle_waiting": float((T - M).sum()),
            "idle_fraction": idle_time / engine_time if engine_time > 0 else 0.0,
            "engine_idle_fraction_mean": float(eng_fig["idle_fraction"][e0:e1].mean()),
            "engine_idle_fraction_max": float(eng_fig["idle_fraction"][e0:e1].max()),
            "t_gen": tg,
            "idle_engine_seconds": idle_time * tg / T if (tg is not None and T > 0) else None,
            "tail_seconds": tail_share * tg if tg is not None else None,
            "engine": {
                "engine": eng_id[e0:e1].tolist(),
                **{k: eng_fig[k][e0:e1].tolist() for k in (
                    "samples", "tokens", "max_len", "mean_len", "idle_fraction",
                    "tail_time_share", "tail_sample_share")},
            },
        })
    return out


def _mean_max(values) -> dict | None:
    vals = [v for v in values if v is not None]
    return {"mean": sum(vals) / len(vals), "max": max(vals)} if vals else None


def finish_longtail(partial: dict) -> dict:
    res = dict(partial)
    steps = res["steps"]
    timed = [e for e in steps if e["t_gen"] is not None]
    res["summary"] = {
        "steps": len(steps),
        **{k: _mean_max(e[k] for e in steps) for k in (
            "idle_fraction", "tail_time_share", "tail_sample_share", "engine_idle_fraction_mean")},
        "idle_token_time": sum(e["idle_token_time"] for e in steps),
        "engine_time": sum(e["engine_time"] for e in steps),
        "timed_steps": len(timed),
        "idle_engine_seconds": sum(e["idle_engine_seconds"] for e in timed) if timed else None,
        "t_gen": sum(e["t_gen"] for e in timed) if timed else None,
    }
    return json_safe(res)


def reduce_longtail(partials: list[dict]) -> dict:
    if not partials:
        raise ValueError("nothing to reduce")
    merged = {k: partials[0][k] for k in ("kind", "engine_key", "tail_fraction")}
    merged["steps"] = sorted((e for p in partials for e in p["steps"]), key=lambda e: e["step"])
    return finish_longtail(merged)
