"""The replay request: what one replay job runs, typed and checked once.

Built once from checked parts (`build_request`: the REST body and the CLI flags both go
through `backend.jobs.simulations.simulation_request`), or decoded from a stored job
row (`ReplayRequest.from_json`); the replay (`core.simulator.replay.replay`) reads only
this. `to_json()` is what a job row stores, fully resolved so a job is self-describing
and identical requests share a `params_key`:

  cluster, model, limits, policy   full config dicts; policy A's layout derived from
                    the GPU budget where the request left it out
  compare_cluster   policy B's cluster: the same n_gpus, its own derived layout
  compare_policy    policy B (full dict) or None
  calibrate         None (when measured), False (never) or {"fit_steps": [..]}
  steps             [first, end) or None
  uncertainty       {"runs": N or None, "seed"} or False (deterministic only)
  rolling_origin    None or {"window": W or None}
  forecast          None or {"workloads": J}
  sensitivity       true when the speedup's band over the uncalibrated parameters is
                    asked for (left out when false, as rows written before it were)
  trace_id | workload   the trace, or a synthetic source {"parameters", "task",
                    "steps", "groups", "samples_per_group", "seed"}

Versions: the stored shape above is version 1 and carries no "version" key (so rows
written before this module decode, and identical requests keep matching the rows they
match); a later shape adds ``"version": 2`` and a branch in `from_json`. Version-1 rows
from before B had its own cluster (no "compare_cluster": B on A's) or before
uncertainty was optional (no "uncertainty": the Monte-Carlo on) decode as they ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.simulator.config import ClusterConfig, EngineLimits, ModelConfig, Policy, config_from_dict, to_dict
from core.simulator.defaults import LAYOUT_FIELDS, layout_for
from core.simulator.feasibility import InfeasibleLayout, layout_shortfall, min_training_gpus, rollout_shortfall
from core.simulator.policies import make_policy, policy_spec

REQUEST_VERSION = 1


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class CalibrateOn:
    """Calibrate the engine on these steps (empty: the first step)."""

    fit_steps: tuple[int, ...] = ()


@dataclass(frozen=True)
class MonteCarlo:
    """Monte-Carlo replay of the calibrated residual noise: `runs` None = by a convergence check."""

    runs: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class RollingOrigin:
    """Accuracy by rolling origin: calibrate on at most `window` earlier steps (None: all)."""

    window: int | None


@dataclass(frozen=True)
class ForecastOn:
    """Forecast each step after the calibration steps from `workloads` drawn workloads."""

    workloads: int


@dataclass(frozen=True)
class SyntheticSource:
    """A synthetic workload drawn from a PolyTrace parameter file (its JSON as given)."""

    parameters: Mapping[str, Any] = field(hash=False, compare=True)
    task: str = ""
    steps: int = 1
    groups: int = 64
    samples_per_group: int = 8
    seed: int = 0

    def to_json(self) -> dict:
        return {
            "parameters": self.parameters,
            "task": self.task,
            "steps": self.steps,
            "groups": self.groups,
            "samples_per_group": self.samples_per_group,
            "seed": self.seed,
        }


Calibrate = CalibrateOn | bool | None  # None: when measured; False: never


def calibrate_from_json(value: Any) -> Calibrate:
    if value is None or value is False:
        return value
    return CalibrateOn(tuple(int(s) for s in (value.get("fit_steps") or [])))


def calibrate_to_json(value: Calibrate) -> Any:
    return {"fit_steps": list(value.fit_steps)} if isinstance(value, CalibrateOn) else value


def uncertainty_from_json(value: Any) -> MonteCarlo | None:
    if value is False:
        return None
    value = value or {}
    return MonteCarlo(value.get("runs"), int(value.get("seed") or 0))


def rolling_origin_from_json(value: Any) -> RollingOrigin | None:
    return RollingOrigin(value.get("window")) if value else None


def forecast_from_json(value: Any) -> ForecastOn | None:
    return ForecastOn(int(value["workloads"])) if value else None


# --------------------------------------------------------------------------- the request


@dataclass(frozen=True)
class ReplayRequest:
    """One replay: the workload (a trace or a synthetic source), the GPUs with policy A's
    layout, policy A (its parameters resolved by the registry) and optionally policy B
    with its own layout on the same budget, and what to compute besides the replay."""

    cluster: ClusterConfig
    model: ModelConfig
    limits: EngineLimits
    policy: Policy
    compare_policy: Policy | None = None
    compare_cluster: ClusterConfig | None = None
    calibrate: Calibrate = None
    steps: tuple[int, int] | None = None
    uncertainty: MonteCarlo | None = MonteCarlo()
    rolling_origin: RollingOrigin | None = None
    forecast: ForecastOn | None = None
    trace_id: int | None = None
    workload: SyntheticSource | None = None
    # replay A and B again over the uncalibrated parameters' ranges (`sensitivity.py`)
    sensitivity: bool = False

    @property
    def seed(self) -> int:
        """The Monte-Carlo seed (0 when deterministic)."""
        return self.uncertainty.seed if self.uncertainty is not None else 0

    @property
    def mc_runs(self) -> int | None:
        return self.uncertainty.runs if self.uncertainty is not None else None

    def to_json(self) -> dict:
        """The job row's parameters (see the module doc; key order as stored before)."""
        out: dict[str, Any] = {
            "cluster": to_dict(self.cluster),
            "compare_cluster": to_dict(self.compare_cluster) if self.compare_cluster is not None else None,
            "model": to_dict(self.model),
            "limits": to_dict(self.limits),
            "policy": to_dict(self.policy),
            "compare_policy": to_dict(self.compare_policy) if self.compare_policy is not None else None,
            "calibrate": calibrate_to_json(self.calibrate),
            "steps": list(self.steps) if self.steps is not None else None,
            "uncertainty": dataclasses.asdict(self.uncertainty) if self.uncertainty is not None else False,
            "rolling_origin": dataclasses.asdict(self.rolling_origin) if self.rolling_origin is not None else None,
            "forecast": dataclasses.asdict(self.forecast) if self.forecast is not None else None,
        }
        if self.sensitivity:  # only when asked: identical older requests keep their key
            out["sensitivity"] = True
        if self.workload is not None:
            out["workload"] = self.workload.to_json()
        else:
            out["trace_id"] = self.trace_id
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReplayRequest:
        """A stored job row's parameters (any version this code wrote; see the module doc)."""
        version = d.get("version", 1)
        if version != REQUEST_VERSION:
            raise ValueError(f"version: replay request version {version!r} is not known (this code reads 1)")
        c, m, lim, p = config_from_dict({k: d[k] for k in ("cluster", "model", "limits", "policy")})
        b = make_policy(d["compare_policy"]) if d.get("compare_policy") else None
        c_b = ClusterConfig.from_dict(d.get("compare_cluster") or d["cluster"]) if b is not None else None
        source = d.get("workload")
        return cls(
            cluster=c,
            model=m,
            limits=lim,
            policy=make_policy(p),
            compare_policy=b,
            compare_cluster=c_b,
            calibrate=calibrate_from_json(d.get("calibrate")),
            steps=(int(d["steps"][0]), int(d["steps"][1])) if d.get("steps") else None,
            uncertainty=uncertainty_from_json(d.get("uncertainty", {})),
            rolling_origin=rolling_origin_from_json(d.get("rolling_origin")),
            forecast=forecast_from_json(d.get("forecast")),
            trace_id=d.get("trace_id"),
            workload=SyntheticSource(**source) if source is not None else None,
            sensitivity=bool(d.get("sensitivity", False)),
        )


