"""Fit the engine model to measured timings, and report how well it predicts.

`calibrate(steps, cluster, model, limits, fit_steps=[...])` uses only the steps listed
in `fit_steps` (default: the first step):

- per-turn engine latencies (multi-turn traces: each generation request's wall time,
  queueing included): the six iteration-time coefficients are fitted by nonlinear least
  squares (scipy `least_squares`, in log space) on the relative error of every
  request's simulated latency, replaying the fit steps' rollouts event by event. The
  effective concurrency is chosen among candidates — the configured limits and an
  unconstrained engine (every trajectory admitted, KV unbounded) — by the lower cost.
- rollout stage timings only (verl ``t_gen``): one scale factor on the roofline (or
  given) coefficients, in closed form (a rollout whose requests all arrive at the start
  scales exactly with the coefficients).
- ``t_update_actor`` when present: the effective training MFU, in closed form.

`accuracy_report(steps, calibration, cluster, model, fit_steps)` predicts every other
step from its own workload (lengths, turns, tool latencies — never its measured
latencies) and reports accuracy = 1 − |predicted − measured| / measured for the step
rollout time (slowest trajectory: summed turn latencies + tool latencies, or t_gen)
and for the median and p90 trajectory completion times, next to the naive predictor
that reuses the fit steps' measured values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.simulator.config import ClusterConfig, EngineLimits, ModelConfig, Policy
from core.simulator.policies.base import Env, rollout_batch
from core.simulator.predictor import COEFFICIENT_FIELDS, EngineCoefficients, roofline_coefficients
from core.simulator.training import training_pass
from core.simulator.uncertainty import NoiseModel
from core.simulator.workload import StepWorkload

_LOG_LO, _LOG_HI = math.log(1e-15), math.log(1e3)
# An "unbounded" KV cache as a finite token count (JSON-safe, never reached).
UNBOUNDED_KV = 2**31 - 1  # the largest the config accepts (an INTEGER), effectively unbounded


@dataclass
class Calibration:
    """Fitted engine model. Use with `simulate(..., limits=cal.limits,
    coefficients=cal.coefficients)` on the same replica layout (`cal.cluster`)."""

    coefficients: EngineCoefficients
    limits: EngineLimits
    cluster: ClusterConfig
    fit_steps: list[int]
    method: str  # "turn_latency" | "t_gen_scale" | "roofline"
    cost: float | None = None  # 0.5 · Σ relative error² at the fit
    evaluations: int = 0  # replays of the fit steps run while fitting
    candidates: list[dict] = field(default_factory=list)
    train_mfu: float | None = None

    def to_dict(self) -> dict:
        return {
            "coefficients": self.coefficients.to_dict(),
            "limits": dataclasses.asdict(self.limits),
            "cluster": {**dataclasses.asdict(self.cluster), "gpu": dataclasses.asdict(self.cluster.gpu)},
            "train_mfu": self.train_mfu,
            "fit_steps": list(self.fit_steps),
            "method": self.method,
            "cost": self.cost,
            "evaluations": self.evaluations,
            "candidates": self.candidates,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        """Inverse of `to_dict` (e.g. a stored calibration reused for later replays)."""
        return cls(
            coefficients=EngineCoefficients.from_dict(d["coefficients"]),
            limits=EngineLimits.from_dict(d["limits"]),
            cluster=ClusterConfig.from_dict(d["cluster"]),
            fit_steps=[int(s) for s in d["fit_steps"]],
            method=str(d["method"]),
            cost=d.get("cost"),
            evaluations=int(d.get("evaluations", 0)),
            candidates=list(d.get("candidates", [])),
            train_mfu=d.get("train_mfu"),
        )


def _select(steps: list[StepWorkload], ids: list[int] | None) -> list[StepWorkload]:
    if ids is None:
        return steps[:1]
    by = {w.step: w for w in steps}
    missing = [s for s in ids if s not in by]
    if missing:
        raise ValueError(f"fit_steps: step {missing[0]} is not in the workload")
    return [by[s] for s in ids]


def _has_turn_latency(w: StepWorkload) -> bool:
    lat = w.turn_engine_latency_s
    return lat is not None and bool(np.isfinite(lat).all()) and bool((lat > 0).any())


def _env(
    cluster: ClusterConfig, model: ModelConfig, limits: EngineLimits, coeffs: EngineCoefficients, kv: float
) -> Env:
    return Env(cluster, model, limits, Policy(), coeffs, kv)


def _request_latency(env: Env, w: StepWorkload) -> tuple[np.ndarray, np.ndarray]:
    """Simulated latency of every request (turn) and completion of every trajectory."""
    ro = rollout_batch(env, w, keep_store=True)
    st = ro.store
    assert st is not None  # keep_store=True
    lat = np.asarray(st.end) - np.asarray(st.arrive)
    return lat, ro.completion


def calibrate(
    steps: list[StepWorkload],
    cluster: ClusterConfig,
    model: ModelConfig,
    limits: EngineLimits | None = None,
    *,
    fit_steps: list[int] | None = None,
    initial: EngineCoefficients | None = None,
    concurrency_candidates: list[EngineLimits] | None = None,
    max_evaluations: int = 120,
    colocated: bool = True,
) -> Calibration:
    """Fit engine coefficients (and effective concurrency) on `fit_steps` only.

    `concurrency_candidates` (EngineLimits) default to `limits` and an unconstrained
    engine; the one whose best fit has the lowest cost is kept in `.limits`. The training
    MFU is fitted to the measured update times as if the trace ran on `cluster`,
    colocated (rollout and training sharing the GPUs) unless `colocated` is False."""
    limits = limits or EngineLimits()
    fit = _select(steps, fit_steps)
    ids = [w.step for w in fit]
    start = initial or roofline_coefficients(cluster, model)
    train_mfu = _fit_train_mfu(fit, cluster, model, colocated)
    cl_out = dataclasses.replace(cluster, train_mfu=train_mfu) if train_mfu else cluster
    if all(_has_turn_latency(w) for w in fit):
        return _fit_turn_latency(
            fit, cl_out, model, limits, start, concurrency_candidates, max_evaluations, ids, train_mfu
        )
    measured = [w.timings.get("t_gen") for w in fit]
    if all(m is not None and m > 0 for m in measured):
        kv = limits.kv_capacity(cluster, model)
        sim = np.array([rollout_batch(_env(cluster, model, limits, start, kv), w).duration for w in fit])
        meas = np.asarray(measured, dtype=np.float64)
        scale = float(np.dot(sim, meas) / np.dot(sim, sim)) if np.dot(sim, sim) > 0 else 1.0
        cost = float(0.5 * np.sum(((scale * sim - meas) / meas) ** 2))
        return Calibration(start.scaled(scale), limits, cl_out, ids, "t_gen_scale", cost, len(fit), train_mfu=train_mfu)
    return Calibration(start, limits, cl_out, ids, "roofline", None, 0, train_mfu=train_mfu)


def _fit_turn_latency(
    fit: list[StepWorkload],
    cluster: ClusterConfig,
    model: ModelConfig,
    limits: EngineLimits,
    start: EngineCoefficients,
    candidates: list[EngineLimits] | None,
    max_evaluations: int,
    ids: list[int],
    train_mfu: float | None,
) -> Calibration:
    if candidates is None:
        every = max(w.n_samples for w in fit)  # every trajectory admitted at once
        candidates = [
            limits,
            dataclasses.replace(
                limits, max_running_seqs=max(every, limits.max_running_seqs), kv_cache_tokens=UNBOUNDED_KV
            ),
        ]
    meas = np.concatenate([w.turn_engine_latency_s for w in fit])
    x0 = np.clip(np.log([max(getattr(start, f), 1e-12) for f in COEFFICIENT_FIELDS]), _LOG_LO, _LOG_HI)
    simulations = [0]

    def residual_fn(lim: EngineLimits, kv: float) -> Callable[[np.ndarray], np.ndarray]:
        def residual(x: np.ndarray) -> np.ndarray:
            simulations[0] += 1
            env = _env(cluster, model, lim, EngineCoefficients(*map(float, np.exp(x))), kv)
            lat = np.concatenate([_request_latency(env, w)[0] for w in fit])
            return (lat - meas) / np.maximum(meas, 1e-3)

        return residual

    def solve(lim: EngineLimits, x_start: np.ndarray, tol: float) -> tuple[Any, float]:
        kv = lim.kv_capacity(cluster, model)
        from scipy.optimize import least_squares  # lazy: scipy costs ~1 s of import for every CLI command

        sol = least_squares(
            residual_fn(lim, kv),
            x_start,
            bounds=(_LOG_LO, _LOG_HI),
            method="trf",
            diff_step=np.full_like(x_start, 1e-3),  # per parameter (the same step for each)
            ftol=tol,
            xtol=tol,
            gtol=tol,
            max_nfev=max_evaluations,
        )
        return sol, kv

    # screen every candidate with a loose tolerance, then refine the best one
    tried: list[dict] = []
    best: tuple[Any, EngineLimits] | None = None  # (scipy OptimizeResult, limits)
    for lim in candidates:
        sol, kv = solve(lim, x0, 1e-3)
        tried.append({"max_running_seqs": lim.max_running_seqs, "kv_cache_tokens": int(kv), "cost": float(sol.cost)})
        if best is None or sol.cost < best[0].cost:
            best = (sol, lim)
    if best is None:
        raise ValueError("calibrate: no engine-limit candidates to fit")
    sol, kv = solve(best[1], best[0].x, 1e-6)
    coeffs = EngineCoefficients(*map(float, np.exp(sol.x)))
    lim_out = dataclasses.replace(best[1], kv_cache_tokens=int(kv))
    return Calibration(coeffs, lim_out, cluster, ids, "turn_latency", float(sol.cost), simulations[0], tried, train_mfu)


def _fit_train_mfu(
    fit: list[StepWorkload], cluster: ClusterConfig, model: ModelConfig, colocated: bool
) -> float | None:
    meas = np.array([w.timings.get("t_update_actor", np.nan) for w in fit], dtype=np.float64)
    if not np.isfinite(meas).all() or (meas <= 0).any():
        return None
    ideal = dataclasses.replace(cluster, train_mfu=1.0)
    t1 = np.array(
        [
            training_pass(w.total_len, model, ideal, Policy(), forward_only=False, colocated=colocated).seconds
            for w in fit
        ]
    )
    inv = float(np.dot(t1, meas) / np.dot(t1, t1))
    return float(min(1.0, 1.0 / inv)) if inv > 0 else None


def step_accuracy(pred: float | None, meas: float | None) -> float | None:
    """1 − |pred − meas| / meas, or None when undefined or below 0 (then only the
    relative error is meaningful)."""
    err = relative_error(pred, meas)
    if err is None or abs(err) > 1.0:
        return None
    return float(1.0 - abs(err))


def relative_error(pred: float | None, meas: float | None) -> float | None:
    """(pred − meas) / meas (signed: > 0 over-predicts)."""
    if pred is None or meas is None or not np.isfinite(pred) or not meas:
        return None
    return float((pred - meas) / meas)


PARTIAL_FRACTION = 0.5
FIGURES = ("rollout_s", "p50_traj_s", "p90_traj_s")


def partial_steps(steps: list[StepWorkload], fraction: float = PARTIAL_FRACTION) -> set[int]:
    """Steps whose workload is partial: fewer than `fraction` of the median step's
    samples (e.g. a short tail file). Flagged and kept out of headline means."""
    if not steps:
        return set()
    med = float(np.median([w.n_samples for w in steps]))
    return {w.step for w in steps if w.n_samples < fraction * med}


def measured_figures(w: StepWorkload) -> dict:
    """Measured rollout time and median / p90 trajectory latency of a step (None: unknown)."""
    lat = w.sample_latency_s
    out: dict[str, float | None] = {"rollout_s": w.measured_rollout_s, "p50_traj_s": None, "p90_traj_s": None}
    if lat is not None and lat.size > 0 and np.isfinite(lat).all():
        out["p50_traj_s"] = float(np.median(lat))
        out["p90_traj_s"] = float(np.percentile(lat, 90))
    return out


def figure_row(pred: float | None, meas: float | None, naive: dict[str, float | None], mc: dict | None) -> dict:
    """One figure of one predicted step: measured, predicted (the MC mean when `mc`),
    accuracy and relative error, the naive predictors', and the MC interval."""
    row: dict = {
        "measured": meas,
        "predicted": pred,
        "accuracy": step_accuracy(pred, meas),
        "rel_error": relative_error(pred, meas),
    }
    for name, value in naive.items():
        row[name] = value
        row[f"{name}_accuracy"] = step_accuracy(value, meas)
        row[f"{name}_rel_error"] = relative_error(value, meas)
    if mc is not None:
        row["interval"] = [mc["p10"], mc["p90"]]
        row["covered"] = None if meas is None else bool(mc["p10"] <= meas <= mc["p90"])
    return row


