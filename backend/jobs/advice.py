"""Advice requests: check a body into a typed `core.simulator.advice.AdviceRequest`, then
create and queue the job (the configuration advisor, `core.simulator.advisor`). Shared by
the REST API and the CLI.

Fields (stored resolved by `AdviceRequest.to_json`, so identical requests share a job):
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
from core.simulator.advice import AdviceRequest
from core.simulator.config import BALANCING_MODES, GPU_PRESETS, MODEL_PRESETS, ModelConfig, gpu_from, to_dict
from core.simulator.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_N_GPUS
from core.simulator.feasibility import InfeasibleLayout, min_training_gpus, training_bytes
from core.simulator.policies import POLICIES
from core.simulator.replay_mc import DEFAULT_RUNS
from core.simulator.request import calibrate_from_json

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


def advice_request(body: dict) -> AdviceRequest:
    """The typed advice request of a body (REST or CLI), checked once (ValueError names
    the field): a budget too small to train the model on is refused here."""
    check_fields(body, ADVICE_FIELDS)
    if body.get("trace_id") is None:
        raise ValueError("trace_id: required (the trace to advise on)")
    counts = {k: c.check(body.get(k, ADVICE_DEFAULTS[k]), k) for k, c in ADVICE_COUNTS.items()}
    steps = step_range(body.get("steps"))
    request = AdviceRequest(
        trace_id=check_id(body["trace_id"], "trace_id"),
        gpu=gpu_from(resolve_names(body.get("gpu") or DEFAULT_GPU, GPU_PRESETS), "gpu"),
        n_gpus=counts["n_gpus"],
        model=ModelConfig.from_dict(resolve_names(body.get("model") or DEFAULT_MODEL, MODEL_PRESETS)),
        policies=tuple(choices_list(body.get("policies"), list(POLICIES), "policies", list(POLICIES))),
        balancing=tuple(choices_list(body.get("balancing"), BALANCING_MODES, "balancing", DEFAULT_BALANCING)),
        concurrency=tuple(concurrency_list(body.get("concurrency", DEFAULT_CONCURRENCY))),
        calibrate=calibrate_from_json(calibrate_option(body.get("calibrate"))),
        steps=(steps[0], steps[1]) if steps is not None else None,
        runs=counts["runs"],
        policy_runs=counts["policy_runs"],
        seed=counts["seed"],
    )
    least = min_training_gpus(request.model, request.gpu)
    if least > request.n_gpus:
        raise InfeasibleLayout(
            f"n_gpus: training {request.model.name} needs at least {least} {request.gpu.name} GPUs "
            f"({training_bytes(request.model) / 1e9:.0f} GB of bf16 weights and gradients and fp32 Adam states, "
            f"sharded), got {request.n_gpus}"
        )
    return request


def advice_params(body: dict) -> dict:
    """What an advice job row stores for a body: `advice_request(body).to_json()`."""
    return advice_request(body).to_json()


def queue_advice(session: Session, team_id: int, request: AdviceRequest) -> tuple[Job, bool]:
    """(job, created): an identical advice on the trace is reused. The row stores `request.to_json()`."""
    params = request.to_json()
    existing = find_reusable(session, request.trace_id, ADVICE_KIND, params)
    if existing is not None:
        return existing, False
    job = create_job(session, team_id=team_id, trace_id=request.trace_id, kind=ADVICE_KIND, params=params)
    session.commit()
    dispatch(job.id, ADVICE_KIND)
    return job, True
