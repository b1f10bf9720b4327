"""Held-out accuracy per request: every request of a step the calibration never saw,
its predicted completion time against the measured one.

A step's makespan is one number per step, and a trace has few steps; its requests are
thousands. `score_held_out(fit, target, env, noise)` replays the held-out step under the
engine calibrated on the `fit` steps (its own workload only, never its measured
latencies) and scores (`request_scores.score_requests`), at two levels:

- `turn`: each generation request's latency (queueing included), against the trace's
  per-turn engine latency (multi-turn traces);
- `trajectory`: each trajectory's completion time from the rollout's start (its turns'
  latencies plus its recorded tool latencies), against the measured one.

The prediction is the Monte-Carlo mean under the calibrated noise (`uncertainty.py`)
when there is one, with each request's own P10–P90: a turn's from its lognormal factor
(exact), a trajectory's over `MC_RUNS` seeded runs. Without a noise model the
prediction is the deterministic replay and coverage says `NO_INTERVAL`.

Naive predictors, fitted on the `fit` steps' measurements at the same level: `mean` and
`median` (the same time for every request) and `per_token` (the median seconds per
completion token times the request's completion tokens).
"""

from __future__ import annotations

import numpy as np

from core.simulator.policies.base import Env
from core.simulator.request_scores import DEFAULT_BOOT, ERRORS, NO_INTERVAL, score_requests
from core.simulator.uncertainty import NoiseModel, request_latencies
from core.simulator.workload import StepWorkload

LEVELS = ("turn", "trajectory")
NAIVE = ("mean", "median", "per_token")
MC_RUNS = 400
Z90 = 1.2815515655446004  # standard normal quantile at 0.9


def measured_requests(w: StepWorkload) -> dict[str, np.ndarray | None]:
    """Measured completion time per turn and per trajectory (None: not recorded)."""
    turn = w.turn_engine_latency_s if w.is_multiturn else None
    return {"turn": turn, "trajectory": w.sample_latency_s}


def request_tokens(w: StepWorkload) -> dict[str, np.ndarray]:
    """Completion tokens per turn and per trajectory."""
    if not w.is_multiturn:
        return {"turn": w.response_len, "trajectory": w.response_len}
    assert w.turn_sample is not None and w.turn_completion_tokens is not None
    turn = np.asarray(w.turn_completion_tokens, np.float64)
    return {"turn": turn, "trajectory": np.bincount(w.turn_sample, turn, minlength=w.n_samples)}


def _usable(x: np.ndarray | None) -> np.ndarray | None:
    """Mask of the finite, positive measurements (None when there are none)."""
    if x is None:
        return None
    ok = np.isfinite(x) & (x > 0)
    return ok if ok.any() else None


def naive_rules(fit: list[StepWorkload]) -> dict[str, dict[str, float] | None]:
    """Per level, the naive predictors' parameters fitted on the `fit` steps."""
    out: dict[str, dict[str, float] | None] = {}
    for level in LEVELS:
        meas, toks = [], []
        for w in fit:
            m = measured_requests(w)[level]
            ok = _usable(m)
            if m is not None and ok is not None:
                meas.append(m[ok])
                toks.append(request_tokens(w)[level][ok])
        if not meas:
            out[level] = None
            continue
        y, t = np.concatenate(meas), np.concatenate(toks)
        rate = float(np.median(y[t > 0] / t[t > 0])) if (t > 0).any() else 0.0
        out[level] = {"mean": float(np.mean(y)), "median": float(np.median(y)), "per_token": rate}
    return out


def naive_predictions(rule: dict[str, float], tokens: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "mean": np.full(tokens.size, rule["mean"]),
        "median": np.full(tokens.size, rule["median"]),
        "per_token": rule["per_token"] * np.asarray(tokens, np.float64),
    }