PREDICTORS = ("", "naive_", "naive_previous_", "deterministic_")


def mean_of_rows(rows: list[dict], skip: set[int]) -> dict:
    """Over rows not in `skip`: mean accuracy (an undefined, below-0 accuracy counts as
    0) and mean |relative error| of every predictor, and the interval coverage."""
    kept = [r for r in rows if r["step"] not in skip]
    mean: dict = {"steps": [r["step"] for r in kept]}
    for k in FIGURES:
        for pre in PREDICTORS:
            errs: list[float] = [e for r in kept if (e := r[k].get(f"{pre}rel_error")) is not None]
            if not errs and f"{pre}rel_error" not in (kept[0][k] if kept else {}):
                continue
            mean[f"{k}_{pre}accuracy"] = float(np.mean([max(0.0, 1 - abs(e)) for e in errs])) if errs else None
            mean[f"{k}_{pre}abs_rel_error"] = float(np.mean(np.abs(errs))) if errs else None
        cov = [r[k]["covered"] for r in kept if r[k].get("covered") is not None]
        mean[f"{k}_coverage"] = float(np.mean(cov)) if cov else None
    return mean


def accuracy_report(
    steps: list[StepWorkload],
    calibration: Calibration,
    model: ModelConfig,
    *,
    noise: NoiseModel | None = None,
    n_runs: int | None = None,
    seed: int = 0,
    mc_results: dict[int, dict] | None = None,
) -> dict:
    """Predict every step not used for fitting; compare with the measured figures.

    With `noise` (a `core.simulator.uncertainty.NoiseModel` fitted on the calibration
    steps) the prediction is the Monte-Carlo mean, with its P10–P90 `interval` and
    whether the measured value is `covered`; `deterministic` keeps the replay of means.
    Naive predictors: `naive` (mean of the fit steps' measured values) and
    `naive_previous` (the closest earlier measured step). Steps with a partial workload
    (`partial_steps`) are flagged and left out of `mean`. `mc_results` ({step:
    `monte_carlo_step` result}) reuses Monte-Carlo replays already run.

    Returns {"fit_steps", "partial_steps", "predictor", "steps": [{step, partial,
    rollout_s: {measured, predicted, accuracy, rel_error, naive, naive_accuracy, ...},
    p50_traj_s, p90_traj_s}], "mean": {...}}. Accuracy is None where it would be < 0.
    """
    from core.simulator.uncertainty import monte_carlo_step

    cluster, limits = calibration.cluster, calibration.limits
    kv = limits.kv_capacity(cluster, model)
    env = _env(cluster, model, limits, calibration.coefficients, kv)
    fit_ids = set(calibration.fit_steps)
    fit = [w for w in steps if w.step in fit_ids]
    partial = partial_steps(steps)
    fit_meas = [measured_figures(w) for w in fit]
    naive = {}
    for k in FIGURES:
        vals = [m[k] for m in fit_meas if m[k] is not None]
        naive[k] = float(np.mean(vals)) if vals else None
    meas_by_step = {w.step: measured_figures(w) for w in steps}
    rows = []
    for w in steps:
        if w.step in fit_ids:
            continue
        mc = (mc_results or {}).get(w.step)
        if mc is None and noise is not None:
            mc = monte_carlo_step(env, w, noise, n_runs=n_runs, seed=seed)
        if mc is not None:
            det = mc["deterministic"]
            pred = {k: mc[k]["mean"] for k in FIGURES}
        else:
            ro = rollout_batch(env, w)
            det = {
                "rollout_s": ro.duration,
                "p50_traj_s": float(np.median(ro.completion)),
                "p90_traj_s": float(np.percentile(ro.completion, 90)),
            }
            pred = det
        meas = meas_by_step[w.step]
        earlier = [s for s in meas_by_step if s < w.step and s not in partial]
        prev = meas_by_step[max(earlier)] if earlier else {k: None for k in FIGURES}
        row: dict = {"step": w.step, "partial": w.step in partial, "n_samples": w.n_samples}
        for k in FIGURES:
            others = {"naive": naive[k], "naive_previous": prev[k], "deterministic": det[k]}
            row[k] = figure_row(pred[k], meas[k], others, mc[k] if mc is not None else None)
        if mc is not None:
            row["mc_runs"] = mc["n_runs"]
        rows.append(row)
    return {
        "fit_steps": list(calibration.fit_steps),
        "partial_steps": sorted(partial),
        "predictor": "mc_mean" if noise is not None else "deterministic",
        "steps": rows,
        "mean": mean_of_rows(rows, partial),
    }
