"""The replay forms' policy parameter fields (dashboard/views/policy_params.py), built from
the presets the API serves: one typed input per declared parameter of every registered
policy, read back as the request's `params`, and the sentence a result gets when its
parameters make a policy replay identically to another."""

from __future__ import annotations

from dataclasses import asdict

import orjson
import pytest

from backend.jobs.simulations import presets, simulation_params
from core.simulator.policies import POLICIES
from dashboard.views.number_fields import Bounds, check_number
from dashboard.views.policy_params import PARAM, equivalence_notes, param_inputs, params_from_inputs, read_params
from dashboard.views.replay_forms import form_defaults, form_values_from_job, simulation_body


def served_presets() -> dict:
    """The presets as a client receives them (JSON)."""
    return orjson.loads(orjson.dumps(presets()))


def inputs_of(components: list) -> dict[str, dict]:
    """{parameter: the input's props} of rendered parameter fields."""
    out = {}
    for label in components:
        for child in label.children:
            for box in [child, *(getattr(child, "children", None) or [])]:  # a number field: its input's span
                pid = getattr(box, "id", None)
                if isinstance(pid, dict) and pid.get("type") == PARAM:
                    out[pid["name"]] = {**box.to_plotly_json()["props"], "component": type(box).__name__}
    return out


@pytest.mark.parametrize("kind", list(POLICIES))
def test_every_declared_parameter_gets_a_typed_input(kind):
    infos = served_presets()["policy_params"][kind]
    fields = inputs_of(param_inputs(infos, "sim", "b"))
    assert list(fields) == [i.name for i in POLICIES[kind].param_infos]
    for info in POLICIES[kind].param_infos:
        f = fields[info.name]
        assert f["id"] == {"type": PARAM, "form": "sim", "policy": "b", "name": info.name}
        if info.type in ("integer", "number"):
            # a text box: a browser's number box hands an out-of-bounds value over as null
            assert f["component"] == "Input" and f["type"] == "text" and f["value"] == info.default
            assert "min" not in f and "max" not in f
        else:
            assert f["component"] == "Dropdown"


def test_values_go_back_as_params_by_type():
    infos = served_presets()["policy_params"]["partial"]
    ids = [{"type": PARAM, "form": "sim", "policy": "a", "name": n} for n in ("finished_groups", "over_provision")]
    assert params_from_inputs(infos, ids, [None, 1.5]) == {"finished_groups": None, "over_provision": 1.5}
    assert params_from_inputs(infos, ids, [12.0, ""]) == {"finished_groups": 12}  # empty: the default
    booleans = [
        {"name": "greedy", "type": "boolean", "nullable": False},
        {"name": "k", "type": "string", "nullable": True},
    ]
    bool_ids = [{"name": "greedy"}, {"name": "k"}]
    assert params_from_inputs(booleans, bool_ids, ["true", "null"]) == {"greedy": True, "k": None}
    assert params_from_inputs(booleans, bool_ids, ["false", "x"]) == {"greedy": False, "k": "x"}


def test_a_rerun_fills_the_parameters_and_sends_them_again():
    p = served_presets()
    body = {
        "trace_id": 3,
        "policy": {"kind": "partial", "params": {"over_provision": 1.5}},
        "compare_policy": {"kind": "async", "params": {"trigger_parameter_sync_step": 2}},
    }
    stored = simulation_params(body)
    values = form_values_from_job(stored, form_defaults(p))
    assert values["params_a"] == {**asdict(POLICIES["partial"].resolve({})), "over_provision": 1.5}
    fields = inputs_of(param_inputs(p["policy_params"]["async"], "sim", "b", values["params_b"]))
    assert fields["trigger_parameter_sync_step"]["value"] == 2
    assert simulation_params(simulation_body(3, values)) == stored


def test_equivalent_parameters_are_said():
    result = {
        "a": {"config": {"policy": {"kind": "sync", "params": {}, "equivalent_to": None}}},
        "b": {
            "config": {
                "policy": {
                    "kind": "partial",
                    "params": {"finished_groups": None, "over_provision": 1.0},
                    "equivalent_to": "sync",
                }
            }
        },
    }
    assert equivalence_notes(result, {"a": "sync", "b": "partial"}) == [
        "Policy B: partial with finished_groups null, over_provision 1.0 replays identically to sync."
    ]
    assert equivalence_notes({"a": result["a"], "b": None}, {}) == []


def test_an_invalid_number_is_refused_with_its_message_never_the_default():
    """Item 2 of issue 32: partial's over_provision 0.5 (>= 1 declared) was replaced by 2.0."""
    infos = served_presets()["policy_params"]["partial"]
    ids = [{"type": PARAM, "form": "sim", "policy": "b", "name": n} for n in ("finished_groups", "over_provision")]
    params, errors = read_params(infos, ids, ["", "0.5"])
    assert params == {"finished_groups": None} and "over_provision" not in params
    assert errors == {"over_provision": "0.5 is out of range: a number >= 1"}
    assert read_params(infos, ids, ["2.5", "1.5"])[1] == {"finished_groups": "2.5 is not a whole number"}
    assert read_params(infos, ids, ["abc", "1.5"])[1]["finished_groups"].startswith("'abc' is not a number")
    assert read_params(infos, ids, [" 12 ", "0.75e1"]) == ({"finished_groups": 12, "over_provision": 7.5}, {})
    with pytest.raises(ValueError, match="over_provision: 0.5 is out of range"):
        params_from_inputs(infos, ids, [None, 0.5])


@pytest.mark.parametrize(
    ("value", "bounds", "expected"),
    [
        ("3", Bounds(ge=1), (3, None)),
        (3.0, Bounds(ge=1), (3, None)),
        ("", Bounds(ge=1), (None, None)),
        (None, Bounds(ge=1, required=True), (None, "required: a whole number >= 1")),
        ("0", Bounds(ge=1), (None, "0 is out of range: a whole number >= 1")),
        ("0", Bounds(integer=False, gt=0), (None, "0 is out of range: a number > 0")),
        ("1.5", Bounds(integer=False, le=1), (None, "1.5 is out of range: a number <= 1")),
        ("nan", Bounds(integer=False), (None, "'nan' is not a number")),
        ("1e", Bounds(), (None, "'1e' is not a number: a whole number")),
    ],
)
def test_check_number_says_why_a_value_is_refused(value, bounds, expected):
    assert check_number(value, bounds) == expected
