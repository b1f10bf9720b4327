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

Every predicted step is also scored per request (`per_request`: each turn's and each
trajectory's completion time, `core.simulator.request_accuracy`), with the mean over
the non-partial steps in `mean["per_request"]`. `held_out_requests` runs that scoring
alone, rolling or with each step in turn the calibration.

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
from core.simulator.request_accuracy import mean_scores, score_held_out
from core.simulator.request_scores import DEFAULT_BOOT
from core.simulator.uncertainty import NoiseModel, fit_noise
from core.simulator.workload import StepWorkload

DEFAULT_WINDOW = 4


def _has_measurement(w: StepWorkload) -> bool:
    return measured_figures(w)["rollout_s"] is not None


def calibrated_env(cal: Calibration, model: ModelConfig) -> Env:
    """The engine of a calibration, replaying a batch rollout."""
    return Env(cal.cluster, model, cal.limits, Policy(), cal.coefficients, cal.limits.kv_capacity(cal.cluster, model))


def noise_for(steps: list[StepWorkload], cal: Calibration, model: ModelConfig) -> NoiseModel | None:
    """The noise model fitted on the calibration's steps (None when they have no
    per-request latencies)."""
    return fit_noise(steps, calibrated_env(cal, model), cal.fit_steps)


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
        fit = [v for v in steps if v.step in set(fit_ids)]
        row["per_request"] = score_held_out(fit, w, calibrated_env(cal, model), noise, seed=seed)
        rows.append(row)
    report(1.0, "done")
    mean = mean_of_rows(rows, partial)
    mean["per_request"] = mean_scores([r["per_request"] for r in rows], partial)
    return {"window": window, "partial_steps": sorted(partial), "predictor": predictor, "steps": rows, "mean": mean}


def _held_out_plans(
    usable: list[StepWorkload], partial: set[int], scheme: str, window: int | None
) -> list[tuple[list[int], list[StepWorkload]]]:
    """(calibration steps, held-out steps) of each fit: "rolling" as `rolling_origin`;
    "each" every non-partial step alone, all the other measured steps held out."""
    if scheme == "each":
        return [([f.step], [w for w in usable if w.step != f.step]) for f in usable if f.step not in partial]
    if scheme != "rolling":
        raise ValueError(f"held_out_requests: scheme is 'rolling' or 'each', got {scheme!r}")
    plans = []
    for w in usable[1:]:
        before = [v.step for v in usable if v.step < w.step and v.step not in partial]
        if before:
            plans.append((before[-window:] if window else before, [w]))
    return plans


def held_out_requests(
    steps: list[StepWorkload],
    cluster: ClusterConfig,
    model: ModelConfig,
    limits: EngineLimits | None = None,
    *,
    scheme: str = "rolling",
    window: int | None = DEFAULT_WINDOW,
    monte_carlo: bool = True,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    progress: Callable[[float, str], None] | None = None,
) -> dict:
    """Per-request scores (`core.simulator.request_accuracy.score_held_out`) of every
    measured step held out from a calibration (`_held_out_plans`); partial steps are
    scored and flagged, and kept out of `mean` (`mean_scores`: every eligible row).

    Returns {"scheme", "window", "partial_steps", "steps": [{step, partial,
    calibrated_on, predictor, turn, trajectory}], "mean": {...}}."""
    report = progress or (lambda f, m: None)
    limits = limits or EngineLimits()
    partial = partial_steps(steps)
    usable = [w for w in sorted(steps, key=lambda w: w.step) if _has_measurement(w)]
    plans = _held_out_plans(usable, partial, scheme, window)
    rows: list[dict] = []
    for i, (fit_ids, targets) in enumerate(plans):
        report(i / max(1, len(plans)), f"calibrating on step(s) {fit_ids}")
        cal = calibrate(steps, cluster, model, limits, fit_steps=fit_ids)
        noise = noise_for(steps, cal, model) if monte_carlo else None
        fit = [v for v in steps if v.step in set(fit_ids)]
        for w in targets:
            row = score_held_out(fit, w, calibrated_env(cal, model), noise, n_boot=n_boot, seed=seed)
            rows.append({**row, "partial": w.step in partial, "calibrated_on": fit_ids})
    report(1.0, "done")
    return {
        "scheme": scheme,
        "window": window,
        "partial_steps": sorted(partial),
        "steps": rows,
        "mean": mean_scores(rows, partial),
    }
