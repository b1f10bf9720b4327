"""What a policy declares to the registry: how it runs, and its parameters.

A policy's parameters are one frozen dataclass whose fields are made with `param(...)`
(type from the annotation; default, one-line help, bounds, choices and the values the
advisor sweeps in the field's metadata). That one declaration drives validation
(`PolicySpec.resolve`), the REST schema, the presets endpoint the dashboard's forms are
built from, the CLI's ``--policy-param KEY=VALUE`` and the advisor's grid.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Bounds of every parameter number: counts are int32, quantities stay far from overflow.
PARAM_INT_MAX = 2**31 - 1
PARAM_FLOAT_MAX = 1e30


def param(
    default: Any,
    help: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    choices: tuple[str, ...] | None = None,
    grid: tuple = (),
) -> Any:
    """A declared policy parameter (a dataclass field with its description).

    `ge`/`gt`/`le` bound numbers, `choices` bounds strings; `grid` lists the values the
    configuration advisor sweeps besides the default (empty: the default only)."""
    meta = {"help": help, "ge": ge, "gt": gt, "le": le, "choices": choices, "grid": tuple(grid)}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class NoParams:
    """A policy without parameters of its own."""


@dataclass(frozen=True)
class ParamInfo:
    """One declared parameter, described for forms, schemas and the CLI."""

    name: str
    type: str  # integer | number | boolean | string
    nullable: bool  # None is allowed (its meaning is in `help`)
    default: Any
    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple[str, ...] | None = None
    grid: tuple = ()

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["choices"] = list(self.choices) if self.choices is not None else None
        out["grid"] = list(self.grid)
        return out

    def allowed(self) -> str:
        """What the parameter takes, in words: "a number >= 1", "an integer >= 1, or null"."""
        if self.type == "boolean":
            text = "true or false"
        elif self.choices is not None:
            text = "one of " + ", ".join(self.choices)
        elif self.type == "string":
            text = "a string"
        else:
            bounds = [f"{op} {b:g}" for op, b in ((">=", self.ge), (">", self.gt), ("<=", self.le)) if b is not None]
            text = ("an integer" if self.type == "integer" else "a number") + "".join(
                f"{' and' if i else ''} {b}" for i, b in enumerate(bounds)
            )
        return text + (", or null" if self.nullable else "")

    def parse(self, text: str) -> Any:
        """A command-line text as a value of the declared type (``null`` where nullable),
        not yet range-checked (`check_value` does); ValueError says what it takes."""
        t = text.strip()
        if self.nullable and t.lower() == "null":
            return None
        if self.type == "boolean" and t.lower() in ("true", "false"):
            return t.lower() == "true"
        if self.type == "string":
            return text
        try:
            if self.type == "integer":
                return int(t)
            if self.type == "number":
                return float(t)
        except ValueError:
            pass
        raise ValueError(f"must be {self.allowed()}, got {text!r:.80}")


_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def describe(params_cls: type) -> tuple[ParamInfo, ...]:
    """The declared parameters of a params dataclass, in declaration order."""
    hints = typing.get_type_hints(params_cls)
    out = []
    for f in dataclasses.fields(params_cls):
        base, nullable = _unwrap_optional(hints[f.name])
        if base not in _JSON_TYPES:
            raise TypeError(f"{params_cls.__name__}.{f.name}: parameter type must be int, float, bool or str")
        m = f.metadata
        if "help" not in m:
            raise TypeError(f"{params_cls.__name__}.{f.name}: declare it with param(...)")
        out.append(
            ParamInfo(
                name=f.name,
                type=_JSON_TYPES[base],
                nullable=nullable,
                default=f.default,
                help=m["help"],
                ge=m["ge"],
                gt=m["gt"],
                le=m["le"],
                choices=m["choices"],
                grid=m["grid"],
            )
        )
    return tuple(out)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def check_value(info: ParamInfo, value: Any, where: str) -> Any:  # noqa: C901 -- one branch per declared parameter type and bound
    """`value` for parameter `info`, type- and range-checked (ValueError names `where`)."""
    if value is None:
        if info.nullable:
            return None
        raise ValueError(f"{where}: must not be null")
    if info.type == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: must be true or false, got {value!r}")
        return value
    if info.type == "string":
        if not isinstance(value, str):
            raise ValueError(f"{where}: must be a string, got {value!r:.80}")
        if info.choices is not None and value not in info.choices:
            raise ValueError(f"{where}: must be one of {', '.join(info.choices)}, got {value!r:.80}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: must be a number, got {value!r:.80}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: must be finite, got {value!r}")
    if info.type == "integer":
        if value != int(value):
            raise ValueError(f"{where}: must be an integer, got {value!r}")
        value = int(value)
        if abs(value) > PARAM_INT_MAX:
            raise ValueError(f"{where}: must be at most {PARAM_INT_MAX} in magnitude, got {value!r}")
    else:
        if abs(value) > PARAM_FLOAT_MAX:
            raise ValueError(f"{where}: must be at most {PARAM_FLOAT_MAX:g} in magnitude, got {value!r}")
        value = float(value)
    if info.ge is not None and value < info.ge:
        raise ValueError(f"{where}: must be >= {info.ge:g}, got {value!r}")
    if info.gt is not None and value <= info.gt:
        raise ValueError(f"{where}: must be > {info.gt:g}, got {value!r}")
    if info.le is not None and value > info.le:
        raise ValueError(f"{where}: must be <= {info.le:g}, got {value!r}")
    return value


@dataclass(frozen=True)
class PolicySpec:
    kind: str
    # rollout and training on separate GPU pools side by side (else time-shared)
    disaggregated: bool
    help: str
    # run(env, workload, progress) -> (step results, timeline builder, makespan);
    # `env.params` is the resolved instance of `params`
    run: Callable
    # the policy's own parameters: a frozen dataclass of `param(...)` fields
    params: type = NoParams
    # each step rolled out as one batch on fresh replicas (`base.rollout_batch`): the
    # steps' rollouts are independent of each other and can be computed ahead, and
    # replays that differ only after rollout share them; else the policy streams
    # (runs its own engines across steps)
    batch_rollouts: bool = False
    # the published design it models (docs/simulator.md has the details)
    paper: str = ""
    # params -> the kind this policy then replays identically to, or None
    same_as: Callable[[Any], str | None] | None = None
    # its own batch rollout of a step, (env, workload, keep_store) -> RolloutOutcome
    # (`base.rollout_batch` calls it; None: groups dispatched statically per
    # `Policy.dispatch`); replays share batch rollouts only with the same rollout
    rollout: Callable | None = None
    # the parameter holding the seed of the policy's random draws, or None when the
    # replay is deterministic (a Monte-Carlo replay varies that parameter)
    seed_param: str | None = None
    # unfinished samples may outlive a step (carried into a later one), so some may
    # still be unfinished, never trained, when the replay ends
    carries_over: bool = False
    # draws prompts past the trace's end (cycling through it) as stand-ins for the
    # dataset's further prompts, so a trace sample may be trained again as its stand-in
    stand_ins: bool = False
    # None: the real-engine replay acts this design out (engine/policies.py has its run);
    # else why it cannot, shown wherever a user asks for it on an engine
    not_on_engine: str | None = "not acted out on a real engine yet"

    @property
    def stochastic(self) -> bool:
        return self.seed_param is not None

    @property
    def param_infos(self) -> tuple[ParamInfo, ...]:
        return describe(self.params)

    def resolve(self, given: Mapping[str, Any] | None, where: str = "policy.params") -> Any:
        """The params instance for `given` (defaults for what it leaves out);
        ValueError naming the parameter otherwise."""
        given = dict(given or {})
        infos = {i.name: i for i in self.param_infos}
        unknown = [k for k in given if k not in infos]
        if unknown:
            known = ", ".join(infos) or "none"
            raise ValueError(f"{where}.{unknown[0]}: not a parameter of policy {self.kind} (known: {known})")
        values = {k: check_value(infos[k], v, f"{where}.{k}") for k, v in given.items()}
        return self.params(**values)

    def equivalent_to(self, params: Any) -> str | None:
        """The kind these parameters make this policy replay identically to, if any."""
        return self.same_as(params) if self.same_as is not None else None