# --------------------------------------------------------------------------- building


def layout_of(
    cluster: ClusterConfig, explicit: Mapping[str, int], model: ModelConfig, limits: EngineLimits, kind: str
) -> ClusterConfig:
    """`cluster` with the layout fields not in `explicit` derived for policy `kind` from the
    GPU budget, checked to fit the budget and to hold the model (`core.simulator.feasibility`).
    ValueError names the field: an explicit field that makes it impossible, else n_gpus."""
    disaggregated = policy_spec(kind).disaggregated
    explicit = {k: v for k, v in explicit.items() if k in LAYOUT_FIELDS and v is not None}
    derived = dataclasses.replace(
        cluster,
        **layout_for(disaggregated, cluster.n_gpus, model, cluster.gpu, train_tp=cluster.train_tp, **explicit),
    )
    if "rollout_tp" not in explicit:
        derived = _wider_rollout(derived, model, limits, disaggregated, explicit)
    derived.check_fits(disaggregated)
    if disaggregated and layout_shortfall(derived, model, limits) is not None:
        derived = _disaggregated_split(derived, model, limits, explicit) or derived
    _check_holds(derived, model, limits, explicit)
    return derived


def _wider_rollout(
    c: ClusterConfig, model: ModelConfig, limits: EngineLimits, disaggregated: bool, explicit: Mapping[str, int]
) -> ClusterConfig:
    """`c` with the rollout TP doubled until a replica holds the model (within the budget),
    the replicas re-derived when the request left them out."""
    tp = c.rollout_tp
    budget = c.n_gpus if not disaggregated else max(1, c.n_gpus - 1)
    while rollout_shortfall(model, c.gpu, tp, limits) is not None and tp * 2 <= budget:
        tp *= 2
    if tp == c.rollout_tp:
        return c
    layout = layout_for(disaggregated, c.n_gpus, model, c.gpu, train_tp=c.train_tp, **{**explicit, "rollout_tp": tp})
    return dataclasses.replace(c, **layout)


