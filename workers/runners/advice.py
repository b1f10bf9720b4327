"""Running advice jobs: read a trace, calibrate when it has measured timings (as
simulations do), fit the residual noise, sweep the configurations
(`core.simulator.advisor.advise`, parallel across processes), store the ranking.

Pure half (the Celery task and `rlvr-explorer advise` in-process): `advice_of(steps,
params, progress)`. Result: `advise`'s ranking (each configuration with its swept
`params`, per-step mean / P10 / P90 step time and its `gain` over the reference by
cause), per-step winners and step ranges (with the cause of each winner's gain),
`reference`, `why_best`, plus `calibration` (None when not calibrated), `calibration_note`
(why not, naming the measured timings the trace has) and `workload`.
"""

from __future__ import annotations

import logging
import os

from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobStatus, Trace, TraceStatus
from core.jsonable import json_safe
from core.simulator import ClusterConfig, EngineLimits, ModelConfig, calibrate
from core.simulator.advisor import advise, default_grid
from core.simulator.config import GpuSpec
from core.simulator.evaluation import noise_for
from core.simulator.measured import uncalibrated_note
from core.simulator.replay_mc import DEFAULT_RUNS
from workers.runners.outcome import NOT_READY, JobFailed, job_outcome
from workers.runners.simulations import Progress, ThrottledProgress, fit_steps_for, load_columns, steps_of_columns

log = logging.getLogger(__name__)


def workers_for_sweep() -> int:
    """Processes for the sweep: RLVR_ADVICE_WORKERS, else the CPUs (at most 8)."""
    env = os.environ.get("RLVR_ADVICE_WORKERS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, min(8, os.cpu_count() or 1))


def advice_of(steps, params: dict, progress: Progress | None = None, workers: int | None = None) -> dict:
    report = progress or (lambda f, m: None)
    gpu = GpuSpec(**params["gpu"])
    model = ModelConfig(**params["model"])
    n = params["n_gpus"]
    cal = noise = None
    fit_ids = fit_steps_for(steps, params.get("calibrate"))
    if fit_ids is not None:
        report(0.05, f"calibrating on step(s) {', '.join(map(str, fit_ids))}")
        cal = calibrate(steps, ClusterConfig(gpu=gpu, n_gpus=n), model, EngineLimits(), fit_steps=fit_ids)
        noise = noise_for(steps, cal, model)
    grid = [
        c
        for c in default_grid(
            n, model, gpu, balancing=tuple(params["balancing"]), concurrency=tuple(params["concurrency"])
        )
        if c["policy"] in params["policies"]
    ]
    if not grid:
        raise ValueError("policies: no configuration fits the GPU budget")
    report(0.3, f"sweeping {len(grid)} configurations")
    out = advise(
        steps,
        gpu,
        n,
        model,
        calibration=cal,
        noise=noise,
        grid=grid,
        workers=workers or workers_for_sweep(),
        n_runs=params["runs"],
        policy_runs=params.get("policy_runs", DEFAULT_RUNS),
        seed=params["seed"],
        progress=lambda f, m: report(0.3 + 0.68 * f, m),
    )
    out["calibration"] = cal.to_dict() if cal is not None else None
    out["calibration_note"] = None if cal is not None else uncalibrated_note(steps, params.get("calibrate"))
    out["uncertainty"] = "mc" if noise is not None else None
    out["workload"] = {
        "steps": len(steps),
        "first_step": steps[0].step,
        "last_step": steps[-1].step,
        "samples": int(sum(w.n_samples for w in steps)),
    }
    return json_safe(out)


def run_advice_job(job_id: int) -> None:
    engine = get_engine()
    with new_session() as session:
        job = session.get(Job, job_id)
        if job is None or job.status == JobStatus.SUCCEEDED:
            return
        params = dict(job.params)
        trace = session.get(Trace, params["trace_id"])
    progress = ThrottledProgress(job_id)
    with job_outcome(engine, job_id, "advice") as outcome:
        if trace is None or trace.status != TraceStatus.READY:
            raise JobFailed(NOT_READY)
        progress(0.01, "reading the trace")
        with engine.connect() as conn:
            columns = load_columns(conn, trace, tuple(params["steps"]) if params.get("steps") else None)
        steps = steps_of_columns(columns, trace.max_response_len) if columns.get("samples") is not None else []
        if not steps:
            raise JobFailed("steps: no training steps to advise on")
        out = advice_of(steps, params, progress)
        best = out["ranking"][0]
        outcome.succeed(out, f"{out['n_configurations']} configurations; best {best['label']}")
