"""A replay policy's own parameters in the forms: one input per parameter the presets
declare (`GET /simulations/presets` -> `policy_params[kind]`: name, type, nullable,
default, help, bounds, choices, `allowed` in words), the request's `params` read back
from them, and what a result says when its parameters make a policy replay
identically to another. Nothing here names a policy or a parameter: all comes from
the presets and the results.

Input ids (Dash pattern matching): {"type": PARAM, "form": form, "policy": "a" | "b",
"name": parameter}; under each, its message slot {"type": PARAM_ERROR, ...the same}. A
number outside what the parameter takes blocks the submit with its message there
(`read_params`), never replaced by the default.
"""

from __future__ import annotations

import json
from typing import Any

from dash import dcc, html

from dashboard.views.number_fields import Bounds, check_number, error_slot, number_input

PARAM = "policy-param"
PARAM_ERROR = f"{PARAM}-error"


def _text(value: Any) -> Any:
    """true / false / null as the dropdowns hold them (other values as they are)."""
    return json.dumps(value) if value is None or isinstance(value, bool) else value


def param_id(form: str, which: str, name: str) -> dict:
    return {"type": PARAM, "form": form, "policy": which, "name": name}


def param_inputs(infos: list[dict], form: str, which: str, values: dict | None = None) -> list:
    """One labelled input per declared parameter, holding `values[name]` when given, else
    the default; its help and what it takes are the caption and the hover."""
    values = values or {}
    out = []
    for info in infos:
        value = values.get(info["name"], info.get("default"))
        caption = f"{info.get('help', '')} ({info.get('allowed') or info['type']})"
        out.append(
            html.Label(
                [
                    html.Span(info["name"], className="control-label"),
                    _input(info, param_id(form, which, info["name"]), value),
                    error_slot(param_id(form, which, info["name"])),
                    html.Small(caption, className="muted param-help"),
                ],
                className="control param",
                title=caption,
            )
        )
    return out


def bounds_of(info: dict) -> Bounds:
    """The bounds a declared number parameter takes (empty: its default, or null)."""
    return Bounds(integer=info["type"] == "integer", ge=info.get("ge"), gt=info.get("gt"), le=info.get("le"))


def _input(info: dict, id_: dict, value: Any):
    nullable = bool(info.get("nullable"))
    if info["type"] == "boolean" or info.get("choices"):
        choices = [True, False] if info["type"] == "boolean" else list(info["choices"])
        options = [{"label": str(_text(c)), "value": _text(c)} for c in choices + ([None] if nullable else [])]
        return dcc.Dropdown(id=id_, options=options, value=_text(value), clearable=False)
    if info["type"] == "string":
        return dcc.Input(id=id_, type="text", value=value, className="input", debounce=True)
    empty = "null" if nullable else f"default {info.get('default')}"
    return number_input(id_, value, bounds_of(info), placeholder=empty, slot=False)


def read_params(infos: list[dict], ids: list[dict], values: list) -> tuple[dict, dict[str, str]]:
    """(the request's `params`, {parameter: why its value is refused}) from the inputs'
    ids and values: numbers as declared (an integer's 3.0 is 3) and within their bounds,
    true / false / null from the choices; an empty input is null where the parameter
    takes null, else left out (its default, which the empty field shows)."""
    by_name = {i["name"]: i for i in infos}
    out: dict = {}
    errors: dict[str, str] = {}
    for id_, value in zip(ids, values):
        info = by_name.get(id_.get("name"))
        if info is None:
            continue
        name = info["name"]
        if info["type"] in ("integer", "number") and not info.get("choices"):
            number, err = check_number(value, bounds_of(info))
            if err:
                errors[name] = err
            elif number is not None:
                out[name] = number
            elif info.get("nullable"):
                out[name] = None
            continue
        if value in (None, ""):
            if info.get("nullable"):
                out[name] = None
            continue
        if value in ("true", "false", "null") and (info["type"] == "boolean" or value == "null"):
            value = json.loads(value)
        out[name] = value
    return out, errors


def params_from_inputs(infos: list[dict], ids: list[dict], values: list) -> dict:
    """The request's `params` (see `read_params`); ValueError names a refused value."""
    params, errors = read_params(infos, ids, values)
    if errors:
        raise ValueError("; ".join(f"{k}: {v}" for k, v in errors.items()))
    return params


def error_outputs(errors: dict[str, str], ids: list[dict]) -> list:
    """The message slots' contents, one per parameter input `ids` (each input has one
    slot, so an ALL output over them has the inputs' order)."""
    return [errors.get(str(i.get("name"))) for i in ids]


def describe_params(params: dict | None) -> str:
    """'over_provision 1.5, finished_groups null'."""
    return ", ".join(f"{k} {json.dumps(v)}" for k, v in (params or {}).items())


def equivalence_notes(result: dict, names: dict[str, str | None]) -> list[str]:
    """One sentence per replayed policy whose parameters make it replay identically to
    another kind (the replay's `config.policy.equivalent_to`)."""
    notes = []
    for which in ("a", "b"):
        policy = ((result.get(which) or {}).get("config") or {}).get("policy") or {}
        same = policy.get("equivalent_to")
        if not same:
            continue
        params = describe_params(policy.get("params"))
        kind = policy.get("kind") or names.get(which)
        notes.append(
            f"Policy {which.upper()}: {kind}"
            + (f" with {params}" if params else "")
            + f" replays identically to {same}."
        )
    return notes
