"""Simulator configs: presets, JSON validation that names the field, derived sizes."""

from __future__ import annotations

import pytest

from core.simulator.config import (
    GPU_PRESETS,
    MODEL_PRESETS,
    ClusterConfig,
    EngineLimits,
    ModelConfig,
    Policy,
    config_from_dict,
    to_dict,
)
from core.simulator.policies import POLICIES, make_policy, policy_spec
from core.simulator.predictor import EngineCoefficients, roofline_coefficients


def test_presets_cover_common_gpus_and_models():
    for name in ("H100", "A100", "H800", "L40S"):
        g = GPU_PRESETS[name]
        assert g.peak_flops > 1e14 and g.mem_bandwidth > 5e11 and g.memory_bytes >= 40e9
    for name in ("Qwen2.5-7B", "Qwen2.5-14B", "Qwen2.5-32B", "Qwen2.5-VL-7B"):
        assert MODEL_PRESETS[name].params > 5e9
    q7 = MODEL_PRESETS["Qwen2.5-7B"]
    # 2 (K and V) x 28 layers x 4 KV heads x 128 dims x 2 bytes
    assert q7.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2


def test_from_dict_overrides_presets():
    c = ClusterConfig.from_dict({"gpu": "A100", "n_gpus": 16, "rollout_replicas": 4, "rollout_tp": 2})
    assert c.gpu.name == "A100" and c.n_gpus == 16 and c.rollout_gpus == 8
    c = ClusterConfig.from_dict({"gpu": {"preset": "H100", "memory_bytes": 94e9}})
    assert c.gpu.memory_bytes == 94e9 and c.gpu.peak_flops == GPU_PRESETS["H100"].peak_flops
    m = ModelConfig.from_dict({"preset": "Qwen2.5-32B", "layers": 10})
    assert m.layers == 10 and m.hidden == 5120
    assert ModelConfig.from_dict("Qwen2.5-14B") == MODEL_PRESETS["Qwen2.5-14B"]
    p = make_policy({"kind": "partial", "params": {"over_provision": 1.5}, "balancing": "kk"})
    assert (p.kind, p.params["over_provision"], p.balancing) == ("partial", 1.5, "kk")
    assert p.params["finished_groups"] is None  # every declared parameter, resolved


@pytest.mark.parametrize(
    "build,payload,field",
    [
        (ClusterConfig.from_dict, {"rollout_tp": 0}, "cluster.rollout_tp"),
        (ClusterConfig.from_dict, {"n_gpus": 2.5}, "cluster.n_gpus"),
        (ClusterConfig.from_dict, {"train_mfu": 1.5}, "cluster.train_mfu"),
        (ClusterConfig.from_dict, {"gpu": "TPU"}, "cluster.gpu"),
        (ClusterConfig.from_dict, {"gpu": {"peak_flops": 1e15}}, "cluster.gpu.mem_bandwidth"),
        (ClusterConfig.from_dict, {"colour": 1}, "cluster.colour"),
        (ModelConfig.from_dict, "GPT-9", "model"),
        (ModelConfig.from_dict, {"layers": "many"}, "model.layers"),
        (EngineLimits.from_dict, {"max_running_seqs": -3}, "limits.max_running_seqs"),
        (EngineLimits.from_dict, {"kv_cache_tokens": 0}, "limits.kv_cache_tokens"),
        (EngineLimits.from_dict, {"spec_accept": 0.5}, "limits.spec_accept"),
        (EngineLimits.from_dict, {"spec_cost": 0}, "limits.spec_cost"),
        (EngineLimits.from_dict, {"spec_tail_seqs": -1}, "limits.spec_tail_seqs"),
        (lambda kind: policy_spec(kind), "eventually", "policy.kind"),
        (Policy.from_dict, {"balancing": "random"}, "policy.balancing"),
        (Policy.from_dict, {"dispatch": "random"}, "policy.dispatch"),
        (make_policy, {"kind": "partial", "params": {"over_provision": 0.5}}, "policy.params.over_provision"),
        (make_policy, {"kind": "partial", "params": {"over_provision": True}}, "policy.params.over_provision"),
        (make_policy, {"kind": "sync", "params": {"staleness": 1}}, "policy.params.staleness"),
        (make_policy, {"kind": "async", "params": {"staleness": 1.5}}, "policy.params.staleness"),
        (make_policy, {"kind": "async", "params": []}, "policy.params"),
        (Policy.from_dict, {"over_provision": 0.5}, "policy.over_provision"),
        (Policy.from_dict, {"ref_pass": "yes"}, "policy.ref_pass"),
        (EngineCoefficients.from_dict, {"decode_a": 1}, "coefficients.decode_b"),
    ],
)
def test_bad_input_names_the_field(build, payload, field):
    with pytest.raises(ValueError) as exc:
        build(payload)
    assert str(exc.value).startswith(field)


