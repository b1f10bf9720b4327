"""Forecast mode: predict a future step without its realised workload.

For a target step k, from the non-partial steps before it (the history) only:

- the workload of step k is drawn `workloads` times: prompt groups are resampled with
  replacement from the history's groups (whole trajectories: their turns, cached
  prefixes and recorded tool latencies, so the joint structure of lengths, turns and
  tools is kept), and every turn's completion tokens are scaled by the drift of the
  mean response length, a linear trend over the history's steps extrapolated to k (the
  per-step trend of `core.workload.fit.StepTrend`; no drift with one history step);
  later turns' contexts grow by the scaled completions of the turns before them;
- each draw is replayed with the calibrated engine and, with a noise model, its
  Monte-Carlo runs; the runs of all draws are pooled, so the interval holds the
  workload's and the engine's variation.

(`core.workload.generate` draws the number of turns independently of the response
length; on Search-R1 that doubles the p90 trajectory length, so the forecast resamples
observed trajectories instead.) The forecast is compared with the measured step
(accuracy, relative error, coverage) next to the naive "repeat the previous step".
"""

from __future__ import annotations

import numpy as np

from core.simulator.calibration import FIGURES, measured_figures, relative_error, step_accuracy
from core.simulator.policies.base import Env
from core.simulator.uncertainty import NoiseModel, monte_carlo, request_latencies
from core.simulator.workload import StepWorkload

DEFAULT_WORKLOADS = 4
TURN_FIELDS = ("turn_prompt_tokens", "turn_cached_tokens", "turn_completion_tokens", "turn_tool_latency_s")


def drift_factor(history: list[StepWorkload], step: int) -> float:
    """Mean response length at `step` (linear trend over the history's steps) over the
    history's pooled mean; 1 with one history step."""
    steps = np.array([w.step for w in history], float)
    means = np.array([float(np.mean(w.response_len)) for w in history])
    pooled = float(np.mean(np.concatenate([w.response_len for w in history])))
    if steps.size < 2 or pooled <= 0:
        return 1.0
    slope, icpt = np.polyfit(steps, means, 1)
    return float(max(0.2, min(5.0, (icpt + slope * step) / pooled)))


def draw_workload(
    history: list[StepWorkload], step: int, n_groups: int, factor: float, rng: np.random.Generator
) -> StepWorkload:
    """One workload of `step`: `n_groups` groups resampled from the history, completions
    scaled by `factor` (see the module doc)."""
    pool = [(i, g) for i, w in enumerate(history) for g in range(w.n_groups)]
    pick = rng.integers(0, len(pool), n_groups)
    parts = [history[pool[j][0]].subset_groups(np.array([pool[j][1]])) for j in pick]
    group = np.concatenate([np.full(p.n_samples, k, np.int64) for k, p in enumerate(parts)])
    out = StepWorkload(
        step=step,
        group=group,
        prompt_len=np.concatenate([p.prompt_len for p in parts]),
        response_len=np.concatenate([np.round(p.response_len * factor).astype(np.int64) for p in parts]),
    )
    if all(p.is_multiturn for p in parts):
        offsets = np.cumsum([0] + [p.n_samples for p in parts[:-1]])
        out.turn_sample = np.concatenate([p.turn_sample + o for p, o in zip(parts, offsets)])
        for name in TURN_FIELDS:
            setattr(out, name, np.concatenate([np.asarray(getattr(p, name)) for p in parts]))
        old = np.asarray(out.turn_completion_tokens)
        sample = np.asarray(out.turn_sample)
        new = np.maximum(1, np.round(old * factor)).astype(np.int64)
        delta = new - old
        # context growth from the earlier turns of the same trajectory
        csum = np.cumsum(delta)
        first = np.concatenate([[True], sample[1:] != sample[:-1]])
        base = np.maximum.accumulate(np.where(first, np.arange(delta.size), 0))
        before = csum - delta - (csum[base] - delta[base])
        out.turn_prompt_tokens = np.asarray(out.turn_prompt_tokens) + before
        cached = np.asarray(out.turn_cached_tokens)
        out.turn_cached_tokens = np.where(first, cached, cached + before)
        out.turn_completion_tokens = new
    return out


def forecast_step(
    env: Env,
    history: list[StepWorkload],
    target: StepWorkload,
    noise: NoiseModel | None,
    *,
    workloads: int = DEFAULT_WORKLOADS,
    n_runs: int | None = None,
    seed: int = 0,
) -> dict:
    """The forecast of `target.step` from the `history` steps (see the module doc);
    `target` is read only for its measured figures, after the forecast."""
    if not history:
        raise ValueError("forecast: no earlier step to forecast from")
    rng = np.random.default_rng([seed, int(target.step)])
    n_groups = int(np.median([w.n_groups for w in history]))
    factor = drift_factor(history, target.step)
    runs_per = None if n_runs is None else max(1, n_runs // workloads)
    pooled, det = [], []
    for j in range(workloads):
        w = draw_workload(history, target.step, n_groups, factor, rng)
        lat, gap, owner, duration = request_latencies(env, w)
        comp = np.bincount(owner, lat + gap, minlength=w.n_samples)
        det.append([duration, float(np.median(comp)), float(np.percentile(comp, 90))])
        if noise is None:
            pooled.append(np.array([det[-1]]))
            continue
        mc = monte_carlo(lat, gap, owner, w.n_samples, noise, n_runs=runs_per or 200, seed=seed + j)
        pooled.append(mc["figures"])
    x = np.concatenate(pooled)
    meas = measured_figures(target)
    prev = measured_figures(history[-1])
    out: dict = {
        "step": target.step,
        "history": [w.step for w in history],
        "drift_factor": factor,
        "workloads": workloads,
        "runs": int(len(x)),
    }
    for i, k in enumerate(FIGURES):
        col = x[:, i]
        mean, p10, p90 = float(col.mean()), float(np.percentile(col, 10)), float(np.percentile(col, 90))
        out[k] = {
            "measured": meas[k],
            "predicted": mean,
            "interval": [p10, p90],
            "covered": None if meas[k] is None else bool(p10 <= meas[k] <= p90),
            "accuracy": step_accuracy(mean, meas[k]),
            "rel_error": relative_error(mean, meas[k]),
            "deterministic": float(np.mean([d[i] for d in det])),
            "deterministic_accuracy": step_accuracy(float(np.mean([d[i] for d in det])), meas[k]),
            "deterministic_rel_error": relative_error(float(np.mean([d[i] for d in det])), meas[k]),
            "naive_previous": prev[k],
            "naive_previous_accuracy": step_accuracy(prev[k], meas[k]),
            "naive_previous_rel_error": relative_error(prev[k], meas[k]),
        }
    out["n_samples"] = {"forecast": int(w.n_samples), "measured": target.n_samples}
    return out
