"""Advice requests: validate a body into job parameters, then create and queue the job
(the configuration advisor, `core.simulator.advisor`). Shared by the REST API and the CLI.

Parameters (stored resolved, so identical requests share a job):
  trace_id       the team's trace
  gpu            GPU preset name (case-insensitive) or {preset, overrides}
  n_gpus         the GPU budget every configuration uses
  model          model preset name or {preset, overrides}
  policies       policy kinds to sweep (default: all)
  balancing      DP balancing modes (default none, kk; streaming policies: none)
  concurrency    running-sequence limits per replica (null: the calibrated or
                 configured limits; default [null, 256])
  calibrate      like simulations: None (when measured), False, {"fit_steps": [...]}
  steps          [first, end) or None
  runs, seed     Monte-Carlo runs per layout and step (default 200) and seed
  policy_runs    replays per configuration that is not one batch rollout on the step's
                 critical path (the policy's own Monte-Carlo, default 16)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from backend.jobs.contracts import ADVICE_KIND
from backend.jobs.dispatch import dispatch
from backend.jobs.request_fields import (
    ADVICE_COUNTS,
    calibrate_option,
    check_fields,
    choices_list,
    concurrency_list,
    resolve_names,
    step_range,
)
from backend.jobs.state import create_job, find_reusable
from backend.store.ids import check_id
from backend.store.models import Job
from core.simulator.config import BALANCING_MODES, GPU_PRESETS, MODEL_PRESETS, ModelConfig, gpu_from, to_dict
from core.simulator.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_N_GPUS
from core.simulator.policies import POLICIES
from core.simulator.replay_mc import DEFAULT_RUNS

ADVICE_FIELDS = (
    "trace_id",
    "gpu",
    "n_gpus",
    "model",
    "policies",
    "balancing",
    "concurrency",
    "calibrate",
    "steps",
    "runs",
    "policy_runs",
    "seed",
)
# what the advisor sweeps when the request does not say
DEFAULT_BALANCING = ["none", "kk"]
DEFAULT_CONCURRENCY = [None, 256]
ADVICE_DEFAULTS = {"n_gpus": DEFAULT_N_GPUS, "runs": 200, "policy_runs": DEFAULT_RUNS, "seed": 0}


def advice_gpu(value: Any) -> dict:
    """The GPU of an advice (a preset name, case-insensitive, or an object) as stored."""
    return to_dict(gpu_from(resolve_names(value, GPU_PRESETS), "gpu"))


def advice_model(value: Any) -> dict:
    """The model of an advice (a preset name, case-insensitive, or an object) as stored."""
    return to_dict(ModelConfig.from_dict(resolve_names(value, MODEL_PRESETS)))


def advice_params(body: dict) -> dict:
    """Validated parameters of an advice job (ValueError names the field)."""
    check_fields(body, ADVICE_FIELDS)
    if body.get("trace_id") is None:
        raise ValueError("trace_id: required (the trace to advise on)")
    counts = {k: c.check(body.get(k, ADVICE_DEFAULTS[k]), k) for k, c in ADVICE_COUNTS.items()}
    return {
        "trace_id": check_id(body["trace_id"], "trace_id"),
        "gpu": advice_gpu(body.get("gpu") or DEFAULT_GPU),
        "n_gpus": counts["n_gpus"],
        "model": advice_model(body.get("model") or DEFAULT_MODEL),
        "policies": choices_list(body.get("policies"), list(POLICIES), "policies", list(POLICIES)),
        "balancing": choices_list(body.get("balancing"), BALANCING_MODES, "balancing", DEFAULT_BALANCING),
        "concurrency": concurrency_list(body.get("concurrency", DEFAULT_CONCURRENCY)),
        "calibrate": calibrate_option(body.get("calibrate")),
        "steps": step_range(body.get("steps")),
        "runs": counts["runs"],
        "policy_runs": counts["policy_runs"],
        "seed": counts["seed"],
    }


def queue_advice(session: Session, team_id: int, params: dict) -> tuple[Job, bool]:
    """(job, created): an identical advice on the trace is reused."""
    existing = find_reusable(session, params["trace_id"], ADVICE_KIND, params)
    if existing is not None:
        return existing, False
    job = create_job(session, team_id=team_id, trace_id=params["trace_id"], kind=ADVICE_KIND, params=params)
    session.commit()
    dispatch(job.id, ADVICE_KIND)
    return job, True
