"""The policies of the replay bodies, made from the registry: per registered policy a
model of its kind, its own parameters (each checked by the registry's `check_value` and
shown with its bounds, default and help) and the fields every policy shares (checked by
the config's `check_field`); `policy_field` takes a kind or an object discriminated by
`kind` (sync when left out)."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError, WrapValidator

from backend.api.errors import error_message
from backend.api.schema_types import StrictModel, checked, config_field, make_model, one_of, shown_type
from core.simulator.config import Policy, field_rules
from core.simulator.defaults import DEFAULT_POLICY
from core.simulator.policies import PolicySpec, policy_spec
from core.simulator.policies.spec import PARAM_FLOAT_MAX, PARAM_INT_MAX, check_value


def _camel(kind: str) -> str:
    return "".join(p.capitalize() for p in re.split(r"[^0-9A-Za-z]+", kind) if p) or "Custom"


def _param_bounds(info: Any) -> dict:
    """A parameter's bounds, with the magnitude every number is held to (`check_value`)."""
    most = PARAM_INT_MAX if info.type == "integer" else PARAM_FLOAT_MAX
    out = {k: getattr(info, k) for k in ("ge", "gt", "le") if getattr(info, k) is not None}
    if info.type in ("integer", "number"):
        if "ge" not in out and "gt" not in out:
            out["ge"] = -most
        out.setdefault("le", most)
    return out


def params_model(spec: PolicySpec) -> type[BaseModel]:
    """The declared parameters of policy `spec`, each checked by `check_value`."""
    fields = {
        info.name: (
            checked(functools.partial(_check_param, info), shown_type(info, _param_bounds(info))),
            Field(info.default, description=info.help),
        )
        for info in spec.param_infos
    }
    doc = f"The parameters of policy {spec.kind} (defaults for what is left out)."
    model = make_model(f"{_camel(spec.kind)}Params", StrictModel, doc, fields)
    model.unknown_hint = f"not a parameter of policy {spec.kind}"
    return model


def _check_param(info: Any, value: Any) -> Any:
    return check_value(info, value, info.name)


def policy_model(spec: PolicySpec) -> type[BaseModel]:
    """Policy `spec`: its kind, its own parameters and the fields every policy shares."""
    params = params_model(spec)
    shared = {r.name: config_field(Policy, r) for r in field_rules(Policy) if r.name != "kind"}
    paper = f" Models: {spec.paper}." if spec.paper else ""
    fields = {
        "kind": (one_of([spec.kind]), Field(description="The registered policy")),
        "params": (params, Field(default_factory=params, description=params.__doc__)),
        **shared,
    }
    pool = "disaggregated" if spec.disaggregated else "colocated"
    return make_model(f"{_camel(spec.kind)}Policy", StrictModel, f"{spec.help} ({pool}).{paper}", fields)


def policy_field(models: dict[str, type[BaseModel]]) -> Any:
    """A policy: a registered kind, or an object discriminated by `kind` (default sync)."""
    variants = functools.reduce(operator.or_, models.values())
    union = Annotated[variants, Field(discriminator="kind")] if len(models) > 1 else variants

    def validate(value: Any, handler: Callable[[Any], Any]) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            value = {"kind": value}
        if not isinstance(value, dict):
            raise ValueError(f"expected a policy kind or an object, got {type(value).__name__}")
        kind = value.get("kind", DEFAULT_POLICY)
        if not isinstance(kind, str):
            raise ValueError(f"kind: must be a string, got {kind!r:.80}")
        try:
            policy_spec(kind)
        except ValueError as exc:  # the registry's message, named from this field
            raise ValueError(str(exc).removeprefix("policy.")) from None
        try:
            return handler({**value, "kind": kind})
        except ValidationError as exc:  # a tagged union's location starts with the kind: drop it
            first = exc.errors()[0]
            loc = first["loc"][1:] if len(models) > 1 else first["loc"]
            raise ValueError(error_message({**first, "loc": loc})[1]) from None

    shown = one_of(models) | union | None
    return Annotated[union | None, WrapValidator(validate, json_schema_input_type=shown)]
