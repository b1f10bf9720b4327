"""Pure shaping of the replay and workload forms: defaults from the API's presets and a
trace, and the request bodies of POST /simulations and POST /workloads (policy A's and
B's own parameters as `params`, read from their inputs by `views.policy_params`).

No Dash, no HTTP: values in, dicts out (the API validates; its 422 names the field).
"""

from __future__ import annotations

import re

CALIBRATION_MODES = {"auto": "when measured", "on": "on", "off": "off"}


def form_defaults(presets: dict, step_ids: list[int] | None = None) -> dict:
    """Initial form values: the presets' shared defaults (GPU, model, GPU budget, policy
    A against policy B) and the trace's whole step range [first, last + 1). The layout
    (replicas, TP, training DP) is left empty: the API derives it per policy from the
    same GPU budget (core/simulator/defaults.py), so policy A and B use the same GPUs."""
    d = presets.get("defaults") or {}
    cluster, limits = d.get("cluster") or {}, d.get("limits") or {}
    policies = presets.get("policies") or []
    step_ids = sorted(step_ids or [])
    want_a, want_b = d.get("policy_kind"), d.get("compare_policy")
    if isinstance(d.get("policy"), str):
        want_a = d["policy"]
    return {
        "gpu": d.get("gpu") or cluster.get("gpu", "H100"),
        "model": d.get("model"),
        "n_gpus": int(d.get("n_gpus") or cluster.get("n_gpus", 8)),
        "replicas": None,
        "tp": None,
        "train_dp": None,
        "max_running_seqs": limits.get("max_running_seqs"),
        "kv_cache_tokens": limits.get("kv_cache_tokens"),
        "policy_a": want_a if want_a in policies else (policies[0] if policies else None),
        "policy_b": want_b if want_b in policies else None,
        "params_a": {},  # empty: each parameter's default (the form shows them)
        "params_b": {},
        "balancing": (d.get("policy") or {}).get("balancing", "none") if isinstance(d.get("policy"), dict) else "none",
        "calibrate": "auto",
        "fit_steps": "",
        "step_from": step_ids[0] if step_ids else None,
        "step_to": step_ids[-1] + 1 if step_ids else None,
        "forecast": False,
    }


def form_values_from_job(params: dict, defaults: dict) -> dict:
    """The replay form's values (keys as in `form_defaults`) that re-run a simulation
    job with these stored (resolved) `params`; what the job does not say stays `defaults`."""
    v = dict(defaults)
    c = params.get("cluster") or {}
    gpu = c.get("gpu")
    v["gpu"] = (gpu.get("name") if isinstance(gpu, dict) else gpu) or v.get("gpu")
    if c.get("n_gpus") is not None:
        v["n_gpus"] = c["n_gpus"]
    # a layout field policy B's cluster has otherwise was derived per policy: left to the API again
    cb = params.get("compare_cluster") or {}
    for key, field in (("replicas", "rollout_replicas"), ("tp", "rollout_tp"), ("train_dp", "train_dp")):
        if c.get(field) is not None and (not cb or cb.get(field) == c[field]):
            v[key] = c[field]
    model = params.get("model")
    v["model"] = (model.get("name") if isinstance(model, dict) else model) or v.get("model")
    limits = params.get("limits") or {}
    for key in ("max_running_seqs", "kv_cache_tokens"):
        if key in limits:
            v[key] = limits[key]
    policy, compare = params.get("policy") or {}, params.get("compare_policy")
    v["policy_a"] = (policy.get("kind") if isinstance(policy, dict) else policy) or v.get("policy_a")
    v["policy_b"] = (compare.get("kind") if isinstance(compare, dict) else compare) if compare else None
    v["params_a"] = dict(policy.get("params") or {}) if isinstance(policy, dict) else {}
    v["params_b"] = dict(compare.get("params") or {}) if isinstance(compare, dict) else {}
    if isinstance(policy, dict) and policy.get("balancing"):
        v["balancing"] = policy["balancing"]
    cal = params.get("calibrate")
    if cal is False:
        v["calibrate"], v["fit_steps"] = "off", ""
    elif isinstance(cal, dict):
        v["calibrate"], v["fit_steps"] = "on", ", ".join(str(s) for s in cal.get("fit_steps") or [])
    else:
        v["calibrate"], v["fit_steps"] = "auto", ""
    steps = params.get("steps")
    if steps:
        v["step_from"], v["step_to"] = steps[0], (steps[1] if steps[1] < 1 << 29 else v.get("step_to"))
    return v


