"""The typed request bodies of POST /simulations, /advice and /workloads: OpenAPI shows the
cluster, model, limits and policy shapes with their bounds, each derived from the
declaration its check reads (the config dataclasses' rules, the policy registry's
parameters, the request fields); a bad body is a 422 whose message names the field as
the checks word it; ids are never coerced. Both deployment shapes."""

from __future__ import annotations

import pytest

from backend.jobs import request_fields as rf
from backend.jobs.advice import ADVICE_FIELDS
from backend.jobs.simulations import SIMULATION_FIELDS, WORKLOAD_FIELDS
from core.simulator.config import ClusterConfig, EngineLimits, ModelConfig, Policy, field_rules
from core.simulator.defaults import LAYOUT_FIELDS
from core.simulator.policies import POLICIES
from core.simulator.policies.spec import PARAM_FLOAT_MAX, PARAM_INT_MAX

SIM = "/api/v1/simulations"
NO_TRACE = 2**31 - 1  # an id no team has: a body that passes its checks answers 404
JSON_TYPES = {"integer": "integer", "number": "number", "boolean": "boolean", "string": "string"}


def openapi(client) -> tuple[dict, dict]:
    doc = client.get("/api/v1/openapi.json").json()
    return doc, doc["components"]["schemas"]


def deref(schemas: dict, node: dict) -> dict:
    return schemas[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node


def non_null(prop: dict) -> dict:
    """A property's schema without its null alternative."""
    options = [o for o in prop.get("anyOf", [prop]) if o.get("type") != "null"]
    assert len(options) == 1, prop
    return options[0]


def assert_shows(prop: dict, rule, *, default=True, optional=False) -> None:
    """The property shows `rule` (a config FieldRule or a policy ParamInfo): type, null,
    bounds, choices, default and help (`optional`: an override, null = not given)."""
    shown = non_null(prop)
    assert ({"type": "null"} in prop.get("anyOf", [])) == (rule.nullable or optional), prop
    if rule.choices:
        assert shown["enum"] == list(rule.choices)
    else:
        assert shown["type"] == JSON_TYPES[rule.type]
    for key, bound in (("minimum", rule.ge), ("exclusiveMinimum", rule.gt), ("maximum", rule.le)):
        if bound is not None:
            assert shown[key] == bound, (rule.name, key, shown)
    if default:
        assert prop.get("default") == rule.default, (rule.name, prop)  # (OpenAPI leaves null defaults out)
    if rule.help:
        assert prop["description"] == rule.help


def test_openapi_shows_the_replay_shapes_with_their_bounds(client):
    doc, schemas = openapi(client)
    body = doc["paths"][SIM]["post"]["requestBody"]["content"]["application/json"]["schema"]
    sim = deref(schemas, body)
    assert sim["additionalProperties"] is False and list(sim["properties"]) == list(SIMULATION_FIELDS)
    trace_id = non_null(sim["properties"]["trace_id"])
    assert (trace_id["type"], trace_id["minimum"], trace_id["maximum"]) == ("integer", 1, 2**31 - 1)

    cluster = deref(schemas, non_null(sim["properties"]["cluster"]))
    assert cluster["additionalProperties"] is False
    for rule in field_rules(ClusterConfig):
        if rule.name != "n_gpus":  # (below)
            assert_shows(cluster["properties"][rule.name], rule, default=rule.name not in LAYOUT_FIELDS)
    assert "default" not in cluster["properties"]["rollout_tp"]  # derived per policy when left out
    n_gpus = cluster["properties"]["n_gpus"]  # the config's rule, within what a request may ask for
    assert (n_gpus["minimum"], n_gpus["maximum"], n_gpus["default"]) == (1, rf.MAX_GPUS, 8)
    assert (
        cluster["properties"]["train_mfu"]["exclusiveMinimum"] == 0
        and cluster["properties"]["train_mfu"]["maximum"] == 1
    )
    gpu = cluster["properties"]["gpu"]["anyOf"]
    assert (
        "H100" in gpu[0]["enum"]
        and deref(schemas, gpu[1])["properties"]["peak_flops"]["anyOf"][0]["exclusiveMinimum"] == 0
    )
    limits = deref(schemas, non_null(sim["properties"]["limits"]))
    for rule in field_rules(EngineLimits):
        assert_shows(limits["properties"][rule.name], rule)
    model = sim["properties"]["model"]["anyOf"]
    assert "Qwen2.5-7B" in model[0]["enum"]
    overrides = deref(schemas, model[1])["properties"]
    for rule in field_rules(ModelConfig):
        assert_shows(overrides[rule.name], rule, default=False, optional=True)

    # policy A and B: a registered kind, or an object discriminated by kind, one per policy
    for field in ("policy", "compare_policy"):
        alternatives = sim["properties"][field]["anyOf"]
        assert alternatives[0]["enum"] == list(POLICIES)
        union = alternatives[1]
        assert union["discriminator"]["propertyName"] == "kind"
        assert set(union["discriminator"]["mapping"]) == set(POLICIES)
        for kind, spec in POLICIES.items():
            variant = deref(schemas, {"$ref": union["discriminator"]["mapping"][kind]})
            assert variant["properties"]["kind"]["const"] == kind and variant["additionalProperties"] is False
            for rule in field_rules(Policy):
                if rule.name != "kind":
                    assert_shows(variant["properties"][rule.name], rule)
            params = deref(schemas, variant["properties"]["params"])
            assert list(params["properties"]) == [i.name for i in spec.param_infos]
            for info in spec.param_infos:
                assert_shows(params["properties"][info.name], info)
    over = deref(schemas, {"$ref": "#/components/schemas/PartialParams"})["properties"]["over_provision"]
    assert (over["type"], over["minimum"], over["maximum"], over["default"]) == ("number", 1, PARAM_FLOAT_MAX, 2.0)
    sync_every = deref(schemas, {"$ref": "#/components/schemas/AsyncParams"})["properties"][
        "trigger_parameter_sync_step"
    ]
    assert (sync_every["type"], sync_every["minimum"], sync_every["maximum"]) == ("integer", 1, PARAM_INT_MAX)
    runs = deref(schemas, {"$ref": "#/components/schemas/MonteCarlo"})["properties"]["runs"]["anyOf"][0]
    assert (runs["minimum"], runs["maximum"]) == (rf.UNCERTAINTY_RUNS.lo, rf.UNCERTAINTY_RUNS.hi)


def test_openapi_shows_the_advice_and_workload_bodies(client):
    doc, schemas = openapi(client)
    advice = deref(
        schemas, doc["paths"]["/api/v1/advice"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    )
    assert list(advice["properties"]) == list(ADVICE_FIELDS) and advice["required"] == ["trace_id"]
    n = advice["properties"]["n_gpus"]
    assert (n["minimum"], n["maximum"], n["default"]) == (1, rf.ADVICE_COUNTS["n_gpus"].hi, 8)
    policies = non_null(advice["properties"]["policies"])
    assert policies["items"]["enum"] == list(POLICIES) and policies["minItems"] == 1
    workload = deref(
        schemas, doc["paths"]["/api/v1/workloads"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    )
    assert list(workload["properties"]) == list(WORKLOAD_FIELDS)
    assert non_null(workload["properties"]["formats"])["items"]["enum"] == list(rf.WORKLOAD_FORMATS)
    assert non_null(workload["properties"]["name"])["maxLength"] == rf.WORKLOAD_TEXTS["name"].most
    assert workload["properties"]["dp_size"]["minimum"] == 1 and workload["properties"]["ingest"]["type"] == "boolean"


PARTIAL = {"kind": "partial", "params": {"over_provision": 0.5}}


@pytest.mark.parametrize(
    "body, field, message",
    [
        ({"policy": PARTIAL}, "policy.params.over_provision", "policy.params.over_provision: must be >= 1, got 0.5"),
        ({"compare_policy": PARTIAL}, "compare_policy.params.over_provision", None),
        ({"cluster": {"rollout_tp": 0}}, "cluster.rollout_tp", "cluster.rollout_tp: must be an integer >= 1, got 0"),
        ({"cluster": {"n_gpus": "16"}}, "cluster.n_gpus", "cluster.n_gpus: must be a number, got '16'"),
        ({"cluster": {"n_gpus": 4097}}, "cluster.n_gpus", "cluster.n_gpus: must be <= 4096, got 4097"),
        ({"cluster": {"train_mfu": 1.5}}, "cluster.train_mfu", "cluster.train_mfu: must be <= 1, got 1.5"),
        (
            {"cluster": {"colocation_overhead": 0.5}},
            "cluster.colocation_overhead",
            "cluster.colocation_overhead: must be >= 1, got 0.5",
        ),
        (
            {"cluster": {"train_serial_fraction": 1.5}},
            "cluster.train_serial_fraction",
            "cluster.train_serial_fraction: must be <= 1, got 1.5",
        ),
        ({"sensitivity": "yes"}, "sensitivity", "sensitivity: must be true or false, got 'yes'"),
        ({"cluster": {"gpu": {"peak_flops": 1e15}}}, "cluster.gpu.mem_bandwidth", None),
        ({"cluster": {"gpu": "TPU9"}}, "cluster.gpu", None),
        ({"cluster": {"colour": 1}}, "cluster.colour", None),
        ({"cluster": [1]}, "cluster", "cluster: expected an object, got list"),
        ({"limits": {"kv_cache_tokens": True}}, "limits.kv_cache_tokens", None),
        ({"model": {"preset": "Qwen2.5-7B", "layers": 0}}, "model.layers", None),
        ({"policy": "eventually"}, "policy.kind", None),
        ({"policy": 5}, "policy", "policy: expected a policy kind or an object, got int"),
        ({"policy": {"kind": "sync", "colour": 1}}, "policy.colour", None),
        ({"policy": {"kind": "sync", "balancing": "perfect"}}, "policy.balancing", None),
        ({"policy": {"kind": "partial", "params": {"colour": 1}}}, "policy.params.colour", None),
        ({"policy": {"kind": "partial", "params": [1]}}, "policy.params", None),
        (
            {"policy": {"kind": "async", "params": {"trigger_parameter_sync_step": 1.5}}},
            "policy.params.trigger_parameter_sync_step",
            None,
        ),
        (
            {"policy": {"kind": "async", "params": {"trigger_parameter_sync_step": True}}},
            "policy.params.trigger_parameter_sync_step",
            None,
        ),
        ({"policy": {"kind": "partial", "params": {"finished_groups": 0}}}, "policy.params.finished_groups", None),
        ({"uncertainty": {"runs": 3}}, "uncertainty.runs", "uncertainty.runs: must be an integer in 10..20000, got 3"),
        ({"calibrate": {"fit_steps": [0, -1]}}, "calibrate.fit_steps[1]", None),
        ({"steps": [0]}, "steps", None),
        ({"forecast": {"workloads": 65}}, "forecast.workloads", None),
        ({"colour": 1}, "colour", None),
    ],
)
def test_bad_replay_bodies_name_the_field(api, body, field, message):
    r = api.post(SIM, json={"trace_id": NO_TRACE, **body})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["field"] == field and detail["message"].startswith(f"{field}: "), detail
    if message is not None:
        assert detail["message"] == message
    assert set(detail) <= {"message", "file", "line", "field"}


@pytest.mark.parametrize("path", [SIM, "/api/v1/advice", "/api/v1/workloads"])
@pytest.mark.parametrize("trace_id", [108.0, "108", True, 0, 2**31])
def test_body_ids_are_never_coerced(api, path, trace_id):
    r = api.post(path, json={"trace_id": trace_id})
    assert r.status_code == 422 and r.json()["detail"]["field"] == "trace_id", r.text


@pytest.mark.parametrize(
    "body",
    [
        {"policy": "partial", "compare_policy": "async"},
        {"policy": {"params": {}}},  # kind left out: sync
        {"policy": {"kind": "partial", "params": {"over_provision": 1.5, "finished_groups": None}}},
        {"compare_policy": {"kind": "async", "params": {"trigger_parameter_sync_step": 2.0}, "balancing": "kk"}},
        {"cluster": {"gpu": "h100", "n_gpus": 16.0}, "model": "qwen2.5-7b", "uncertainty": False},
        {"cluster": {"gpu": {"preset": "A100", "memory_bytes": 40e9}}, "limits": {"kv_cache_tokens": None}},
    ],
)
def test_good_bodies_pass_their_checks(api, body):
    """Each passes the typed body; the id of no trace of the team is then a 404."""
    r = api.post(SIM, json={"trace_id": NO_TRACE, **body})
    assert r.status_code == 404 and "trace" in r.json()["detail"]["message"], r.text


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/api/v1/advice", {"gpu": "TPU9"}, "gpu"),
        ("/api/v1/advice", {"n_gpus": 4097}, "n_gpus"),
        ("/api/v1/advice", {"policies": []}, "policies"),
        ("/api/v1/advice", {"concurrency": [0]}, "concurrency[0]"),
        ("/api/v1/workloads", {"formats": ["xlsx"]}, "formats[0]"),
        ("/api/v1/workloads", {"dp_size": 0}, "dp_size"),
        ("/api/v1/workloads", {"name": "a\x00b"}, "name"),
    ],
)
def test_bad_advice_and_workload_bodies_name_the_field(api, path, body, field):
    r = api.post(path, json={"trace_id": NO_TRACE, **body})
    assert r.status_code == 422 and r.json()["detail"]["field"] == field, r.text
    assert r.json()["detail"]["message"].startswith(f"{field}: ")