def _disaggregated_split(
    c: ClusterConfig, model: ModelConfig, limits: EngineLimits, explicit: Mapping[str, int]
) -> ClusterConfig | None:
    """Another split of a disaggregated budget that holds the model, when the request left
    both counts out: fewer rollout replicas (training gets the rest), at the derived TP
    first, then at smaller TPs unless the TP was given."""
    if "rollout_replicas" in explicit or "train_dp" in explicit:
        return None
    tps = [c.rollout_tp] if "rollout_tp" in explicit else [t for t in (c.rollout_tp, 8, 4, 2, 1) if t <= c.rollout_tp]
    for tp in dict.fromkeys(tps):
        for replicas in range(max(1, (c.n_gpus - 1) // tp), 0, -1):
            rest = c.n_gpus - replicas * tp
            split = dataclasses.replace(
                c, rollout_replicas=replicas, rollout_tp=tp, train_dp=max(1, rest // max(1, c.train_tp))
            )
            if rest >= c.train_tp and layout_shortfall(split, model, limits) is None:
                return split
    return None


def _check_holds(c: ClusterConfig, model: ModelConfig, limits: EngineLimits, explicit: Mapping[str, int]) -> None:
    short = layout_shortfall(c, model, limits)
    if short is None:
        return
    named = "rollout_tp" if short.stage == "rollout" else "train_dp"
    where = f"cluster.{named}" if named in explicit else "cluster.n_gpus"
    hint = ""
    if short.stage == "training":
        hint = f"; training needs at least {min_training_gpus(model, c.gpu)} GPUs of this kind"
        if where == "cluster.n_gpus":
            hint += f" (budget {c.n_gpus})"
    elif where == "cluster.n_gpus":
        hint = f"; no rollout TP up to the budget ({c.n_gpus} GPUs) holds it"
    raise InfeasibleLayout(f"{where}: {short.message(model, c.gpu)}{hint}")


def build_request(
    *,
    cluster: ClusterConfig,
    explicit_layout: Mapping[str, int],
    model: ModelConfig,
    limits: EngineLimits,
    policy: Policy | Mapping[str, Any] | str,
    compare_policy: Policy | Mapping[str, Any] | str | None = None,
    calibrate: Calibrate = None,
    steps: tuple[int, int] | None = None,
    uncertainty: MonteCarlo | None = MonteCarlo(),
    rolling_origin: RollingOrigin | None = None,
    forecast: ForecastOn | None = None,
    trace_id: int | None = None,
    workload: SyntheticSource | None = None,
    sensitivity: bool = False,
) -> ReplayRequest:
    """The request from checked parts (each field already in range): policies resolved by
    the registry, each policy's layout derived where `explicit_layout` leaves it out and
    checked (budget, memory), and the rules across fields. ValueError names the field."""
    if (trace_id is None) == (workload is None):
        raise ValueError("trace_id: give either trace_id (replay a trace) or workload (a synthetic source)")
    if workload is not None and calibrate:
        raise ValueError("calibrate: a synthetic workload has no measured timings to calibrate on")
    if workload is not None and rolling_origin is not None:
        raise ValueError("rolling_origin: a synthetic workload has no measured timings to evaluate on")
    p = _checked_policy(policy, "policy")
    c_a = layout_of(cluster, explicit_layout, model, limits, p.kind)
    b = c_b = None
    if compare_policy is not None:
        b = _checked_policy(compare_policy, "compare_policy")
        try:
            c_b = layout_of(cluster, explicit_layout, model, limits, b.kind)
        except ValueError as exc:
            raise type(exc)(f"{exc} (for compare_policy {b.kind})") from None
    return ReplayRequest(
        cluster=c_a,
        model=model,
        limits=limits,
        policy=p,
        compare_policy=b,
        compare_cluster=c_b,
        calibrate=calibrate,
        steps=steps,
        uncertainty=uncertainty,
        rolling_origin=rolling_origin,
        forecast=forecast,
        trace_id=trace_id,
        workload=workload,
        sensitivity=sensitivity,
    )


def _checked_policy(policy: Policy | Mapping[str, Any] | str, where: str) -> Policy:
    """`make_policy` (parameters resolved), its messages naming `where` instead of "policy"."""
    try:
        return make_policy(policy if isinstance(policy, (Policy, str)) else dict(policy))
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(where + msg[len("policy") :] if msg.startswith("policy") else f"{where}: {msg}") from None


__all__ = [
    "REQUEST_VERSION",
    "Calibrate",
    "CalibrateOn",
    "ForecastOn",
    "MonteCarlo",
    "ReplayRequest",
    "RollingOrigin",
    "SyntheticSource",
    "build_request",
    "layout_of",
]
