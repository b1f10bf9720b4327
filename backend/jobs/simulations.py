"""Simulation and workload requests: validate a request body into job parameters, then
create and queue the job. Shared by the REST API and the CLI.

Validation is pure (no database): every `ValueError` starts with the offending field,
``"cluster.rollout_tp: must be an integer >= 1, got 0"``, which the API turns into a
422 naming that field (`error_field`).

Simulation job parameters (`simulation_params`), stored fully resolved so a job is
self-describing and identical requests share a `params_key`:
  trace_id          the team's trace to replay, or
  workload          a synthetic source instead: {"parameters": <PolyTrace parameter
                    file JSON>, "task", "steps", "groups", "samples_per_group", "seed"}
  cluster, model, limits, policy   full config dicts (presets resolved; names are
                    matched case-insensitively, so "qwen2.5-7b" is "Qwen2.5-7B");
                    layout fields left out (rollout_replicas, rollout_tp, train_dp)
                    are derived per policy from the budget (core/simulator/defaults.py)
  compare_cluster   policy B's cluster: the same n_gpus, its own derived layout
  compare_policy    policy B (full dict) or None
  calibrate         None (auto: calibrate when the trace has measured latencies),
                    False (never) or {"fit_steps": [..]} (an empty list: the first step)
  steps             [lo, hi) step range or None (all steps)
  uncertainty       {"runs": N or None (chosen by a convergence check), "seed"}: the
                    Monte-Carlo replay of the residual noise fitted with the
                    calibration (default); False: deterministic only
  forecast          None, or {"workloads": J}: also forecast every step after the
                    calibration steps from the earlier steps' workloads only (drawn
                    with drift; `core.simulator.forecast`), against the measured step
  rolling_origin    None, or {"window": W or None (all earlier steps)}: also evaluate
                    accuracy by rolling origin (calibrate on the steps before each
                    measured step, predict it; `core.simulator.evaluation`)

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
import math
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from backend.jobs.contracts import SIMULATION_KIND, WORKLOAD_KIND
from backend.jobs.dispatch import QueueUnavailable, dispatch
from backend.jobs.state import create_job, find_reusable
from backend.store.ids import INT4_MAX, check_id
from backend.store.models import Job
from core.simulator.config import (
    BALANCING_MODES,
    DISPATCH_MODES,
    GPU_PRESETS,
    MODEL_PRESETS,
    ClusterConfig,
    EngineLimits,
    ModelConfig,
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
    layout_for,
)
from core.simulator.policies import POLICIES, make_policy, policy_spec

WORKLOAD_FORMATS = ("packed", "compact", "multiturn")
# Generated workloads larger than this are refused (the files and the ingest would be huge).
MAX_GENERATED_SAMPLES = 20_000_000

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
SOURCE_FIELDS = ("parameters", "task", "steps", "groups", "samples_per_group", "seed")


def error_field(exc: ValueError) -> str | None:
    """The field a validation message starts with (``"cluster.n_gpus: ..."``)."""
    head = str(exc).split(":", 1)[0]
    return head if head and " " not in head else None


# --------------------------------------------------------------------------- presets


def _canonical(name: Any, presets: dict) -> Any:
    if not isinstance(name, str):
        return name
    lowered = {k.lower(): k for k in presets}
    return lowered.get(name.strip().lower(), name)


def _resolve_names(section: Any, presets: dict, key: str) -> Any:
    """A preset name (or a dict's `key` entry) matched case-insensitively."""
    if isinstance(section, str):
        return _canonical(section, presets)
    if isinstance(section, dict) and key in section:
        return {**section, key: _canonical(section[key], presets)}
    return section


def presets() -> dict:
    """What a form needs: GPU and model presets, policy choices and every default."""
    default_cluster, default_policy = ClusterConfig(), Policy()
    return {
        "gpus": {name: dataclasses.asdict(g) for name, g in GPU_PRESETS.items()},
        "models": {name: to_dict(m) for name, m in MODEL_PRESETS.items()},
        "policies": list(POLICIES),
        "disaggregated_policies": [k for k, spec in POLICIES.items() if spec.disaggregated],
        "policy_help": {k: spec.help for k, spec in POLICIES.items()},
        "policy_params": {k: [i.to_dict() for i in spec.param_infos] for k, spec in POLICIES.items()},
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


def _int(value: Any, where: str, lo: int = 0, hi: int = INT4_MAX) -> int:
    """An integer (an integral float too) in lo..hi (steps, counts and seeds are int32)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: must be an integer, got {value!r:.80}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ValueError(f"{where}: must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{where}: must be an integer in {lo}..{hi}, got {value!r}")
    return int(value)


def _policy(d: Any, where: str) -> Policy:
    try:
        return make_policy(d)
    except ValueError as exc:  # the messages say "policy..."; name the field asked about
        msg = str(exc)
        raise ValueError(where + msg[len("policy") :] if msg.startswith("policy") else f"{where}: {msg}") from None


def _layout(c: ClusterConfig, given: dict, model: ModelConfig, kind: str) -> ClusterConfig:
    """`c` with the layout fields the request left out derived for policy `kind` from
    the GPU budget (`core.simulator.defaults.layout_for`)."""
    explicit = {k: given[k] for k in LAYOUT_FIELDS if given.get(k) is not None}
    derived = layout_for(policy_spec(kind).disaggregated, c.n_gpus, model, c.gpu, train_tp=c.train_tp, **explicit)
    return dataclasses.replace(c, **derived)


def resolve_config(body: dict) -> tuple[ClusterConfig, ModelConfig, EngineLimits, Policy, Policy | None]:
    """The configs of a simulation body (presets by name, case-insensitive); the
    cluster of policy A (`resolve_clusters` gives B's too)."""
    c, m, lim, p, b, _ = resolve_clusters(body)
    return c, m, lim, p, b


def resolve_clusters(body: dict):
    """(cluster A, model, limits, policy A, policy B, cluster B): one GPU budget,
    layouts the request leaves out derived per policy (see core/simulator/defaults.py)."""
    cluster = body.get("cluster") or {}
    if isinstance(cluster, dict) and "gpu" in cluster:
        cluster = {**cluster, "gpu": _resolve_names(cluster["gpu"], GPU_PRESETS, "preset")}
    if isinstance(cluster, dict):
        cluster = {"gpu": DEFAULT_GPU, "n_gpus": DEFAULT_N_GPUS, **cluster}
    model = _resolve_names(body.get("model") or DEFAULT_MODEL, MODEL_PRESETS, "preset")
    policy = body.get("policy") or DEFAULT_POLICY
    c, m, lim, _ = config_from_dict({"cluster": cluster, "model": model, "limits": body.get("limits") or {}})
    p = _policy(policy, "policy")
    c_a = _layout(c, cluster, m, p.kind)
    c_a.check_fits(policy_spec(p.kind).disaggregated)
    b = c_b = None
    if body.get("compare_policy") is not None:
        b = _policy(body["compare_policy"], "compare_policy")
        c_b = _layout(c, cluster, m, b.kind)
        try:
            c_b.check_fits(policy_spec(b.kind).disaggregated)
        except ValueError as exc:
            raise ValueError(f"{exc} (for compare_policy {b.kind})") from None
    return c_a, m, lim, p, b, c_b


def _calibrate(value: Any) -> dict | bool | None:
    if value is None or value is False:
        return value
    if value is True:
        return {"fit_steps": []}
    if not isinstance(value, dict):
        raise ValueError(f'calibrate: expected true, false or {{"fit_steps": [...]}}, got {value!r}')
    unknown = set(value) - {"fit_steps"}
    if unknown:
        raise ValueError(f"calibrate.{sorted(unknown)[0]}: unknown field (known: fit_steps)")
    steps = value.get("fit_steps") or []
    if not isinstance(steps, list):
        raise ValueError(f"calibrate.fit_steps: expected a list of steps, got {steps!r}")
    return {"fit_steps": [_int(s, f"calibrate.fit_steps[{i}]") for i, s in enumerate(steps)]}


def _uncertainty(value: Any) -> dict | bool:
    if value is False:
        return False
    if value is None or value is True:
        return {"runs": None, "seed": 0}
    if not isinstance(value, dict):
        raise ValueError(f'uncertainty: expected false or {{"runs": N, "seed": S}}, got {value!r}')
    unknown = set(value) - {"runs", "seed"}
    if unknown:
        raise ValueError(f"uncertainty.{sorted(unknown)[0]}: unknown field (known: runs, seed)")
    runs = value.get("runs")
    if runs is not None:
        runs = _int(runs, "uncertainty.runs", 10)
        if runs > 20_000:
            raise ValueError(f"uncertainty.runs: must be <= 20000, got {runs}")
    return {"runs": runs, "seed": _int(value.get("seed", 0), "uncertainty.seed")}


def _rolling_origin(value: Any) -> dict | None:
    from core.simulator.evaluation import DEFAULT_WINDOW

    if value is None or value is False:
        return None
    if value is True:
        return {"window": DEFAULT_WINDOW}
    if not isinstance(value, dict):
        raise ValueError(f'rolling_origin: expected true or {{"window": W}}, got {value!r}')
    unknown = set(value) - {"window"}
    if unknown:
        raise ValueError(f"rolling_origin.{sorted(unknown)[0]}: unknown field (known: window)")
    w = value.get("window", DEFAULT_WINDOW)
    return {"window": None if w is None else _int(w, "rolling_origin.window", 1)}


def _forecast(value: Any) -> dict | None:
    from core.simulator.forecast import DEFAULT_WORKLOADS

    if value is None or value is False:
        return None
    if value is True:
        return {"workloads": DEFAULT_WORKLOADS}
    if not isinstance(value, dict):
        raise ValueError(f'forecast: expected true or {{"workloads": J}}, got {value!r}')
    unknown = set(value) - {"workloads"}
    if unknown:
        raise ValueError(f"forecast.{sorted(unknown)[0]}: unknown field (known: workloads)")
    j = _int(value.get("workloads", DEFAULT_WORKLOADS), "forecast.workloads", 1)
    if j > 64:
        raise ValueError(f"forecast.workloads: must be <= 64, got {j}")
    return {"workloads": j}


def _step_range(value: Any) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"steps: expected [first, end) as two integers, got {value!r}")
    lo, hi = _int(value[0], "steps[0]"), _int(value[1], "steps[1]")
    if hi <= lo:
        raise ValueError(f"steps: the end ({hi}) must be greater than the first step ({lo})")
    return [lo, hi]


def _check_fields(body, known) -> None:
    """A JSON object with only `known` fields (ValueError names the first other one)."""
    if not isinstance(body, dict):
        raise ValueError("body: expected a JSON object")
    unknown = [k for k in body if k not in known]
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown field (known: {', '.join(known)})")


def simulation_params(body: dict) -> dict:
    """Validated, fully resolved parameters of a simulation job (ValueError names the field)."""
    _check_fields(body, SIMULATION_FIELDS)
    has_trace, has_workload = body.get("trace_id") is not None, body.get("workload") is not None
    if has_trace == has_workload:
        raise ValueError("trace_id: give either trace_id (replay a trace) or workload (a synthetic source)")
    c, m, lim, p, b, c_b = resolve_clusters(body)
    params: dict[str, Any] = {
        "cluster": to_dict(c),
        "compare_cluster": to_dict(c_b) if c_b is not None else None,
        "model": to_dict(m),
        "limits": to_dict(lim),
        "policy": to_dict(p),
        "compare_policy": to_dict(b) if b is not None else None,
        "calibrate": _calibrate(body.get("calibrate")),
        "steps": _step_range(body.get("steps")),
        "uncertainty": _uncertainty(body.get("uncertainty")),
        "rolling_origin": _rolling_origin(body.get("rolling_origin")),
        "forecast": _forecast(body.get("forecast")),
    }
    if has_trace:
        params["trace_id"] = check_id(body["trace_id"], "trace_id")
    else:
        params["workload"] = _workload_source(body["workload"])
        if params["calibrate"]:
            raise ValueError("calibrate: a synthetic workload has no measured timings to calibrate on")
        if params["rolling_origin"]:
            raise ValueError("rolling_origin: a synthetic workload has no measured timings to evaluate on")
    return params


def _workload_source(d: Any) -> dict:
    from core.workload.params_file import load_parameters

    if not isinstance(d, dict):
        raise ValueError("workload: expected an object with parameters, task, steps, groups, samples_per_group")
    unknown = [k for k in d if k not in SOURCE_FIELDS]
    if unknown:
        raise ValueError(f"workload.{unknown[0]}: unknown field (known: {', '.join(SOURCE_FIELDS)})")
    if "parameters" not in d:
        raise ValueError("workload.parameters: required (the PolyTrace parameter file's JSON)")
    try:
        parsed = load_parameters(d["parameters"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"workload.parameters: {exc}") from None
    task = d.get("task") or (parsed.tasks[0] if parsed.tasks else None)
    if task not in parsed.tasks:
        raise ValueError(
            f"workload.task: must be one of {', '.join(parsed.tasks) or '(none in the file)'}, got {task!r}"
        )
    out = {
        "parameters": d["parameters"],
        "task": task,
        "steps": _int(d.get("steps", 1), "workload.steps", 1),
        "groups": _int(d.get("groups", 64), "workload.groups", 1),
        "samples_per_group": _int(d.get("samples_per_group", 8), "workload.samples_per_group", 1),
        "seed": _int(d.get("seed", 0), "workload.seed"),
    }
    if out["steps"] * out["groups"] * out["samples_per_group"] > MAX_GENERATED_SAMPLES:
        raise ValueError(f"workload.steps: steps × groups × samples_per_group must be <= {MAX_GENERATED_SAMPLES:,}")
    return out


def configs_of(params: dict) -> tuple[ClusterConfig, ModelConfig, EngineLimits, Policy, Policy | None]:
    """The config objects of stored (resolved) simulation parameters (cluster of A)."""
    c, m, lim, p = config_from_dict({k: params[k] for k in ("cluster", "model", "limits", "policy")})
    b = make_policy(params["compare_policy"]) if params.get("compare_policy") else None
    return c, m, lim, make_policy(p), b


def compare_cluster_of(params: dict) -> ClusterConfig | None:
    """Policy B's cluster: the same budget, its own derived layout (older jobs: A's)."""
    if not params.get("compare_policy"):
        return None
    return ClusterConfig.from_dict(params.get("compare_cluster") or params["cluster"])


# --------------------------------------------------------------------------- workloads


def workload_params(body: dict, *, multiturn_trace: bool = False) -> dict:
    """Validated parameters of a workload job (ValueError names the field).
    `multiturn_trace`: the trace to fit has turns (so "multiturn" output is possible)."""
    from core.workload.params_file import load_parameters

    _check_fields(body, WORKLOAD_FIELDS)
    has_trace, has_params = body.get("trace_id") is not None, body.get("parameters") is not None
    if has_trace == has_params:
        raise ValueError("trace_id: give either trace_id (fit a trace) or parameters (a PolyTrace parameter file)")
    out: dict[str, Any] = {
        "steps": _int(body.get("steps", 0 if has_trace else 1), "steps", 0 if has_trace else 1),
        "groups": None if body.get("groups") is None else _int(body["groups"], "groups", 1),
        "samples_per_group": None
        if body.get("samples_per_group") is None
        else _int(body["samples_per_group"], "samples_per_group", 1),
        "seed": _int(body.get("seed", 0), "seed"),
        "ingest": body.get("ingest", True),
        "name": body.get("name"),
        "dp_size": _int(body.get("dp_size", 1), "dp_size", 1),
        "task": body.get("task"),
    }
    if not isinstance(out["ingest"], bool):
        raise ValueError(f"ingest: must be true or false, got {out['ingest']!r}")
    for key, most in (("name", 300), ("task", 200)):  # the trace name / task label columns
        value = out[key]
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"{key}: must be a string, got {value!r}")
        if len(value) > most or "\0" in value:
            raise ValueError(f"{key}: must be at most {most} characters without NUL, got {len(value)} characters")
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
    formats = body.get("formats")
    if formats is None:
        formats = ["multiturn", "compact"] if multiturn else ["packed", "compact"]
    if not isinstance(formats, list) or not formats:
        raise ValueError(f"formats: expected a non-empty list of {', '.join(WORKLOAD_FORMATS)}")
    for i, f in enumerate(formats):
        if f not in WORKLOAD_FORMATS:
            raise ValueError(f"formats[{i}]: must be one of {', '.join(WORKLOAD_FORMATS)}, got {f!r}")
    if "multiturn" in formats and not multiturn:
        raise ValueError("formats: 'multiturn' needs a multi-turn workload (a trace with turns, or task tool_calling)")
    out["formats"] = list(dict.fromkeys(formats))
    if out["steps"] == 0 and out["ingest"] and not has_trace:
        raise ValueError("steps: must be >= 1 to generate")
    return out


# --------------------------------------------------------------------------- queueing


def queue_simulation(session: Session, team_id: int, params: dict) -> tuple[Job, bool]:
    """(job, created): an identical queued/running/finished replay of the trace is reused
    (the simulator is deterministic)."""
    trace_id = params.get("trace_id")
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
