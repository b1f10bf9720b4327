"""Number fields of the forms that submit a job: what the user typed is what is sent,
or the submit is blocked with a message next to the field.

A browser's number input hands Dash `null` for any value it finds invalid (out of its
min / max, off its step, half typed), which a form cannot tell from an empty field and
would replace by the default. So these fields are text inputs (whole numbers get a
numeric keyboard on touch devices) checked here against the bounds the form declares: `check_number` is
pure, `number_input` draws the input and the message slot under it (id:
`error_id(input id)`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dash import dcc, html

from dashboard.views.components import control


@dataclass(frozen=True)
class Bounds:
    """What a number field takes: a whole number or any, its bounds, and whether it may
    be left empty (empty: the API's default, or null where `nullable`)."""

    integer: bool = True
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    required: bool = False

    def allowed(self) -> str:
        """'a whole number >= 1', 'a number > 0 and <= 1' (as the API's presets say it)."""
        parts = [
            f">= {_fmt(self.ge)}" if self.ge is not None else "",
            f"> {_fmt(self.gt)}" if self.gt is not None else "",
            f"<= {_fmt(self.le)}" if self.le is not None else "",
        ]
        what = "a whole number" if self.integer else "a number"
        bounds = " and ".join(p for p in parts if p)
        return f"{what} {bounds}" if bounds else what


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def check_number(value: Any, bounds: Bounds) -> tuple[int | float | None, str | None]:
    """(the number, None) or (None, why not); empty is (None, None) unless required."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, ("required: " + bounds.allowed()) if bounds.required else None
    if isinstance(value, bool):
        return None, f"'{value}' is not {bounds.allowed()}"
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except ValueError:
        return None, f"'{value}' is not a number: {bounds.allowed()}"
    if not math.isfinite(number):
        return None, f"'{value}' is not {bounds.allowed()}"
    if bounds.integer and not number.is_integer():
        return None, f"{_shown(value)} is not a whole number"
    low_ok = (bounds.ge is None or number >= bounds.ge) and (bounds.gt is None or number > bounds.gt)
    if not low_ok or (bounds.le is not None and number > bounds.le):
        return None, f"{_shown(value)} is out of range: {bounds.allowed()}"
    return (int(number) if bounds.integer else number), None


def _shown(value: Any) -> str:
    return value.strip() if isinstance(value, str) else _fmt(value)


def error_id(input_id: str | dict) -> str | dict:
    """The id of a field's message slot: '<id>-error', or the pattern id with type
    '<type>-error'."""
    if isinstance(input_id, dict):
        return {**input_id, "type": f"{input_id['type']}-error"}
    return f"{input_id}-error"


def number_input(
    input_id: str | dict, value: Any, bounds: Bounds, *, placeholder: str = "", width: int = 110, slot: bool = True
) -> html.Span:
    """The text input holding `value` and, under it unless `slot` is False (the caller
    places it), the slot its message goes in."""
    box = dcc.Input(
        id=input_id,
        type="text",
        inputMode="numeric" if bounds.integer else None,
        value=value,
        placeholder=placeholder,
        className="input",
        style={"width": f"{width}px"},
    )
    return html.Span([box, error_slot(input_id)] if slot else [box], className="number-field", title=bounds.allowed())


# A form's number fields: input id -> (form value key, label, what it takes, what empty means).
NumberFields = dict[str, tuple[str, str, Bounds, str]]


def number_control(fields: NumberFields, input_id: str, values: dict) -> html.Label:
    """The labelled field `input_id` of a form, holding its value from `values`."""
    key, label, bounds, empty = fields[input_id]
    return control(label, number_input(input_id, values[key], bounds, placeholder=empty))


def error_slot(input_id: str | dict) -> html.Small:
    return html.Small(id=error_id(input_id), className="field-error", role="alert")


def check_fields(values: dict[str, Any], declared: dict[str, Bounds]) -> tuple[dict[str, Any], dict[str, str]]:
    """({name: number}, {name: message}) of the named fields' values."""
    numbers, errors = {}, {}
    for name, bounds in declared.items():
        numbers[name], err = check_number(values.get(name), bounds)
        if err:
            errors[name] = err
    return numbers, errors


def blocked_message(fields: list[str]) -> str:
    """The line under the submit button when fields block it."""
    return f"Not submitted: fix {', '.join(fields)} (each says why under it)."
