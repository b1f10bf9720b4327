"""Honest replay accuracy: rolling-origin evaluation.

For every step k with measured timings (in step order, after the first), calibrate on
the measured, non-partial steps before k — all of them, or the last `window` — and
predict k from its own workload (lengths, turns, cached tokens, tool latencies; never
its measured engine latencies). Each prediction is the Monte-Carlo mean when per-request
latencies let the noise be fitted (`core.simulator.uncertainty`), with its P10–P90
interval, next to the deterministic replay and two naive predictors: repeat the
previous measured step (`naive_previous`) and the mean of the calibration steps
(`naive`). Partial steps (fewer than half the median step's samples, e.g. a tail file)
are predicted and flagged, but kept out of the mean and never used for calibration.

Default window: `DEFAULT_WINDOW` most recent steps — enough to average a step's
idiosyncrasies, recent enough to follow drift, and a bounded calibration cost (every
fit replays each of its steps some hundred times). Later origins start from the
previous origin's fit (coefficients and concurrency), so they converge quickly.
"""

from __future__ import annotations

from collections.abc import Callable

from core.simulator.calibration import (
    Calibration,
    accuracy_report,
    calibrate,
    mean_of_rows,
    measured_figures,
    partial_steps,
)
from core.simulator.config import ClusterConfig, EngineLimits, ModelConfig, Policy
from core.simulator.policies.base import Env
from core.simulator.uncertainty import NoiseModel, fit_noise
from core.simulator.workload import StepWorkload

DEFAULT_WINDOW = 4


def _has_measurement(w: StepWorkload) -> bool:
    return measured_figures(w)["rollout_s"] is not None


def noise_for(steps: list[StepWorkload], cal: Calibration, model: ModelConfig) -> NoiseModel | None:
    """The noise model fitted on the calibration's steps (None when they have no
    per-request latencies)."""
    env = Env(cal.cluster, model, cal.limits, Policy(), cal.coefficients, cal.limits.kv_capacity(cal.cluster, model))
    return fit_noise(steps, env, cal.fit_steps)


def rolling_origin(
    steps: list[StepWorkload],
    cluster: ClusterConfig,
    model: ModelConfig,
    limits: EngineLimits | None = None,
    *,
    window: int | None = DEFAULT_WINDOW,
    monte_carlo: bool = True,
    n_runs: int | None = None,
    seed: int = 0,
    progress: Callable[[float, str], None] | None = None,
) -> dict:
    """Per predicted step: the `accuracy_report` row of a calibration on the steps
    before it, plus `calibrated_on`; `mean` over the non-partial predicted steps.

    Returns {"window", "partial_steps", "predictor", "steps": [...], "mean": {...}}."""
    report = progress or (lambda f, m: None)
    limits = limits or EngineLimits()
    partial = partial_steps(steps)
    ordered = sorted(steps, key=lambda w: w.step)
    usable = [w for w in ordered if _has_measurement(w)]
    rows: list[dict] = []
    predictor = "deterministic"
    prev_cal: Calibration | None = None
    targets = usable[1:]
    for i, w in enumerate(targets):
        before = [v.step for v in usable if v.step < w.step and v.step not in partial]
        if not before:
            continue
        fit_ids = before[-window:] if window else before
        report(i / max(1, len(targets)), f"calibrating on step(s) {fit_ids} to predict step {w.step}")
        kwargs: dict = {}
        if prev_cal is not None and prev_cal.method == "turn_latency":
            kwargs = {"initial": prev_cal.coefficients, "concurrency_candidates": [prev_cal.limits]}
        cal = calibrate(steps, cluster, model, limits, fit_steps=fit_ids, **kwargs)
        prev_cal = cal
        noise = noise_for(steps, cal, model) if monte_carlo else None
        if noise is not None:
            predictor = "mc_mean"
        subset = [v for v in steps if v.step in set(fit_ids) or v.step == w.step]
        rep = accuracy_report(subset, cal, model, noise=noise, n_runs=n_runs, seed=seed)
        (row,) = [r for r in rep["steps"] if r["step"] == w.step]
        # the previous step and partial flag as seen from the whole trace
        row["partial"] = w.step in partial
        prev_ok = [v for v in usable if v.step < w.step and v.step not in partial]
        if prev_ok:
            prev = measured_figures(prev_ok[-1])
            for k, value in prev.items():
                m = row[k]["measured"]
                row[k]["naive_previous"] = value
                row[k]["naive_previous_rel_error"] = None if value is None or not m else (value - m) / m
                err = row[k]["naive_previous_rel_error"]
                row[k]["naive_previous_accuracy"] = None if err is None or abs(err) > 1 else 1 - abs(err)
        row["calibrated_on"] = fit_ids
        row["calibration"] = {"method": cal.method, "cost": cal.cost, "evaluations": cal.evaluations}
        rows.append(row)
    report(1.0, "done")
    return {
        "window": window,
        "partial_steps": sorted(partial),
        "predictor": predictor,
        "steps": rows,
        "mean": mean_of_rows(rows, partial),
    }
