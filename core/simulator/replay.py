"""The replay of one request, pure: (request, workload, measured timings) -> result.

`replay(steps, request, progress) -> Replay` calibrates (as asked, or when the trace has
measured timings), replays policy A and B, and adds what the request asks besides:
the Monte-Carlo of the calibrated residual noise, accuracy on the other steps, rolling
origin, forecast. `result_dict(replay)` is the JSON a simulation job stores and the CLI
prints. The worker (`workers.runners.simulations`) and `rlvr-explorer simulate` both
call these; they only read the store and write the result.

Result (JSON):
  a, b         `SimResult.to_dict` of policy A and B (b None without compare_policy):
               makespan, stage totals, idle GPU-seconds by cause and per-step results,
               plus `timeline` (lanes of [start, end, state, label, step] intervals).
               The timeline is stored whole when it has at most
               TIMELINE_MAX_INTERVALS intervals, else only for the first steps that fit
               (`timeline_truncated`: {"last_step", "intervals_total"}).
  compare      `compare(a, b)`: total and per-step speedup of B over A (None without B);
               with `sensitivity` asked for, `total.speedup_band` ([min, max] of the
               speedup over the uncalibrated parameters' ranges) and `sensitivity`
               (`core.simulator.sensitivity.speedup_band`: each parameter's low and
               high speedup)
  accuracy     `accuracy_report` on the steps not used for fitting (None without
               calibration or without other steps)
  uncertainty  per step MC mean and P10-P90 of rollout time, median and p90 trajectory
               completion, and the step time of policy A and B (a colocated batch-rollout
               policy: its rollout's runs shifted onto the step; any other: the policy's
               own Monte-Carlo replay, `core.simulator.replay_mc`), the fitted noise,
               coverage (None without calibration on per-request latencies or with
               uncertainty false)
  rolling_origin  `core.simulator.evaluation.rolling_origin` when asked for (each step's
               `per_request` scores and their mean in `mean.per_request`)
  forecast     `core.simulator.forecast.forecast_step` per step after the calibration
               steps, with `mean`, when asked for
  calibration  `Calibration.to_dict` (None when not calibrated)
  calibration_note  why not calibrated, naming the measured timings the trace has (None: calibrated)
  workload     {"steps", "first_step", "last_step", "samples", "multiturn"}

Calibration: request.calibrate None calibrates when the fit steps have measured timings
(per-turn engine latencies, t_gen or t_update_actor), False never, and
`CalibrateOn(fit_steps)` on those steps (none: the first step). Both policies replay
with the calibrated coefficients, limits and training MFU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from core.jsonable import json_safe
from core.simulator.calibration import (
    Calibration,
    accuracy_report,
    calibrate,
    mean_of_rows,
    measured_figures,
    partial_steps,
)
from core.simulator.config import Policy
from core.simulator.evaluation import noise_for, rolling_origin
from core.simulator.forecast import forecast_step
from core.simulator.measured import rollout_timed, uncalibrated_note
from core.simulator.policies import policy_spec
from core.simulator.policies.base import Env
from core.simulator.predictor import roofline_coefficients
from core.simulator.replay_mc import monte_carlo_replay
from core.simulator.request import Calibrate, CalibrateOn, ReplayRequest
from core.simulator.result import SimResult, compare
from core.simulator.sensitivity import RANGES, speedup_band, uncalibrated, with_overrides
from core.simulator.simulate import simulate
from core.simulator.uncertainty import FIGURES, NoiseModel, monte_carlo_step
from core.simulator.workload import StepWorkload

TIMELINE_MAX_INTERVALS = 10_000
# residual sd (log) above which the calibration is flagged as a poor fit
POOR_FIT_SD = 0.5
Progress = Callable[[float, str], None]


@dataclass
class Replay:
    steps: list[StepWorkload]
    a: SimResult
    b: SimResult | None
    calibration: Calibration | None
    accuracy: dict | None
    uncertainty: dict | None = None
    rolling_origin: dict | None = None
    forecast: dict | None = None
    # per policy side ("a", "b") not a batch rollout then training: its own Monte-Carlo
    # replay's per-step step-time quantiles (`replay_mc.monte_carlo_replay`)
    policy_mc: dict | None = None
    # why the replay ran uncalibrated, naming the timings the trace has (None: calibrated)
    calibration_note: str | None = None
    # the speedup's band over the uncalibrated parameters (`sensitivity.speedup_band`)
    sensitivity: dict | None = None


def fit_steps_for(steps: list[StepWorkload], option: Calibrate) -> list[int] | None:
    """The steps to calibrate on, or None for no calibration (see the module doc)."""
    if option is False or not steps:
        return None
    ids = list(option.fit_steps) if isinstance(option, CalibrateOn) else []
    if option is None:
        ids = [steps[0].step]
        if not rollout_timed(steps[0]):
            return None
    return ids or [steps[0].step]


def replay(steps: list[StepWorkload], request: ReplayRequest, progress: Progress | None = None) -> Replay:
    """Calibrate (as asked or when measured), then simulate policy A and B."""
    report = progress or (lambda fraction, message: None)
    cluster, model, limits = request.cluster, request.model, request.limits
    fit_ids = fit_steps_for(steps, request.calibrate)
    cal = acc = unc = noise = None
    coefficients = None
    lo = 0.05
    if fit_ids is not None:
        cal, acc, unc, noise = _calibrated(steps, request, fit_ids, report)
        cluster, limits, coefficients = cal.cluster, cal.limits, cal.coefficients
        lo = 0.4
    policy_a, policy_b = request.policy, request.compare_policy
    n_runs = 2 if policy_b is not None else 1
    width = (0.98 - lo) / n_runs

    cluster_b = request.compare_cluster if policy_b is not None else None
    if cluster_b is not None and cal is not None:
        cluster_b = dataclasses.replace(cluster_b, train_mfu=cluster.train_mfu)

    def run(policy: Policy, i: int) -> SimResult:
        start = lo + i * width
        return simulate(
            steps,
            cluster if i == 0 or cluster_b is None else cluster_b,
            model,
            limits,
            policy,
            lambda f: report(start + f * width, f"replaying under {policy.kind}: {f:.0%} of steps"),
            coefficients=coefficients,
        )

    a = run(policy_a, 0)
    b = run(policy_b, 1) if policy_b is not None else None
    pmc = policy_intervals(
        steps, request.seed, (model, limits, noise, coefficients), (a, policy_a, cluster), (b, policy_b, cluster_b)
    )
    ro = _rolling_origin(steps, request, report) if request.rolling_origin is not None else None
    fc = None
    if request.forecast is not None:
        env = Env(
            cluster,
            model,
            limits,
            Policy(),
            coefficients or roofline_coefficients(cluster, model),
            limits.kv_capacity(cluster, model),
        )
        fc = forecast_steps(
            steps,
            env,
            noise if fit_ids is not None else None,
            after=max(fit_ids) if fit_ids else None,
            workloads=request.forecast.workloads,
            n_runs=request.mc_runs,
            seed=request.seed,
        )
    note = None if cal is not None else uncalibrated_note(steps, request.calibrate)
    band = None
    if request.sensitivity and b is not None and b.makespan > 0:
        report(0.98, "sensitivity of the speedup to the uncalibrated parameters")
        sides = ((cluster, policy_a), (cluster_b or cluster, policy_b))
        band = sensitivity(steps, sides, (model, limits, coefficients), a.makespan / b.makespan, cal)
    return Replay(steps, a, b, cal, acc, unc, ro, fc, pmc, calibration_note=note, sensitivity=band)


def sensitivity(steps: list[StepWorkload], sides: tuple, engine: tuple, point: float, cal: Calibration | None) -> dict:
    """`speedup_band` of B over A (`sides`: (cluster, policy) of A and B; `engine`: model,
    limits, calibrated coefficients or None) over the parameters `cal` left open (a
    calibration of the training MFU alone keeps the roofline engine: its efficiencies
    stay open). Replays changing only training parameters reuse each side's rollouts."""
    model, limits, coefficients = engine
    engine_fitted = cal is not None and cal.method != "roofline"
    ranges = uncalibrated(engine_calibrated=engine_fitted, mfu_calibrated=cal is not None and cal.train_mfu is not None)
    engine_fields = {r.name for r in RANGES if r.part == "engine"}
    caches: tuple[dict, dict] = ({}, {})

    def pair(overrides: dict[str, float]) -> float | None:
        roofline = bool(engine_fields & set(overrides))  # the engine from the changed cluster
        a, b = (
            simulate(
                steps,
                with_overrides(c, overrides),
                model,
                limits,
                p,
                coefficients=None if roofline else coefficients,
                rollout_cache=None if roofline else cache,
            ).makespan
            for (c, p), cache in zip(sides, caches, strict=True)
        )
        return a / b if b > 0 else None

    return speedup_band(point, pair, ranges)


