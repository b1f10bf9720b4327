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
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from backend.jobs.contracts import ADVICE_KIND
from backend.jobs.dispatch import dispatch
from backend.jobs.simulations import (
    _calibrate,
    _check_fields,
    _int,
    _resolve_names,
    _step_range,
)
from backend.jobs.state import create_job, find_reusable
from backend.store.models import Job
from core.simulator.config import BALANCING_MODES, GPU_PRESETS, MODEL_PRESETS, ClusterConfig, ModelConfig, to_dict
from core.simulator.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_N_GPUS
from core.simulator.policies import POLICIES

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
    "seed",
)


def _choices(value: Any, allowed, where: str, default: list) -> list:
    if value is None:
        return list(default)
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: expected a non-empty list")
    for i, v in enumerate(value):
        if v not in allowed:
            raise ValueError(f"{where}[{i}]: must be one of {', '.join(map(str, allowed))}, got {v!r}")
    return list(dict.fromkeys(value))


def advice_params(body: dict) -> dict:
    """Validated parameters of an advice job (ValueError names the field)."""
    _check_fields(body, ADVICE_FIELDS)
    if body.get("trace_id") is None:
        raise ValueError("trace_id: required (the trace to advise on)")
    gpu = _resolve_names(body.get("gpu") or DEFAULT_GPU, GPU_PRESETS, "preset")
    n = _int(body.get("n_gpus", DEFAULT_N_GPUS), "n_gpus", 1)
    if n > 4096:
        raise ValueError(f"n_gpus: must be <= 4096, got {n}")
    cluster = ClusterConfig.from_dict({"gpu": gpu, "n_gpus": n})
    model = ModelConfig.from_dict(_resolve_names(body.get("model") or DEFAULT_MODEL, MODEL_PRESETS, "preset"))
    conc = body.get("concurrency", [None, 256])
    if not isinstance(conc, list) or not conc:
        raise ValueError("concurrency: expected a non-empty list of running-sequence limits (null: calibrated)")
    conc = [None if c is None else _int(c, f"concurrency[{i}]", 1) for i, c in enumerate(conc)]
    runs = _int(body.get("runs", 200), "runs", 10)
    if runs > 5000:
        raise ValueError(f"runs: must be <= 5000, got {runs}")
    return {
        "trace_id": _int(body["trace_id"], "trace_id", 1),
        "gpu": to_dict(cluster.gpu),
        "n_gpus": n,
        "model": to_dict(model),
        "policies": _choices(body.get("policies"), list(POLICIES), "policies", list(POLICIES)),
        "balancing": _choices(body.get("balancing"), BALANCING_MODES, "balancing", ["none", "kk"]),
        "concurrency": list(dict.fromkeys(conc)),
        "calibrate": _calibrate(body.get("calibrate")),
        "steps": _step_range(body.get("steps")),
        "runs": runs,
        "seed": _int(body.get("seed", 0), "seed"),
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
