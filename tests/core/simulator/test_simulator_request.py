"""The typed replay request (core/simulator/request.py) and the memory feasibility of a
layout (core/simulator/feasibility.py): built once, stored and decoded unchanged, and
layouts that cannot hold the model refused or avoided."""

from __future__ import annotations

import dataclasses

import pytest

from backend.jobs.simulations import simulation_request
from core.simulator import GPU_PRESETS, MODEL_PRESETS, ClusterConfig, EngineLimits
from core.simulator.advisor import default_grid
from core.simulator.feasibility import (
    InfeasibleLayout,
    layout_shortfall,
    layout_warnings,
    min_training_gpus,
    rollout_shortfall,
    training_shortfall,
)
from core.simulator.request import CalibrateOn, MonteCarlo, ReplayRequest, RollingOrigin

H100, A100 = GPU_PRESETS["H100"], GPU_PRESETS["A100"]
Q7, Q32, Q72 = (MODEL_PRESETS[f"Qwen2.5-{n}B"] for n in (7, 32, 72))

BODIES = [
    {"trace_id": 1},
    {"trace_id": 1, "compare_policy": "one_step_off", "model": "qwen2.5-14b", "cluster": {"n_gpus": 16}},
    {
        "trace_id": 2,
        "policy": {"kind": "partial", "params": {"over_provision": 1.5}},
        "compare_policy": {"kind": "async", "balancing": "kk"},
        "calibrate": {"fit_steps": [0, 2]},
        "steps": [0, 5],
        "uncertainty": {"runs": 50, "seed": 7},
        "rolling_origin": {"window": 3},
        "forecast": True,
    },
    {"trace_id": 3, "calibrate": False, "uncertainty": False, "cluster": {"n_gpus": 4, "rollout_tp": 2}},
]


@pytest.mark.parametrize("body", BODIES)
def test_a_request_round_trips_through_its_job_row(body):
    request = simulation_request(body)
    stored = request.to_json()
    assert ReplayRequest.from_json(stored) == request
    assert ReplayRequest.from_json(stored).to_json() == stored


def test_the_request_is_typed():
    request = simulation_request(BODIES[2])
    assert request.calibrate == CalibrateOn((0, 2)) and request.steps == (0, 5)
    assert request.uncertainty == MonteCarlo(50, 7) and request.rolling_origin == RollingOrigin(3)
    assert request.forecast is not None and request.forecast.workloads >= 1
    assert request.policy.params["over_provision"] == 1.5  # resolved by the registry, defaults filled
    assert request.compare_cluster is not None and request.compare_cluster.n_gpus == request.cluster.n_gpus
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.steps = None  # type: ignore[misc]


def test_older_job_rows_decode_as_they_ran():
    stored = simulation_request({"trace_id": 1, "compare_policy": "one_step_off"}).to_json()
    old = {k: v for k, v in stored.items() if k not in ("compare_cluster", "uncertainty", "forecast", "rolling_origin")}
    request = ReplayRequest.from_json(old)
    assert request.compare_cluster == request.cluster  # before B had its own layout: A's
    assert request.uncertainty == MonteCarlo(None, 0)  # before it was optional: on
    assert request.forecast is None and request.rolling_origin is None
    with pytest.raises(ValueError, match="^version: replay request version 9"):
        ReplayRequest.from_json({**stored, "version": 9})


# --------------------------------------------------------------------------- feasibility


def test_training_state_is_sharded_over_the_training_gpus():
    # 72.7e9 parameters x 16 bytes over 4 GPUs = 290.8 GB each, on 80 GB GPUs of which 90% hold it
    short = training_shortfall(Q72, H100, 4, 1)
    assert short is not None and short.needed_per_gpu == pytest.approx(72.7e9 * 16 / 4)
    assert short.available_per_gpu == pytest.approx(0.9 * 80e9)
    assert training_shortfall(Q72, H100, 16, 1) is not None  # 72.7 GB each: no room left for activations
    assert training_shortfall(Q72, H100, 17, 1) is None
    assert min_training_gpus(Q72, H100) == 17 and min_training_gpus(Q7, H100) == 2
    assert training_shortfall(Q7, H100, 1, 1) is not None and training_shortfall(Q7, H100, 2, 1) is None