def _calibrated(
    steps: list[StepWorkload], request: ReplayRequest, fit_ids: list[int], report: Progress
) -> tuple[Calibration, dict | None, dict | None, NoiseModel | None]:
    """Calibration on `fit_ids`; the Monte-Carlo of its residual noise (unless turned off)
    and the accuracy on the other steps: (calibration, accuracy, uncertainty, noise)."""
    model = request.model
    report(0.05, f"calibrating on step(s) {', '.join(map(str, fit_ids))}")
    # the trace is taken to have run policy A's layout (colocated or not)
    colocated = not policy_spec(request.policy.kind).disaggregated
    cal = calibrate(steps, request.cluster, model, request.limits, fit_steps=fit_ids, colocated=colocated)
    noise = noise_for(steps, cal, model) if request.uncertainty is not None else None
    mc: dict[int, dict] = {}
    unc = acc = None
    if noise is not None:
        report(0.3, "Monte-Carlo replay of the residual noise")
        env = Env(
            cal.cluster, model, cal.limits, Policy(), cal.coefficients, cal.limits.kv_capacity(cal.cluster, model)
        )
        mc = {w.step: monte_carlo_step(env, w, noise, n_runs=request.mc_runs, seed=request.seed) for w in steps}
        unc = {"noise": noise.to_dict(), "steps": mc}
    if any(w.step not in fit_ids for w in steps):
        report(0.35, "predicting the other steps")
        acc = accuracy_report(steps, cal, model, noise=noise, mc_results=mc)
    return cal, acc, unc, noise


