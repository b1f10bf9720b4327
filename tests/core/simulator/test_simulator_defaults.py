"""One set of defaults (core/simulator/defaults.py) for API, CLI and dashboard: every
policy on the same GPU budget, the whole cluster used, every combination the
dashboard's form offers runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from backend.jobs.simulations import presets, simulation_params, simulation_request
from core.simulator import GPU_PRESETS, MODEL_PRESETS, ClusterConfig, StepWorkload, simulate
from core.simulator.config import EngineLimits, Policy
from core.simulator.defaults import DEFAULT_COMPARE, DEFAULT_N_GPUS, layout_for, unused_gpus
from core.simulator.feasibility import InfeasibleLayout, layout_shortfall, min_training_gpus
from core.simulator.policies import POLICIES
from core.simulator.replay import replay, result_dict
from dashboard.views.replay_forms import form_defaults, simulation_body


def _steps(n_steps: int = 2) -> list[StepWorkload]:
    rng = np.random.default_rng(0)
    return [
        StepWorkload.from_groups(s, rng.integers(50, 300, 8), [rng.integers(10, 400, 4) for _ in range(8)])
        for s in range(n_steps)
    ]


def test_presets_serve_the_shared_defaults():
    p = presets()
    d = p["defaults"]
    assert d["n_gpus"] == DEFAULT_N_GPUS and d["gpu"] == "H100" and d["model"] == "Qwen2.5-7B"
    assert d["policy_kind"] == "sync" and d["compare_policy"] == "one_step_off"
    # the colocated default uses the whole cluster; the disaggregated split too
    col, dis = d["layouts"]["colocated"], d["layouts"]["disaggregated"]
    assert col["rollout_replicas"] * col["rollout_tp"] == DEFAULT_N_GPUS == col["train_dp"]
    assert dis["rollout_replicas"] * dis["rollout_tp"] + dis["train_dp"] == DEFAULT_N_GPUS


def test_the_default_request_compares_on_the_same_budget():
    params = simulation_params({"trace_id": 1, "compare_policy": "one_step_off"})
    a, b = params["cluster"], params["compare_cluster"]
    assert a["n_gpus"] == b["n_gpus"] == DEFAULT_N_GPUS
    assert a["rollout_replicas"] * a["rollout_tp"] == 8 and a["train_dp"] == 8  # sync: all 8, colocated
    assert b["rollout_replicas"] * b["rollout_tp"] + b["train_dp"] * b["train_tp"] == 8


def test_explicit_layouts_are_kept_and_unused_gpus_reported():
    request = simulation_request(
        {"trace_id": 1, "cluster": {"n_gpus": 16, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8}}
    )
    assert request.cluster.rollout_replicas == 2
    out = replay(_steps(), request)
    d = result_dict(out)["a"]
    assert d["unused_gpus"] == 8 and "8 of 16 GPUs are never used" in d["warnings"][0]
    full = result_dict(replay(_steps(), simulation_request({"trace_id": 1, "cluster": {"n_gpus": 16}})))["a"]
    assert full["unused_gpus"] == 0 and full["warnings"] == []


def test_every_form_combination_runs():
    p = presets()
    steps = _steps()
    base = form_defaults(p, [0, 1])
    for a, b, bal in itertools.product(p["policies"], [None, *p["policies"]], p["balancing"]):
        values = {**base, "policy_a": a, "policy_b": b, "balancing": bal}
        out = result_dict(replay(steps, simulation_request(simulation_body(1, values))))
        assert out["a"]["makespan_s"] > 0 and out["a"]["unused_gpus"] == 0, (a, b, bal)
        if b is not None:
            assert out["b"]["unused_gpus"] == 0 and out["compare"]["total"]["speedup"] is not None


@pytest.mark.parametrize("gpu", list(GPU_PRESETS))
def test_every_gpu_and_model_preset_runs_with_the_defaults_or_is_refused(gpu):
    """Every preset pair replays on the default budget, unless its GPUs cannot hold the
    model's training state (beside at least one rollout GPU for the disaggregated
    policy compared by default): then the request is refused naming the budget."""
    steps = _steps(1)
    ran = 0
    for model in MODEL_PRESETS:
        values = {**form_defaults(presets(), [0]), "gpu": gpu, "model": model}
        rollout_gpus = 1 if POLICIES[DEFAULT_COMPARE].disaggregated else 0
        if min_training_gpus(MODEL_PRESETS[model], GPU_PRESETS[gpu]) + rollout_gpus > DEFAULT_N_GPUS:
            with pytest.raises(InfeasibleLayout, match=r"^cluster\.n_gpus: training .* needs at least"):
                simulation_request(simulation_body(1, values))
            continue
        request = simulation_request(simulation_body(1, values))
        for c in (request.cluster, request.compare_cluster):
            assert c is not None and layout_shortfall(c, request.model, request.limits) is None, (gpu, model)
        out = result_dict(replay(steps, request))
        assert out["a"]["makespan_s"] > 0 and out["b"]["makespan_s"] > 0, (gpu, model)
        ran += 1
    assert ran >= 5  # the small and mid-size models fit every preset GPU


@pytest.mark.parametrize("n", [1, 2, 3, 8, 12, 64])
def test_layouts_fit_the_budget(n):
    m, g = MODEL_PRESETS["Qwen2.5-7B"], GPU_PRESETS["H100"]
    for kind, spec in POLICIES.items():
        if spec.disaggregated and n < 2:
            continue
        c = ClusterConfig(n_gpus=n, **layout_for(spec.disaggregated, n, m, g))
        c.check_fits(spec.disaggregated)
        r = simulate(_steps(1), c, m, EngineLimits(), Policy(kind=kind))
        assert r.unused_gpus == unused_gpus(c, spec.disaggregated)
        assert r.unused_gpus <= (1 if spec.disaggregated else 0)