def workload_values_from_job(params: dict, defaults: dict) -> dict:
    """The workload form's values (steps, groups, samples_per_group, seed, dp_size, task,
    formats, ingest, name) that re-run a workload job with these stored `params`."""
    v = dict(defaults)
    for key in ("steps", "groups", "samples_per_group", "seed", "dp_size", "task", "name"):
        if params.get(key) is not None and not (key == "steps" and not params[key]):  # 0 steps: a fit only
            v[key] = params[key]
    if params.get("formats"):
        v["formats"] = list(params["formats"])
    if "ingest" in params:
        v["ingest"] = bool(params["ingest"])
    return v


def parse_steps(text: str | None) -> list[int]:
    """'0, 2 5' -> [0, 2, 5]; ValueError names what is not a step number."""
    out = []
    for part in re.split(r"[\s,;]+", (text or "").strip()):
        if not part:
            continue
        if not part.isdigit():
            raise ValueError(f"fit steps: '{part}' is not a step number")
        out.append(int(part))
    return out


def _int_or_none(value) -> int | None:
    if value in (None, ""):
        return None
    return int(value)


def simulation_body(trace_id: int, values: dict) -> dict:  # noqa: C901 -- one request field per form control
    """The POST /simulations body for the form's `values` (keys as in `form_defaults`);
    empty optional fields are left to the API's defaults."""
    cluster = {"gpu": values.get("gpu")}
    for key, field in (
        ("n_gpus", "n_gpus"),
        ("replicas", "rollout_replicas"),
        ("tp", "rollout_tp"),
        ("train_dp", "train_dp"),
    ):
        v = _int_or_none(values.get(key))
        if v is not None:
            cluster[field] = v
    limits = {}
    for key in ("max_running_seqs", "kv_cache_tokens"):
        v = _int_or_none(values.get(key))
        if v is not None:
            limits[key] = v
    balancing = values.get("balancing") or "none"
    body: dict = {
        "trace_id": int(trace_id),
        "cluster": {k: v for k, v in cluster.items() if v is not None},
    }
    if values.get("policy_a"):
        body["policy"] = _policy(values["policy_a"], balancing, values.get("params_a"))
    if values.get("model"):
        body["model"] = values["model"]
    if limits:
        body["limits"] = limits
    if values.get("policy_b"):
        body["compare_policy"] = _policy(values["policy_b"], balancing, values.get("params_b"))
    mode = values.get("calibrate") or "auto"
    if mode == "off":
        body["calibrate"] = False
    elif mode == "on":
        body["calibrate"] = {"fit_steps": parse_steps(values.get("fit_steps"))}
    if values.get("forecast"):
        body["forecast"] = True
    lo, hi = _int_or_none(values.get("step_from")), _int_or_none(values.get("step_to"))
    if lo is not None or hi is not None:
        body["steps"] = [lo or 0, hi if hi is not None else 1 << 30]
    return body


def _policy(kind: str, balancing: str, params: dict | None) -> dict:
    """A policy of the request: its kind, the form's DP balancing and its own parameters
    (left out: their defaults)."""
    out: dict = {"kind": kind, "balancing": balancing}
    if params:
        out["params"] = dict(params)
    return out


def workload_body(trace_id: int, values: dict, *, fit_only: bool = False) -> dict:
    """The POST /workloads body: fit the trace, and unless `fit_only` generate
    steps x groups x samples_per_group (empty: as fitted) and ingest them as a trace."""
    if fit_only:
        return {"trace_id": int(trace_id), "steps": 0, "ingest": False}
    body: dict = {
        "trace_id": int(trace_id),
        "steps": _int_or_none(values.get("steps")) or 1,
        "seed": _int_or_none(values.get("seed")) or 0,
        "ingest": bool(values.get("ingest", True)),
    }
    for key in ("groups", "samples_per_group", "dp_size"):
        v = _int_or_none(values.get(key))
        if v is not None:
            body[key] = v
    if values.get("formats"):
        body["formats"] = list(values["formats"])
    if values.get("task"):
        body["task"] = values["task"]
    if values.get("name"):
        body["name"] = str(values["name"])
    return body