def _rolling_origin(steps: list[StepWorkload], request: ReplayRequest, report: Progress) -> dict:
    """`rolling_origin` on the request's own layout, with its Monte-Carlo settings."""
    assert request.rolling_origin is not None
    return rolling_origin(
        steps,
        request.cluster,
        request.model,
        request.limits,
        window=request.rolling_origin.window,
        monte_carlo=request.uncertainty is not None,
        n_runs=request.mc_runs,
        seed=request.seed,
        progress=lambda f, m: report(0.98, f"rolling origin: {m}"),
    )


def policy_intervals(steps: list[StepWorkload], seed: int, engine: tuple, *sides: tuple) -> dict | None:
    """{side: per-step step-time quantiles} of the policy's own Monte-Carlo replay, for
    each side ("a", "b": (result, policy, cluster)) whose step is not a batch rollout then
    training; None without a noise model (`engine`: model, limits, noise, coefficients)."""
    model, limits, noise, coefficients = engine
    if noise is None:
        return None
    return {
        k: monte_carlo_replay(steps, c, model, limits, p, noise, coefficients=coefficients, seed=seed)["steps"]
        for k, (res, p, c) in zip(("a", "b"), sides, strict=True)
        if res is not None and not _rollout_then_training(res)
    }


def _timeline(result: SimResult, max_intervals: int) -> tuple[list[dict], dict | None]:
    total = sum(len(lane.intervals) for lane in result.lanes)
    if total <= max_intervals:
        return [{"name": l.name, "gpus": l.gpus, "intervals": l.intervals} for l in result.lanes], None
    # keep whole steps, first to last, while they fit
    per_step: dict[int, int] = {}
    for lane in result.lanes:
        for iv in lane.intervals:
            per_step[iv[4]] = per_step.get(iv[4], 0) + 1
    last, used = None, 0
    for step in sorted(per_step):
        if used + per_step[step] > max_intervals:
            break
        used += per_step[step]
        last = step
    lanes = [
        {"name": l.name, "gpus": l.gpus, "intervals": [iv for iv in l.intervals if last is not None and iv[4] <= last]}
        for l in result.lanes
    ]
    return lanes, {"last_step": last, "intervals_total": total}


def sim_dict(result: SimResult, max_intervals: int = TIMELINE_MAX_INTERVALS) -> dict:
    """`SimResult.to_dict` with the timeline kept modest (see the module doc)."""
    d = result.to_dict(timeline=False)
    lanes, truncated = _timeline(result, max_intervals)
    d["timeline"] = _json(lanes)
    d["timeline_truncated"] = truncated
    return d


def _json(x: Any) -> Any:
    return orjson.loads(orjson.dumps(x, option=orjson.OPT_SERIALIZE_NUMPY))


def forecast_steps(
    steps: list[StepWorkload],
    env: Env,
    noise: NoiseModel | None,
    *,
    after: int | None,
    workloads: int,
    n_runs: int | None,
    seed: int,
) -> dict:
    """Forecast every step after `after` (the last calibration step; None: after the
    first step) from the non-partial steps before it; mean over non-partial targets."""
    partial = partial_steps(steps)
    after = steps[0].step if after is None else after
    rows = []
    for w in steps:
        if w.step <= after:
            continue
        history = [h for h in steps if h.step < w.step and h.step not in partial]
        if not history:
            continue
        row = forecast_step(env, history, w, noise, workloads=workloads, n_runs=n_runs, seed=seed)
        row["partial"] = w.step in partial
        rows.append(row)
    return {"workloads": workloads, "steps": rows, "mean": mean_of_rows(rows, partial)}