def predicted_requests(
    env: Env, w: StepWorkload, noise: NoiseModel | None, *, mc_runs: int = MC_RUNS, seed: int = 0
) -> dict[str, tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]]:
    """Per level: (prediction, P10–P90 interval or None), see the module doc."""
    lat, gap, owner, _ = request_latencies(env, w)
    if noise is None:
        return {"turn": (lat, None), "trajectory": (np.bincount(owner, lat + gap, minlength=w.n_samples), None)}
    b = np.searchsorted(np.asarray(noise.edges), lat)
    mu = np.asarray(noise.mu)[b]
    s = np.sqrt(np.asarray(noise.sd)[b] ** 2 + noise.step_sd**2)
    turn = (lat * np.exp(mu + s**2 / 2), (lat * np.exp(mu - Z90 * s), lat * np.exp(mu + Z90 * s)))
    rng = np.random.default_rng([seed, int(w.step)])
    order = np.argsort(owner, kind="stable")
    runs = (noise.factors(lat, rng, mc_runs) * lat)[:, order]
    # per run, each trajectory's turns summed (requests sorted by owner), plus its tools
    starts = np.minimum(np.searchsorted(owner[order], np.arange(w.n_samples)), max(0, lat.size - 1))
    has = np.bincount(owner, minlength=w.n_samples) > 0
    per = np.where(has, np.add.reduceat(runs, starts, axis=1), 0.0) if lat.size else np.zeros((mc_runs, w.n_samples))
    per = per + np.bincount(owner, gap, minlength=w.n_samples)
    lo, hi = np.percentile(per, [10, 90], axis=0)
    return {"turn": turn, "trajectory": (per.mean(axis=0), (lo, hi))}


def score_held_out(
    fit: list[StepWorkload],
    target: StepWorkload,
    env: Env,
    noise: NoiseModel | None,
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    mc_runs: int = MC_RUNS,
) -> dict:
    """The held-out `target`'s per-request scores at each level (None where it has no
    measurement), under the engine `env` and `noise` calibrated on `fit`."""
    rules = naive_rules(fit)
    pred = predicted_requests(env, target, noise, mc_runs=mc_runs, seed=seed)
    measured, tokens = measured_requests(target), request_tokens(target)
    out: dict = {"step": target.step, "predictor": "mc_mean" if noise is not None else "deterministic"}
    for level in LEVELS:
        m, ok, rule = measured[level], _usable(measured[level]), rules[level]
        p, interval = pred[level]
        if m is None or ok is None or rule is None or p.size != m.size:
            out[level] = None
            continue
        groups = np.asarray(target.turn_sample)[ok] if level == "turn" and target.is_multiturn else None
        out[level] = score_requests(
            p[ok],
            m[ok],
            naive={k: v[ok] for k, v in naive_predictions(rule, tokens[level]).items()},
            interval=None if interval is None else (interval[0][ok], interval[1][ok]),
            groups=groups,
            n_boot=n_boot,
            seed=seed,
        )
    return out


def _mean(values: list[dict | None]) -> float | None:
    kept = [v["value"] for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def mean_scores(rows: list[dict], skip: set[int]) -> dict:
    """Per level, each figure's mean over the rows not in `skip` (every eligible step,
    none picked): {"steps", level: {figure: mean, "coverage", "naive": {...}} or None}."""
    kept = [r for r in rows if r["step"] not in skip]
    out: dict = {"steps": [r["step"] for r in kept]}
    for level in LEVELS:
        scored = [r[level] for r in kept if r.get(level) is not None]
        if not scored:
            out[level] = None
            continue
        mean: dict = {k: _mean([s[k] for s in scored]) for k in ERRORS}
        covers = [s["coverage"] for s in scored if s["coverage"] != NO_INTERVAL]
        mean["coverage"] = _mean(covers) if covers else NO_INTERVAL
        mean["naive"] = {
            k: {f: _mean([s["naive"][k][f] for s in scored]) for f in ("median_abs_rel_error", "skill")} for k in NAIVE
        }
        out[level] = mean
    return out
