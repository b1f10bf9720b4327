"""Simulation and workload requests: validate a request body into job parameters, then
create and queue the job. Shared by the REST API and the CLI.

Validation is pure (no database): every `ValueError` starts with the offending field,
``"cluster.rollout_tp: must be an integer >= 1, got 0"``, which the API turns into a
422 naming that field (`error_field`).

A simulation body becomes one typed `core.simulator.request.ReplayRequest`
(`simulation_request`): names matched case-insensitively ("qwen2.5-7b" is
"Qwen2.5-7B"), layout fields left out derived per policy from the GPU budget
(core/simulator/defaults.py), every layout checked to hold the model
(core/simulator/feasibility.py). The job row stores `request.to_json()` (its fields
are listed in core/simulator/request.py) and the worker decodes it with
`ReplayRequest.from_json`.

Workload job parameters (`workload_params`):
  trace_id          fit the team's trace (a length model per task), and/or
  parameters        PolyTrace's fitted-parameter file JSON to generate from
  task              which task to generate (fit: default the task with most samples;
                    parameter file: math | tool_calling, default the first it has)
  steps             steps to generate (0: fit report only; needs trace_id)
  groups, samples_per_group   per step (None with a trace: as fitted)
  seed, formats (packed | compact | multiturn; None: packed + compact, or multiturn +
  compact for multi-turn workloads), ingest (bool), name, dp_size
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from backend.jobs.contracts import SIMULATION_KIND, WORKLOAD_KIND
from backend.jobs.dispatch import QueueUnavailable, dispatch
from backend.jobs.request_fields import (
    MAX_GENERATED_SAMPLES,
    WORKLOAD_COUNTS,
    WORKLOAD_DEFAULTS,
    WORKLOAD_FORMATS,
    WORKLOAD_TEXTS,
    calibrate_option,
    check_bool,
    check_budget,
    check_fields,
    forecast_option,
    one_source,
    resolve_names,
    rolling_origin_option,
    sensitivity_option,
    step_range,
    uncertainty_option,
    workload_source,
)
from backend.jobs.state import create_job, find_reusable
from backend.store.ids import check_id
from backend.store.models import Job
from core.simulator.config import (
    BALANCING_MODES,
    DISPATCH_MODES,
    GPU_PRESETS,
    MODEL_PRESETS,
    ClusterConfig,
    EngineLimits,
    Policy,
    config_from_dict,
    to_dict,
)
from core.simulator.defaults import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    DEFAULT_N_GPUS,
    DEFAULT_POLICY,
    LAYOUT_FIELDS,
    defaults_dict,
)
from core.simulator.policies import POLICIES
from core.simulator.request import (
    ReplayRequest,
    SyntheticSource,
    build_request,
    calibrate_from_json,
    forecast_from_json,
    rolling_origin_from_json,
    uncertainty_from_json,
)

SIMULATION_FIELDS = (
    "trace_id",
    "workload",
    "cluster",
    "model",
    "limits",
    "policy",
    "compare_policy",
    "calibrate",
    "steps",
    "uncertainty",
    "rolling_origin",
    "forecast",
    "sensitivity",
)
WORKLOAD_FIELDS = (
    "trace_id",
    "parameters",
    "task",
    "steps",
    "groups",
    "samples_per_group",
    "seed",
    "formats",
    "ingest",
    "name",
    "dp_size",
)


def error_field(exc: ValueError) -> str | None:
    """The field a validation message starts with (``"cluster.n_gpus: ..."``)."""
    head = str(exc).split(":", 1)[0]
    return head if head and " " not in head else None


# --------------------------------------------------------------------------- presets


def presets() -> dict:
    """What a form needs: GPU and model presets, policy choices and every default."""
    default_cluster, default_policy = ClusterConfig(), Policy()
    return {
        "gpus": {name: dataclasses.asdict(g) for name, g in GPU_PRESETS.items()},
        "models": {name: to_dict(m) for name, m in MODEL_PRESETS.items()},
        "policies": list(POLICIES),
        "disaggregated_policies": [k for k, spec in POLICIES.items() if spec.disaggregated],
        "policy_help": {k: spec.help for k, spec in POLICIES.items()},
        # each policy's own parameters: type, default, bounds, help, and what it takes in words
        "policy_params": {
            k: [{**i.to_dict(), "allowed": i.allowed()} for i in spec.param_infos] for k, spec in POLICIES.items()
        },
        "policy_papers": {k: spec.paper for k, spec in POLICIES.items()},
        "balancing": list(BALANCING_MODES),
        "dispatch": list(DISPATCH_MODES),
        "workload_formats": list(WORKLOAD_FORMATS),
        "workload_tasks": ["math", "tool_calling"],
        "defaults": {
            **defaults_dict(),
            "cluster": {
                **to_dict(default_cluster),
                "gpu": DEFAULT_GPU,
                "n_gpus": DEFAULT_N_GPUS,
                **defaults_dict()["layouts"]["colocated"],
            },
            "model": DEFAULT_MODEL,
            "limits": to_dict(EngineLimits()),
            "policy": to_dict(default_policy),
        },
    }


# --------------------------------------------------------------------------- simulations


def simulation_request(body: dict) -> ReplayRequest:
    """The replay request of a body (REST or CLI), checked once: each field by its one
    check, then the request as a whole (`core.simulator.request.build_request`: the
    policies, each policy's layout and whether it holds the model). ValueError names the
    field."""
    check_fields(body, SIMULATION_FIELDS)
    check_simulation_source(body)
    cluster = body.get("cluster") or {}
    if isinstance(cluster, dict) and "gpu" in cluster:
        cluster = {**cluster, "gpu": resolve_names(cluster["gpu"], GPU_PRESETS)}
    if isinstance(cluster, dict):
        cluster = {"gpu": DEFAULT_GPU, "n_gpus": DEFAULT_N_GPUS, **cluster}
    model = resolve_names(body.get("model") or DEFAULT_MODEL, MODEL_PRESETS)
    c, m, lim, _ = config_from_dict({"cluster": cluster, "model": model, "limits": body.get("limits") or {}})
    check_budget(c.n_gpus, "cluster.n_gpus")
    steps = step_range(body.get("steps"))
    trace_id = check_id(body["trace_id"], "trace_id") if body.get("trace_id") is not None else None
    source = workload_source(body["workload"]) if trace_id is None else None
    return build_request(
        cluster=c,
        explicit_layout={k: getattr(c, k) for k in LAYOUT_FIELDS if cluster.get(k) is not None},
        model=m,
        limits=lim,
        policy=body.get("policy") or DEFAULT_POLICY,
        compare_policy=body.get("compare_policy"),
        calibrate=calibrate_from_json(calibrate_option(body.get("calibrate"))),
        steps=(steps[0], steps[1]) if steps is not None else None,
        uncertainty=uncertainty_from_json(uncertainty_option(body.get("uncertainty"))),
        rolling_origin=rolling_origin_from_json(rolling_origin_option(body.get("rolling_origin"))),
        forecast=forecast_from_json(forecast_option(body.get("forecast"))),
        trace_id=trace_id,
        workload=SyntheticSource(**source) if source is not None else None,
        sensitivity=sensitivity_option(body.get("sensitivity")),
    )


def check_simulation_source(body: Any) -> None:
    """A replay has one workload: a trace (`trace_id`) or a synthetic source (`workload`)."""
    one_source(body, "trace_id", "workload", ("replay a trace", "a synthetic source"))


def simulation_params(body: dict) -> dict:
    """What a simulation job row stores for a body: `simulation_request(body).to_json()`."""
    return simulation_request(body).to_json()


# --------------------------------------------------------------------------- workloads


def check_workload_source(body: Any) -> None:
    """A workload job fits a trace (`trace_id`) or generates from a parameter file."""
    one_source(body, "trace_id", "parameters", ("fit a trace", "a PolyTrace parameter file"))


def workload_params(body: dict, *, multiturn_trace: bool = False) -> dict:
    """Validated parameters of a workload job (ValueError names the field).
    `multiturn_trace`: the trace to fit has turns (so "multiturn" output is possible)."""
    from core.workload.params_file import load_parameters

    check_fields(body, WORKLOAD_FIELDS)
    check_workload_source(body)
    has_trace = body.get("trace_id") is not None
    defaults = {"steps": 0 if has_trace else 1, **WORKLOAD_DEFAULTS}
    out: dict[str, Any] = {k: count.check(body.get(k, defaults.get(k)), k) for k, count in WORKLOAD_COUNTS.items()}
    out.update({k: text.check(body.get(k), k) for k, text in WORKLOAD_TEXTS.items()})
    out["ingest"] = check_bool(body.get("ingest", True), "ingest")
    if not has_trace and out["steps"] < 1:
        raise ValueError(f"steps: must be an integer in 1..{WORKLOAD_COUNTS['steps'].hi}, got {out['steps']!r}")
    multiturn = multiturn_trace
    if has_trace:
        out["trace_id"] = check_id(body["trace_id"], "trace_id")
    else:
        try:
            parsed = load_parameters(body["parameters"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"parameters: {exc}") from None
        task = out["task"] or (parsed.tasks[0] if parsed.tasks else None)
        if task not in parsed.tasks:
            raise ValueError(f"task: must be one of {', '.join(parsed.tasks) or '(none in the file)'}, got {task!r}")
        out.update(task=task, parameters=body["parameters"])
        out["groups"] = out["groups"] or 64
        out["samples_per_group"] = out["samples_per_group"] or 8
        multiturn = task == "tool_calling"
    if (
        out["groups"]
        and out["samples_per_group"]
        and out["steps"] * out["groups"] * out["samples_per_group"] > MAX_GENERATED_SAMPLES
    ):
        raise ValueError(f"steps: steps × groups × samples_per_group must be <= {MAX_GENERATED_SAMPLES:,}")
    out["formats"] = _formats(body.get("formats"), multiturn)
    if out["steps"] == 0 and out["ingest"] and not has_trace:
        raise ValueError("steps: must be >= 1 to generate")
    return out


def _formats(formats: Any, multiturn: bool) -> list[str]:
    if formats is None:
        return ["multiturn", "compact"] if multiturn else ["packed", "compact"]
    out = check_formats(formats)
    if "multiturn" in out and not multiturn:
        raise ValueError("formats: 'multiturn' needs a multi-turn workload (a trace with turns, or task tool_calling)")
    return out


def check_formats(formats: Any) -> list[str]:
    """A non-empty list of WORKLOAD_FORMATS (duplicates dropped)."""
    if not isinstance(formats, list) or not formats:
        raise ValueError(f"formats: expected a non-empty list of {', '.join(WORKLOAD_FORMATS)}")
    for i, f in enumerate(formats):
        if f not in WORKLOAD_FORMATS:
            raise ValueError(f"formats[{i}]: must be one of {', '.join(WORKLOAD_FORMATS)}, got {f!r}")
    return list(dict.fromkeys(formats))


# --------------------------------------------------------------------------- queueing


def queue_simulation(session: Session, team_id: int, request: ReplayRequest) -> tuple[Job, bool]:
    """(job, created): an identical queued/running/finished replay of the trace is reused
    (the simulator is deterministic). The row stores `request.to_json()`."""
    trace_id, params = request.trace_id, request.to_json()
    if trace_id is not None:
        existing = find_reusable(session, trace_id, SIMULATION_KIND, params)
        if existing is not None:
            return existing, False
    job = create_job(session, team_id=team_id, trace_id=trace_id, kind=SIMULATION_KIND, params=params)
    session.commit()
    _dispatch_or_drop(session, job, keep=trace_id is not None)
    return job, True


def queue_workload(session: Session, team_id: int, params: dict) -> Job:
    """Always a new job: it writes files that its download serves."""
    job = create_job(session, team_id=team_id, trace_id=params.get("trace_id"), kind=WORKLOAD_KIND, params=params)
    session.commit()
    _dispatch_or_drop(session, job, keep=False)
    return job


def _dispatch_or_drop(session: Session, job: Job, keep: bool) -> None:
    """Send the job; if the broker is down (QueueUnavailable, a 503), a job that the same
    request finds again (`keep`: reused by parameters) stays in the outbox, and one that
    a retry would make anew is removed, so a retried request never runs twice."""
    try:
        dispatch(job.id, job.kind)
    except QueueUnavailable:
        if not keep:
            session.execute(delete(Job).where(Job.id == job.id))
            session.commit()
        raise
