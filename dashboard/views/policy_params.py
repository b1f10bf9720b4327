"""A replay policy's own parameters in the forms: one input per parameter the presets
declare (`GET /simulations/presets` -> `policy_params[kind]`: name, type, nullable,
default, help, bounds, choices, `allowed` in words), the request's `params` read back
from them, and what a result says when its parameters make a policy replay
identically to another. Nothing here names a policy or a parameter: all comes from
the presets and the results.

Input ids (Dash pattern matching): {"type": PARAM, "form": form, "policy": "a" | "b",
"name": parameter}.
"""

from __future__ import annotations

import json
from typing import Any

from dash import dcc, html

PARAM = "policy-param"


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
                    html.Small(caption, className="muted param-help"),
                ],
                className="control param",
                title=caption,
            )
        )
    return out


def _input(info: dict, id_: dict, value: Any):
    nullable = bool(info.get("nullable"))
    if info["type"] == "boolean" or info.get("choices"):
        choices = [True, False] if info["type"] == "boolean" else list(info["choices"])
        options = [{"label": str(_text(c)), "value": _text(c)} for c in choices + ([None] if nullable else [])]
        return dcc.Dropdown(id=id_, options=options, value=_text(value), clearable=False)
    if info["type"] == "string":
        return dcc.Input(id=id_, type="text", value=value, className="input", debounce=True)
    low = info.get("ge") if info.get("ge") is not None else info.get("gt")
    return dcc.Input(
        id=id_,
        type="number",
        value=value,
        min=low,
        max=info.get("le"),
        step=1 if info["type"] == "integer" else "any",
        placeholder="null" if nullable else "default",
        className="input",
        style={"width": "110px"},
    )


def params_from_inputs(infos: list[dict], ids: list[dict], values: list) -> dict:
    """The request's `params` from the inputs' ids and values: numbers as declared (an
    integer's 3.0 is 3), true / false / null from the choices; an empty input is null
    where the parameter takes null, else left out (its default). The API checks the
    values and its 422 names the parameter."""
    by_name = {i["name"]: i for i in infos}
    out: dict = {}
    for id_, value in zip(ids, values):
        info = by_name.get(id_.get("name"))
        if info is None:
            continue
        if value in (None, ""):
            if info.get("nullable"):
                out[info["name"]] = None
            continue
        if value in ("true", "false", "null") and (info["type"] == "boolean" or value == "null"):
            value = json.loads(value)
        elif info["type"] == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        out[info["name"]] = value
    return out


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
