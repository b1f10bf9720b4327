"""Typed request bodies of the replay routes: POST /simulations, /advice and /workloads.

Every field is validated by the one check the job code applies to it — the simulator's
config checks (`core.simulator.config.check_field`, `gpu_from`, `ModelConfig.from_dict`),
the policy registry's parameters (`check_value` on each `ParamInfo`) and the request
fields (`backend.jobs.request_fields`) — and shown in OpenAPI with a type derived from the
same declaration: bounds as minimum / exclusiveMinimum / maximum, choices as an enum,
the default and the help line. A check names what it checks relative to its field and
`backend.api.errors.locate` joins the two, so a 422 reads "policy.params.over_provision:
must be >= 1, got 0.5". Rules across fields (one workload source, layouts fitting the
GPU budget and holding the model, ...) stay with the job code, which runs next and builds
the one typed request (`backend.jobs.simulations.simulation_request`).

The policy models (`schemas_policy`) are made from the registry when an app is made
(`replay_models()`): a policy registered before that is in the app's schema. The
building blocks (a model naming the first unknown field, a checked field shown as a
derived type) are in `schema_types`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field

from backend.api.schema_types import (
    StrictModel,
    checked,
    config_field,
    make_model,
    no_default,
    one_of,
    shown_type,
    some_of,
)
from backend.api.schemas import NO_NUL, BodyId
from backend.api.schemas_policy import policy_field, policy_model
from backend.jobs import request_fields as rf
from backend.jobs.advice import ADVICE_DEFAULTS, ADVICE_FIELDS, DEFAULT_BALANCING, DEFAULT_CONCURRENCY, advice_gpu
from backend.jobs.simulations import (
    SIMULATION_FIELDS,
    WORKLOAD_FIELDS,
    check_formats,
    check_simulation_source,
    check_workload_source,
)
from core.simulator.config import (
    BALANCING_MODES,
    GPU_PRESETS,
    MODEL_PRESETS,
    ClusterConfig,
    EngineLimits,
    GpuSpec,
    ModelConfig,
    check_field,
    field_rules,
)
from core.simulator.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_N_GPUS, DEFAULT_POLICY, LAYOUT_FIELDS
from core.simulator.policies import POLICIES, PolicySpec

# --------------------------------------------------------------------------- cluster, model, limits


@functools.cache
def _gpu_field() -> tuple:
    def check(value: Any) -> Any:
        if value is None:  # the job code says whether it may be left to the default
            return None
        advice_gpu(value)  # preset names matched case-insensitively, overrides checked
        return rf.resolve_names(value, GPU_PRESETS)

    overrides = make_model(
        "GpuOverrides",
        StrictModel,
        "A GPU: a preset plus overrides, or all of peak_flops, mem_bandwidth and memory_bytes.",
        {
            "preset": (one_of(GPU_PRESETS) | None, Field(None, description="GPU preset")),
            **{r.name: (shown_type(r) | None, None) for r in field_rules(GpuSpec)},
        },
    )
    shown = one_of(GPU_PRESETS) | overrides
    return checked(check, shown), Field(DEFAULT_GPU, description="A GPU preset (any case) or an object")


@functools.cache
def _model_field() -> tuple:
    def check(value: Any) -> Any:
        if value is None:
            return None
        named = rf.resolve_names(value, MODEL_PRESETS)
        ModelConfig.from_dict(named)
        return named

    overrides = make_model(
        "ModelOverrides",
        StrictModel,
        ModelConfig.__doc__,
        {
            "preset": (one_of(MODEL_PRESETS) | None, Field(None, description="Model preset")),
            **{r.name: (shown_type(r) | None, None) for r in field_rules(ModelConfig)},
        },
    )
    shown = one_of(MODEL_PRESETS) | overrides | None
    return checked(check, shown), Field(DEFAULT_MODEL, description="A model preset (any case) or an object")


@functools.cache
def cluster_model() -> type[BaseModel]:
    """The GPUs and their layout; layout fields left out are derived per policy."""
    base = ClusterConfig()
    fields: dict[str, Any] = {"gpu": _gpu_field()}
    for r in field_rules(ClusterConfig):
        if r.name == "n_gpus":  # the config's rule, and the budget a request may ask for
            shown = shown_type(r, {"ge": r.ge, "le": rf.MAX_GPUS})
            fields[r.name] = (
                checked(_check_budget, shown),
                Field(DEFAULT_N_GPUS, description="The GPU budget of every policy"),
            )
        elif r.name in LAYOUT_FIELDS:
            fields[r.name] = config_field(
                ClusterConfig, r, None, "Derived per policy from n_gpus when left out (GET /simulations/presets)"
            )
        else:
            fields[r.name] = config_field(ClusterConfig, r, getattr(base, r.name))
    return make_model("Cluster", StrictModel, ClusterConfig.__doc__, fields)


def _check_budget(value: Any) -> Any:
    return rf.check_budget(check_field(ClusterConfig, "n_gpus", value, "n_gpus"), "n_gpus")


@functools.cache
def limits_model() -> type[BaseModel]:
    fields = {r.name: config_field(EngineLimits, r) for r in field_rules(EngineLimits)}
    return make_model("Limits", StrictModel, EngineLimits.__doc__, fields)


# --------------------------------------------------------------------------- request fields


def count_field(count: rf.Count, name: str, default: Any = None, description: str | None = None) -> tuple:
    """An integer field of a request in count.lo..count.hi (`default` None and not
    nullable: left out, the job code decides)."""
    shown: Any = Annotated[int, Field(ge=count.lo, le=count.hi)]
    extra = no_default if default is None and not count.nullable else None
    return (
        checked(functools.partial(_check_count, count, name), shown | None if count.nullable else shown),
        Field(default, description=description, json_schema_extra=extra),
    )


def _check_count(count: rf.Count, name: str, value: Any) -> Any:
    return None if value is None and count.nullable else count.check(value, name)


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _doc_model(name: str, doc: str, **fields: Any) -> type[BaseModel]:
    """A documented shape (validated by the field's check, shown in OpenAPI)."""
    return make_model(name, StrictModel, doc, fields)


Step = Annotated[int, Field(ge=rf.STEP.lo, le=rf.STEP.hi)]
StepRange = Annotated[list[Step], Field(min_length=2, max_length=2)]


@functools.cache
def _replay_options() -> dict[str, tuple]:
    """calibrate, steps, uncertainty, rolling_origin, forecast: each true/false or an
    object; sensitivity: true/false."""
    runs, seed = rf.UNCERTAINTY_RUNS, rf.SEED
    window_default, window = rf.ROLLING_WINDOW
    workloads_default, workloads = rf.FORECAST_WORKLOADS
    calibrate = _doc_model("CalibrateOn", "Fit the engine on these steps ([]: the first).", fit_steps=(list[Step], []))
    mc = _doc_model(
        "MonteCarlo",
        "Monte-Carlo replay of the calibrated residual noise.",
        runs=(
            Annotated[int, Field(ge=runs.lo, le=runs.hi)] | None,
            Field(None, description="null: by a convergence check"),
        ),
        seed=(Annotated[int, Field(ge=seed.lo, le=seed.hi)], 0),
    )
    rolling = _doc_model(
        "RollingOrigin",
        "Accuracy by rolling origin: each measured step predicted from a calibration on the steps before it.",
        window=(
            Annotated[int, Field(ge=window.lo, le=window.hi)] | None,
            Field(window_default, description="null: all earlier steps"),
        ),
    )
    forecast = _doc_model(
        "Forecast",
        "Forecast each step after the calibration steps from earlier workloads only.",
        workloads=(Annotated[int, Field(ge=workloads.lo, le=workloads.hi)], workloads_default),
    )
    return {
        "calibrate": (
            checked(rf.calibrate_option, bool | calibrate | None),
            Field(None, description='null: when the trace has measured timings; false; or {"fit_steps": [0]}'),
        ),
        "steps": (
            checked(rf.step_range, StepRange | None),
            Field(None, description="[first, end) step range; all steps when omitted"),
        ),
        "uncertainty": (
            checked(rf.uncertainty_option, bool | mc | None),
            Field(None, description="Monte-Carlo replay of the calibrated residual noise (default), or false"),
        ),
        "rolling_origin": (
            checked(rf.rolling_origin_option, bool | rolling | None),
            Field(None, description="Also evaluate accuracy by rolling origin"),
        ),
        "forecast": (
            checked(rf.forecast_option, bool | forecast | None),
            Field(None, description="Also forecast later steps"),
        ),
        "sensitivity": (
            checked(rf.sensitivity_option, bool | None),
            Field(
                False,
                description="Also replay A and B over the uncalibrated parameters' ranges: the speedup's "
                "[min, max] band (compare.total.speedup_band; 2 replays of each per parameter)",
            ),
        ),
    }


@functools.cache
def _workload_source_field() -> tuple:
    counts = {k: (Annotated[int, Field(ge=c.lo, le=c.hi)], default) for k, (default, c) in rf.SOURCE_COUNTS.items()}
    source = _doc_model(
        "SyntheticWorkload",
        "A synthetic workload drawn from a PolyTrace parameter file (enhanced_task_distribution_parameters).",
        parameters=(dict[str, Any], Field(description="The parameter file's JSON")),
        task=(str | None, Field(None, description="A task of the file (default: its first)")),
        **counts,
    )
    return checked(_optional(rf.workload_source), source | None), Field(
        None, description="A synthetic source instead of a trace"
    )


# --------------------------------------------------------------------------- the bodies


class SimulationBody(StrictModel):
    """A replay of a trace (or a synthetic workload) on a described cluster under policy A,
    and policy B beside it when given."""

    @classmethod
    def check_whole(cls, data: dict) -> None:
        check_simulation_source(data)


class WorkloadBody(StrictModel):
    """Fit a trace's lengths and/or generate a PolyTrace-style synthetic workload."""

    @classmethod
    def check_whole(cls, data: dict) -> None:
        check_workload_source(data)


class AdviceBody(StrictModel):
    """The configuration advisor's sweep on a trace's workload and a GPU budget."""


def _simulation_model(policies: dict[str, type[BaseModel]]) -> type[BaseModel]:
    policy = policy_field(policies)
    fields = {
        "trace_id": (BodyId | None, Field(None, description="The team's trace to replay (or give `workload`)")),
        "workload": _workload_source_field(),
        "cluster": (cluster_model() | None, Field(None, description="The GPUs, shared by policy A and B")),
        "model": _model_field(),
        "limits": (limits_model() | None, Field(None, description="Continuous-batching limits of a rollout replica")),
        "policy": (policy, Field(None, description=f"Policy A (default {DEFAULT_POLICY})")),
        "compare_policy": (policy, Field(None, description="Policy B, replayed on the same workload and GPUs")),
        **_replay_options(),
    }
    return make_model(
        "SimulationRequest", SimulationBody, SimulationBody.__doc__, {k: fields[k] for k in SIMULATION_FIELDS}
    )


def _advice_model(kinds: tuple[str, ...]) -> type[BaseModel]:
    counts = rf.ADVICE_COUNTS

    def policies(value: Any) -> Any:
        return rf.choices_list(value, list(POLICIES), "policies", list(POLICIES))

    fields = {
        "trace_id": (BodyId, Field(description="The team's trace to advise on")),
        "gpu": _gpu_field(),
        "n_gpus": count_field(
            counts["n_gpus"], "n_gpus", ADVICE_DEFAULTS["n_gpus"], "The GPU budget every configuration uses"
        ),
        "model": _model_field(),
        "policies": (
            checked(policies, some_of(one_of(kinds)) | None),
            Field(None, description="Policy kinds to sweep (default: every registered one)"),
        ),
        "balancing": (
            checked(
                lambda v: rf.choices_list(v, BALANCING_MODES, "balancing", DEFAULT_BALANCING),
                some_of(one_of(BALANCING_MODES)) | None,
            ),
            Field(DEFAULT_BALANCING, description="DP balancing modes to sweep"),
        ),
        "concurrency": (
            checked(
                rf.concurrency_list,
                Annotated[
                    list[Annotated[int, Field(ge=rf.CONCURRENCY.lo, le=rf.CONCURRENCY.hi)] | None], Field(min_length=1)
                ],
            ),
            Field(DEFAULT_CONCURRENCY, description="Running-sequence limits per replica to sweep (null: calibrated)"),
        ),
        "calibrate": _replay_options()["calibrate"],
        "steps": _replay_options()["steps"],
        "runs": count_field(counts["runs"], "runs", ADVICE_DEFAULTS["runs"], "Monte-Carlo runs per layout and step"),
        "policy_runs": count_field(
            counts["policy_runs"],
            "policy_runs",
            ADVICE_DEFAULTS["policy_runs"],
            "Monte-Carlo replays of each configuration whose step is not one batch rollout on its critical path",
        ),
        "seed": count_field(counts["seed"], "seed", ADVICE_DEFAULTS["seed"], "Monte-Carlo seed"),
    }
    return make_model("AdviceRequest", AdviceBody, AdviceBody.__doc__, {k: fields[k] for k in ADVICE_FIELDS})


@functools.cache
def workload_model() -> type[BaseModel]:
    counts, texts = rf.WORKLOAD_COUNTS, rf.WORKLOAD_TEXTS

    def text_field(name: str, description: str) -> tuple:
        shown = Annotated[str, Field(max_length=texts[name].most, pattern=NO_NUL)] | None
        return checked(functools.partial(_check_text, texts[name], name), shown), Field(None, description=description)

    def parameters(value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"parameters: expected an object (the parameter file's JSON), got {type(value).__name__}")
        return value

    formats = some_of(one_of(rf.WORKLOAD_FORMATS)) | None
    fields = {
        "trace_id": (BodyId | None, Field(None, description="The team's trace to fit (or give `parameters`)")),
        "parameters": (
            checked(parameters, dict[str, Any] | None),
            Field(None, description="PolyTrace's fitted-parameter file JSON (enhanced_task_distribution_parameters)"),
        ),
        "task": text_field("task", "Task to generate: a fitted task name, or math | tool_calling"),
        "steps": count_field(
            counts["steps"],
            "steps",
            None,
            "Steps to generate (0 with a trace: fit report only; default 0 with a trace, else 1)",
        ),
        "groups": count_field(
            counts["groups"], "groups", None, "Prompt groups per step (a trace: as fitted when omitted)"
        ),
        "samples_per_group": count_field(
            counts["samples_per_group"],
            "samples_per_group",
            None,
            "Samples per group (a trace: as fitted when omitted)",
        ),
        "seed": count_field(counts["seed"], "seed", rf.WORKLOAD_DEFAULTS["seed"], "Random seed"),
        "formats": (checked(_optional(check_formats), formats), Field(None, description="Files to write")),
        "ingest": (
            checked(functools.partial(_check_bool, "ingest"), bool),
            Field(True, description="Ingest the generated workload as a new trace"),
        ),
        "name": text_field("name", "Name of the new trace"),
        "dp_size": count_field(
            counts["dp_size"], "dp_size", rf.WORKLOAD_DEFAULTS["dp_size"], "DP ranks the packed rows are dealt to"
        ),
    }
    return make_model("WorkloadRequest", WorkloadBody, WorkloadBody.__doc__, {k: fields[k] for k in WORKLOAD_FIELDS})


def _check_text(text: rf.Text, name: str, value: Any) -> Any:
    return text.check(value, name)


def _check_bool(name: str, value: Any) -> Any:
    return rf.check_bool(value, name)


@dataclass(frozen=True)
class ReplayModels:
    """The request bodies of POST /simulations, /advice and /workloads."""

    simulation: type[BaseModel]
    advice: type[BaseModel]
    workload: type[BaseModel]


def replay_models() -> ReplayModels:
    """The request models for the policy registry as it is now (made once per registry)."""
    return _models_of(tuple(POLICIES.items()))


@functools.lru_cache(maxsize=8)
def _models_of(registry: tuple[tuple[str, PolicySpec], ...]) -> ReplayModels:
    policies = {kind: policy_model(spec) for kind, spec in registry}
    return ReplayModels(_simulation_model(policies), _advice_model(tuple(policies)), workload_model())