def test_a_rollout_replica_holds_the_weights_and_a_minimal_kv_cache():
    assert rollout_shortfall(Q72, H100, 1, EngineLimits()) is not None  # 145 GB of weights on one GPU
    # TP2: 72.7 GB of weights and 0.7 GB of KV per GPU, over the 72 GB the engine may use
    assert rollout_shortfall(Q72, H100, 2, EngineLimits()) is not None
    assert rollout_shortfall(Q72, H100, 4, EngineLimits()) is None
    assert rollout_shortfall(Q32, H100, 1, EngineLimits(gpu_memory_fraction=0.5)) is not None
    assert layout_shortfall(ClusterConfig(gpu=H100, n_gpus=8, rollout_tp=2, train_dp=8), Q7, EngineLimits()) is None


def test_an_impossible_automatic_layout_is_refused_saying_why():
    with pytest.raises(InfeasibleLayout) as err:
        simulation_request({"trace_id": 1, "model": "qwen2.5-72b", "cluster": {"n_gpus": 4}})
    msg = str(err.value)
    assert msg.startswith("cluster.n_gpus: training Qwen2.5-72B on DP4 × TP1")
    assert "290.8 GB per GPU" in msg and "72.0 GB" in msg and "at least 17 GPUs" in msg


@pytest.mark.parametrize(
    "cluster, field",
    [
        ({"n_gpus": 32, "train_dp": 4}, "cluster.train_dp"),  # 72B sharded over 4 GPUs only
        ({"n_gpus": 32, "rollout_tp": 1}, "cluster.rollout_tp"),  # 145 GB of weights on one GPU
    ],
)
def test_an_impossible_explicit_layout_names_its_field(cluster, field):
    with pytest.raises(InfeasibleLayout, match=f"^{field}: "):
        simulation_request({"trace_id": 1, "model": "qwen2.5-72b", "cluster": cluster})


def test_an_automatic_disaggregated_split_gives_training_what_it_needs():
    """32B on 10 H100s: half the budget cannot train it (105 GB per GPU); a smaller rollout
    pool leaves training the 8 GPUs it needs."""
    request = simulation_request(
        {"trace_id": 1, "model": "qwen2.5-32b", "policy": "one_step_off", "cluster": {"n_gpus": 10}}
    )
    c = request.cluster
    assert layout_shortfall(c, request.model, request.limits) is None
    assert c.rollout_gpus + c.train_gpus <= 10 and c.train_gpus >= min_training_gpus(Q32, H100) == 8


def test_gpus_a_layout_leaves_idle_are_warned():
    """9 A100s for a 32B model: rollout 4 x TP2 leaves one GPU idle in every rollout (7
    cannot train it: 75 GB of training state per GPU)."""
    with pytest.raises(InfeasibleLayout, match="at least 8 GPUs"):
        simulation_request({"trace_id": 1, "model": "qwen2.5-32b", "cluster": {"gpu": "A100", "n_gpus": 7}})
    request = simulation_request({"trace_id": 1, "model": "qwen2.5-32b", "cluster": {"gpu": "A100", "n_gpus": 9}})
    c = request.cluster
    assert (c.rollout_replicas, c.rollout_tp, c.train_dp) == (4, 2, 9)
    (warning,) = layout_warnings(c, disaggregated=False)
    assert warning.startswith("rollout uses 8 of the 9 GPUs (4 × TP2): 1 GPU idle")
    assert layout_warnings(dataclasses.replace(c, n_gpus=8, train_dp=8), disaggregated=False) == []


def test_the_advisor_sweeps_only_layouts_that_hold_the_model():
    grid = default_grid(8, Q32, H100)
    assert grid, "some layouts of 8 H100s hold a 32B model"
    for c in grid:
        layout = ClusterConfig(
            gpu=H100,
            n_gpus=8,
            rollout_replicas=c["rollout_replicas"],
            rollout_tp=c["rollout_tp"],
            train_dp=c["train_dp"],
        )
        assert layout_shortfall(layout, Q32, EngineLimits()) is None, c["label"]
    # every disaggregated split that leaves training fewer than 7 GPUs is left out
    assert all(c["train_dp"] >= 7 for c in grid)
    assert default_grid(4, Q72, H100) == []