def test_speculation_is_off_unless_the_limits_or_a_policy_turn_it_on():
    assert EngineLimits().speculation() == (0, 0.5)  # no sequence is ever in a tail of 0
    limits = EngineLimits.from_dict({"spec_tail_seqs": 8, "spec_accept": 3.0, "spec_cost": 1.5})
    assert limits.speculation() == (8, 0.5) and limits.speculation(32) == (32, 0.5)


def test_config_from_dict_round_trip():
    d = {
        "cluster": {"gpu": "H800", "n_gpus": 32, "rollout_replicas": 4, "rollout_tp": 4, "train_dp": 16},
        "model": "Qwen2.5-7B",
        "limits": {"max_running_seqs": 128},
        "policy": "one_step_off",
    }
    cluster, model, limits, policy = config_from_dict(d)
    assert policy_spec(policy.kind).disaggregated and limits.max_running_seqs == 128
    again = ClusterConfig.from_dict({k: v for k, v in to_dict(cluster).items()})
    assert again == cluster
    with pytest.raises(ValueError, match="^nodes"):
        config_from_dict({"nodes": 3})


def test_kv_capacity_and_pool_checks():
    cluster = ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8)
    model = MODEL_PRESETS["Qwen2.5-7B"]
    expect = (0.9 * 80e9 * 4 - 7.62e9 * 2) // (2 * 28 * 4 * 128 * 2)
    assert EngineLimits().kv_capacity(cluster, model) == expect
    assert EngineLimits(kv_cache_tokens=1234).kv_capacity(cluster, model) == 1234
    cluster.check_fits(disaggregated=False)
    with pytest.raises(ValueError, match="^cluster.n_gpus"):
        cluster.check_fits(disaggregated=True)  # 8 rollout + 8 training GPUs > 8


def test_roofline_coefficients_follow_the_hardware():
    model = MODEL_PRESETS["Qwen2.5-7B"]
    c1 = roofline_coefficients(ClusterConfig(rollout_tp=1), model)
    c4 = roofline_coefficients(ClusterConfig(rollout_tp=4), model)
    h100 = GPU_PRESETS["H100"]
    # decode reads the weights once per iteration; KV reads scale per cached token
    assert c1.decode_b == pytest.approx(model.kv_bytes_per_token / (h100.mem_bandwidth * 0.7))
    assert c1.decode_c == pytest.approx(2 * model.params / (h100.peak_flops * 0.5))
    assert c4.decode_b == pytest.approx(c1.decode_b / 4) and c4.prefill_b == pytest.approx(c1.prefill_b / 4)
    assert EngineCoefficients.from_dict(c1.to_dict()) == c1


def test_policy_registry_declares_each_policy():
    """Each policy module registers itself with a help line and its parameters, each
    declared with a type, a default that passes its own checks and a help line."""
    shared = set(to_dict(Policy()))
    for kind, spec in POLICIES.items():
        assert spec.kind == kind and spec.help
        defaults = spec.resolve({})
        for info in spec.param_infos:
            assert info.help and info.name not in shared
            assert getattr(defaults, info.name) == info.default
            for value in info.grid:
                assert getattr(spec.resolve({info.name: value}), info.name) == value
    infos = {i.name: i for i in POLICIES["partial"].param_infos}
    assert infos["over_provision"].type == "number" and infos["over_provision"].ge == 1.0
    assert infos["finished_groups"].type == "integer" and infos["finished_groups"].nullable