def _rollout_then_training(result: SimResult) -> bool:
    """The policy rolls each step out as one batch, then trains on the same GPUs (a
    colocated batch-rollout policy): its step time is the rollout's plus fixed stages."""
    spec = policy_spec(result.config["policy"]["kind"])
    return spec.batch_rollouts and not spec.disaggregated


def uncertainty_dict(r: Replay) -> dict | None:
    """Per step: MC mean and P10-P90 of the rollout figures and of policy A's and B's
    step time (the batch rollout's runs shifted when the step is that rollout then
    training on the same GPUs, else the policy's own Monte-Carlo replay), coverage of the
    measured values."""
    if r.uncertainty is None:
        return None
    mc = r.uncertainty["steps"]
    a_steps = {s.step: s for s in r.a.steps}
    b_steps = {s.step: s for s in r.b.steps} if r.b is not None else {}
    serial = {"a": _rollout_then_training(r.a), "b": r.b is not None and _rollout_then_training(r.b)}
    rows = []
    for w in r.steps:
        m = mc.get(w.step)
        if m is None:
            continue
        row: dict = {"step": w.step, "n_runs": m["n_runs"]}
        meas = measured_figures(w)
        for k in FIGURES:
            row[k] = {x: m[k][x] for x in ("mean", "p10", "p90")}
            row[k]["deterministic"] = m["deterministic"][k]
            row[k]["measured"] = meas[k]
            row[k]["covered"] = None if meas[k] is None else bool(m[k]["p10"] <= meas[k] <= m[k]["p90"])
        for which, by in (("a", a_steps), ("b", b_steps)):
            s = by.get(w.step)
            own = (r.policy_mc or {}).get(which, {}).get(w.step)
            if s is not None and own is not None:
                row[f"step_s_{which}"] = {x: own[x] for x in ("mean", "p10", "p90")}
                row[f"step_s_{which}"]["deterministic"] = s.step_time
            if s is None or not serial[which]:
                continue
            # the step is the rollout then deterministic stages: shift the rollout's runs
            shift = s.step_time - s.stages.get("rollout", 0.0)
            row[f"step_s_{which}"] = {x: m["rollout_s"][x] + shift for x in ("mean", "p10", "p90")}
            row[f"step_s_{which}"]["deterministic"] = s.step_time
        rows.append(row)
    cov = {}
    for k in FIGURES:
        c = [row[k]["covered"] for row in rows if row[k]["covered"] is not None]
        cov[k] = float(np.mean(c)) if c else None
    out = {"noise": r.uncertainty["noise"], "interval": [10, 90], "steps": rows, "coverage": cov, "warning": None}
    sd = max(r.uncertainty["noise"]["sd"] or [0.0])
    if sd > POOR_FIT_SD:
        out["warning"] = (
            f"the calibrated engine explains the measured latencies poorly (residual sd up to {sd:.2f} in log): "
            "the Monte-Carlo mean and intervals are wide; try another replica layout or concurrency"
        )
    return out


def _compared(r: Replay) -> dict | None:
    """`compare(a, b)` with the speedup's band beside its point estimate when asked for."""
    if r.b is None:
        return None
    out = compare(r.a, r.b)
    if r.sensitivity is not None:
        out["total"]["speedup_band"] = r.sensitivity["band"]
        out["sensitivity"] = r.sensitivity
    return out


def result_dict(r: Replay, max_intervals: int = TIMELINE_MAX_INTERVALS) -> dict:
    return json_safe(
        {
            "a": sim_dict(r.a, max_intervals),
            "b": sim_dict(r.b, max_intervals) if r.b is not None else None,
            "compare": _compared(r),
            "accuracy": r.accuracy,
            "uncertainty": uncertainty_dict(r),
            "rolling_origin": r.rolling_origin,
            "forecast": r.forecast,
            "calibration": r.calibration.to_dict() if r.calibration is not None else None,
            "calibration_note": r.calibration_note,
            "workload": {
                "steps": len(r.steps),
                "first_step": r.steps[0].step,
                "last_step": r.steps[-1].step,
                "samples": int(sum(w.n_samples for w in r.steps)),
                "multiturn": any(w.is_multiturn for w in r.steps),
            },
        }
    )
