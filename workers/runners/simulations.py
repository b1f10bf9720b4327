"""Running simulation jobs: read a trace's columns, calibrate when it has measured
timings, replay it under policy A (and B), store a compact result.

Pure half (used by the Celery task and by `rlvr-explorer simulate` in-process):
`replay(steps, params, progress) -> Replay` and `result_dict(replay)`.
I/O half: `load_columns(conn, trace, step_range)` and `run_simulation_job(job_id)`.

Job result (JSON):
  a, b         `SimResult.to_dict` of policy A and B (b None without compare_policy):
               makespan, stage totals, idle GPU-seconds by cause and per-step results,
               plus `timeline` (lanes of [start, end, state, label, step] intervals).
               The timeline is stored whole when it has at most
               TIMELINE_MAX_INTERVALS intervals, else only for the first steps that fit
               (`timeline_truncated`: {"last_step", "intervals_total"}).
  compare      `compare(a, b)`: total and per-step speedup of B over A (None without B)
  accuracy     `accuracy_report` on the steps not used for fitting (None without
               calibration or without other steps)
  uncertainty  per step MC mean and P10-P90 of rollout time, median and p90 trajectory
               completion, and the step time of policy A and B (a colocated batch-rollout
               policy: its rollout's runs shifted onto the step; any other: the policy's
               own Monte-Carlo replay, `core.simulator.replay_mc`), the fitted noise, coverage (None without calibration on per-request
               latencies or with uncertainty false)
  rolling_origin  `core.simulator.evaluation.rolling_origin` when asked for
  forecast     `core.simulator.forecast.forecast_step` per step after the calibration
               steps, with `mean`, when asked for
  calibration  `Calibration.to_dict` (None when not calibrated)
  calibration_note  why not calibrated, naming the measured timings the trace has (None: calibrated)
  workload     {"steps", "first_step", "last_step", "samples", "multiturn"}

Chrome-trace export: the worker writes the complete timeline of each policy as gzipped
Chrome trace JSON to ``<data_dir>/simulations/<job_id>/chrome_trace_{a,b}.json.gz``
(the data folder is shared by the API and the workers, as uploads are), so the download
never recomputes a replay; when the file is missing (a worker on another machine
without the shared folder) the API rebuilds it from the stored timeline
(`chrome_trace_from_result`), complete whenever the timeline was not truncated.

Calibration: params["calibrate"] None calibrates when the fit steps have measured
timings (per-turn engine latencies, t_gen or t_update_actor), False never, and
{"fit_steps": [..]} on those steps (an empty list: the first step). Both policies
replay with the calibrated coefficients, limits and training MFU.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import orjson
from sqlalchemy.engine import Connection

from backend.jobs.contracts import chrome_trace_path
from backend.jobs.simulations import compare_cluster_of, configs_of
from backend.jobs.state import set_progress
from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobStatus, Trace, TraceStatus
from backend.store.trace_tables import load_trace_tables
from core.analysis.tables import STEP_TIMING_COLUMNS
from core.jsonable import json_safe
from core.simulator import (
    Calibration,
    SimResult,
    StepWorkload,
    accuracy_report,
    calibrate,
    chrome_trace,
    compare,
    simulate,
)
from core.simulator.calibration import mean_of_rows, measured_figures, partial_steps
from core.simulator.config import Policy
from core.simulator.evaluation import noise_for, rolling_origin
from core.simulator.forecast import forecast_step
from core.simulator.measured import rollout_timed, uncalibrated_note
from core.simulator.policies import policy_spec
from core.simulator.policies.base import Env
from core.simulator.predictor import roofline_coefficients
from core.simulator.replay_mc import monte_carlo_replay
from core.simulator.uncertainty import FIGURES, NoiseModel, monte_carlo_step
from core.simulator.workload import workload_from_columns
from workers.runners.outcome import NOT_READY, JobFailed, job_outcome

log = logging.getLogger(__name__)

TIMELINE_MAX_INTERVALS = 10_000
# residual sd (log) above which the calibration is flagged as a poor fit
POOR_FIT_SD = 0.5
Progress = Callable[[float, str], None]

# The columns the simulator's workload builder and the workload fit read, per table.
WANTED = {
    "samples": (
        "step",
        "group_idx",
        "sample_idx",
        "prompt_len",
        "response_len",
        "dp_rank",
        "validate",
        "latency_s",
        "task_id",
    ),
    "turns": (
        "step",
        "group_idx",
        "sample_idx",
        "turn",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "engine_latency_s",
    ),
    "tool_calls": ("step", "group_idx", "sample_idx", "turn", "latency_s", "response_tokens"),
    "rank_timings": ("step", "rank", "phase", "seconds", "validate"),
}


# --------------------------------------------------------------------------- reading


def load_columns(conn: Connection, trace: Trace, step_range: tuple[int, int] | None = None) -> dict[str, dict]:
    """{table: {column: array}} of the trace (steps in [lo, hi) when given), for
    `workload_from_columns` and `fit_workload`; tables the trace lacks are absent."""
    out = load_trace_tables(conn, trace, {**WANTED, "steps": ("step", *STEP_TIMING_COLUMNS)}, step_range)
    if "tool_calls" in out and "latency_s" not in out["tool_calls"]:
        del out["tool_calls"]  # tool calls without latencies add nothing to a replay
    return out


def steps_of_columns(columns: dict[str, dict], max_response_len: int | None = None) -> list[StepWorkload]:
    if "samples" not in columns:
        raise ValueError("trace_id: the trace has no samples to replay")
    return workload_from_columns(
        columns["samples"],
        columns.get("turns"),
        columns.get("tool_calls"),
        columns.get("rank_timings"),
        columns.get("steps"),
        max_response_len=max_response_len,
    )


# --------------------------------------------------------------------------- replay (pure)


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


def has_measurements(w: StepWorkload) -> bool:
    return rollout_timed(w)


def fit_steps_for(steps: list[StepWorkload], calibrate_param) -> list[int] | None:
    """The steps to calibrate on, or None for no calibration (see the module doc)."""
    if calibrate_param is False or not steps:
        return None
    ids = list((calibrate_param or {}).get("fit_steps") or [])
    if calibrate_param is None:
        ids = [steps[0].step]
        if not has_measurements(steps[0]):
            return None
    return ids or [steps[0].step]


def replay(steps: list[StepWorkload], params: dict, progress: Progress | None = None) -> Replay:
    """Calibrate (as asked or when measured), then simulate policy A and B."""
    report = progress or (lambda fraction, message: None)
    cluster, model, limits, policy_a, policy_b = configs_of(params)
    fit_ids = fit_steps_for(steps, params.get("calibrate"))
    cal = acc = unc = noise = None
    coefficients = None
    lo = 0.05
    if fit_ids is not None:
        cal, acc, unc, noise = _calibrated(steps, params, (cluster, model, limits), fit_ids, report)
        cluster, limits, coefficients = cal.cluster, cal.limits, cal.coefficients
        lo = 0.4
    n_runs = 2 if policy_b is not None else 1
    width = (0.98 - lo) / n_runs

    cluster_b = compare_cluster_of(params)
    if cluster_b is not None and cal is not None:
        cluster_b = dataclasses.replace(cluster_b, train_mfu=cluster.train_mfu)

    def run(policy, i: int) -> SimResult:
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
        steps, params, (model, limits, noise, coefficients), (a, policy_a, cluster), (b, policy_b, cluster_b)
    )
    ro = _rolling_origin(steps, params, report) if params.get("rolling_origin") else None
    fc = None
    if params.get("forecast"):
        env = Env(
            cluster,
            model,
            limits,
            Policy(),
            coefficients or roofline_coefficients(cluster, model),
            limits.kv_capacity(cluster, model),
        )
        fc = _forecast(steps, params, env, noise if fit_ids is not None else None, fit_ids)
    note = None if cal is not None else uncalibrated_note(steps, params.get("calibrate"))
    return Replay(steps, a, b, cal, acc, unc, ro, fc, pmc, calibration_note=note)


def _calibrated(
    steps: list[StepWorkload], params: dict, configs: tuple, fit_ids: list[int], report: Progress
) -> tuple[Calibration, dict | None, dict | None, NoiseModel | None]:
    """Calibration on `fit_ids`; the Monte-Carlo of its residual noise (unless turned off)
    and the accuracy on the other steps: (calibration, accuracy, uncertainty, noise)."""
    cluster, model, limits = configs
    report(0.05, f"calibrating on step(s) {', '.join(map(str, fit_ids))}")
    cal = calibrate(steps, cluster, model, limits, fit_steps=fit_ids)
    mc_param = params.get("uncertainty", {})
    noise = noise_for(steps, cal, model) if mc_param is not False else None
    mc: dict[int, dict] = {}
    unc = acc = None
    if noise is not None:
        report(0.3, "Monte-Carlo replay of the residual noise")
        env = Env(
            cal.cluster, model, cal.limits, Policy(), cal.coefficients, cal.limits.kv_capacity(cal.cluster, model)
        )
        runs, seed = (mc_param or {}).get("runs"), int((mc_param or {}).get("seed") or 0)
        mc = {w.step: monte_carlo_step(env, w, noise, n_runs=runs, seed=seed) for w in steps}
        unc = {"noise": noise.to_dict(), "steps": mc}
    if any(w.step not in fit_ids for w in steps):
        report(0.35, "predicting the other steps")
        acc = accuracy_report(steps, cal, model, noise=noise, mc_results=mc)
    return cal, acc, unc, noise


def _forecast(
    steps: list[StepWorkload], params: dict, env: Env, noise: NoiseModel | None, fit_ids: list[int] | None
) -> dict:
    mc_param = params.get("uncertainty", {})
    return forecast_steps(
        steps,
        env,
        noise,
        after=max(fit_ids) if fit_ids else None,
        workloads=params["forecast"]["workloads"],
        n_runs=(mc_param or {}).get("runs"),
        seed=int((mc_param or {}).get("seed") or 0),
    )


def _rolling_origin(steps, params: dict, report: Progress) -> dict:
    """`rolling_origin` on the request's own layout, with its Monte-Carlo settings."""
    c0, m0, l0, _, _ = configs_of(params)
    mc_param = params.get("uncertainty", {})
    return rolling_origin(
        steps,
        c0,
        m0,
        l0,
        window=params["rolling_origin"].get("window"),
        monte_carlo=mc_param is not False,
        n_runs=(mc_param or {}).get("runs"),
        seed=int((mc_param or {}).get("seed") or 0),
        progress=lambda f, m: report(0.98, f"rolling origin: {m}"),
    )


