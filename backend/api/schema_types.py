"""Building blocks of the typed request bodies (`schemas_policy`, `schemas_replay`): a
model that names the first field it does not declare, a field validated by the job
code's own check of it and shown in OpenAPI as a type derived from the same declaration,
and such types for a described field (a config `FieldRule` or a policy `ParamInfo`: its
type, null, bounds as minimum / exclusiveMinimum / maximum, choices as an enum)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, create_model, model_validator

from core.simulator.config import check_field

_PY = {"integer": int, "number": float, "boolean": bool, "string": str}
M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """A JSON object with only its declared fields (the first other one is named)."""

    model_config = ConfigDict(extra="forbid")
    unknown_hint: ClassVar[str] = "unknown field"

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        unknown = [k for k in data if k not in cls.model_fields]
        if unknown:
            known = ", ".join(cls.model_fields) or "none"
            raise ValueError(f"{unknown[0]}: {cls.unknown_hint} (known: {known})")
        cls.check_whole(data)
        return data

    @classmethod
    def check_whole(cls, data: dict) -> None:
        """A rule across fields that comes before the fields' own (none by default)."""


def one_of(values) -> Any:
    """The type of one of `values` (an enum in OpenAPI), made at run time."""
    return Literal[tuple(values)]


def some_of(item: Any) -> Any:
    """The type of a non-empty list of `item`."""
    return Annotated[list[item], Field(min_length=1)]


def make_model(name: str, base: type[M], doc: str | None, fields: dict[str, Any]) -> type[M]:
    """A model class made at run time from declarations (`fields`: name -> (type, Field))."""
    options: dict[str, Any] = {"__base__": base, "__doc__": doc, **fields}
    return create_model(name, **options)


def checked(check: Callable[[Any], Any], shown: Any) -> Any:
    """A field validated by `check` (the job code's check of it) and shown as type `shown`."""
    return Annotated[Any, PlainValidator(check, json_schema_input_type=shown)]


def _number(kind: str, value: float | None) -> float | None:
    """An integer's bound as an integer (1.0 -> 1)."""
    return int(value) if kind == "integer" and value is not None and float(value).is_integer() else value


def shown_type(rule: Any, bounds: dict | None = None) -> Any:
    """The OpenAPI type of a described field (a config `FieldRule` or a policy `ParamInfo`)."""
    base: Any = one_of(rule.choices) if rule.choices else _PY[rule.type]
    if bounds is None:
        bounds = {k: getattr(rule, k) for k in ("ge", "gt", "le") if getattr(rule, k) is not None}
    bounds = {k: _number(rule.type, v) for k, v in bounds.items()}
    if bounds:
        base = Annotated[base, Field(**bounds)]
    return base | None if rule.nullable else base


def config_field(cls: type, rule: Any, default: Any = ..., description: str | None = None) -> tuple:
    """A config dataclass field checked by `check_field` (`default` ... : the dataclass')."""
    check = functools.partial(_check_config, cls, rule.name)
    extra = no_default if default is None and not rule.nullable else None
    return (
        checked(check, shown_type(rule)),
        Field(
            rule.default if default is ... else default,
            description=description or rule.help or None,
            json_schema_extra=extra,
        ),
    )


def _check_config(cls: type, name: str, value: Any) -> Any:
    return check_field(cls, name, value, name)


def no_default(schema: dict) -> None:
    """Left out, the field is derived (no default to show)."""
    schema.pop("default", None)