def policy_intervals(steps, params: dict, engine: tuple, *sides: tuple) -> dict | None:
    """{side: per-step step-time quantiles} of the policy's own Monte-Carlo replay, for
    each side ("a", "b": (result, policy, cluster)) whose step is not a batch rollout then
    training; None without a noise model (`engine`: model, limits, noise, coefficients)."""
    model, limits, noise, coefficients = engine
    if noise is None:
        return None
    seed = int((params.get("uncertainty") or {}).get("seed") or 0)
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


def _json(x):
    return orjson.loads(orjson.dumps(x, option=orjson.OPT_SERIALIZE_NUMPY))


def forecast_steps(steps, env, noise, *, after, workloads, n_runs, seed) -> dict:
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


def result_dict(r: Replay, max_intervals: int = TIMELINE_MAX_INTERVALS) -> dict:
    return json_safe(
        {
            "a": sim_dict(r.a, max_intervals),
            "b": sim_dict(r.b, max_intervals) if r.b is not None else None,
            "compare": compare(r.a, r.b) if r.b is not None else None,
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


# --------------------------------------------------------------------------- Chrome trace


def write_chrome_traces(job_id: int, r: Replay) -> None:
    for which, result in (("a", r.a), ("b", r.b)):
        if result is None:
            continue
        path = chrome_trace_path(job_id, which)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(gzip.compress(orjson.dumps(chrome_trace(result)), compresslevel=5))
        tmp.replace(path)  # never a half-written file


# --------------------------------------------------------------------------- the job


class ThrottledProgress:
    """Progress written to the job row at most once a second (and at the end)."""

    def __init__(self, job_id: int) -> None:
        self.job_id, self.last = job_id, 0.0

    def __call__(self, fraction: float, message: str) -> None:
        now = time.monotonic()
        if now - self.last >= 1.0 or fraction >= 0.98:
            self.last = now
            set_progress(get_engine(), self.job_id, min(fraction, 0.99), message)


def synthetic_steps(source: dict) -> list[StepWorkload]:
    """The steps of a `workload` source (a PolyTrace parameter file)."""
    from core.workload.params_file import generate_from_parameters, load_parameters

    generated = generate_from_parameters(
        load_parameters(source["parameters"]),
        source["task"],
        source["steps"],
        source["groups"],
        source["samples_per_group"],
        seed=source["seed"],
    )
    return [g.to_step_workload() for g in generated]


def run_simulation_job(job_id: int) -> None:
    engine = get_engine()
    with new_session() as session:
        job = session.get(Job, job_id)
        if job is None or job.status == JobStatus.SUCCEEDED:
            return
        params = dict(job.params)
        trace = session.get(Trace, params["trace_id"]) if params.get("trace_id") is not None else None
    progress = ThrottledProgress(job_id)
    with job_outcome(engine, job_id, "simulation") as outcome:
        if params.get("trace_id") is not None:
            if trace is None or trace.status != TraceStatus.READY:
                raise JobFailed(NOT_READY)
            progress(0.01, "reading the trace")
            step_range = tuple(params["steps"]) if params.get("steps") else None
            with engine.connect() as conn:
                columns = load_columns(conn, trace, step_range)
            steps = steps_of_columns(columns, trace.max_response_len) if columns.get("samples") is not None else []
        else:
            progress(0.01, "generating the workload")
            steps = synthetic_steps(params["workload"])
            if params.get("steps"):
                lo, hi = params["steps"]
                steps = [w for w in steps if lo <= w.step < hi]
        if not steps:
            raise JobFailed("steps: no training steps to replay (is the step range empty?)")
        result = replay(steps, params, progress)
        write_chrome_traces(job_id, result)
        out = result_dict(result)
        summary = f"replayed {len(steps)} steps"
        if out["compare"] is not None and out["compare"]["total"]["speedup"] is not None:
            summary += f"; {params['compare_policy']['kind']} vs {params['policy']['kind']}: {out['compare']['total']['speedup']:.3f}x"
        outcome.succeed(out, summary)
