"""Policies, training stages, timeline accounting, comparison and published behaviour."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
import pytest

from core.simulator import (
    MODEL_PRESETS,
    ClusterConfig,
    EngineLimits,
    Policy,
    StepWorkload,
    chrome_trace,
    compare,
    simulate,
)
from core.simulator.config import GPU_PRESETS, ModelConfig
from core.simulator.training import sequence_flops, training_pass
from core.workload.synthetic import packed_length_rows

MODEL = MODEL_PRESETS["Qwen2.5-7B"]


def long_tailed(steps=4, groups=128, n=8, seed=3, cap=16384):
    out = []
    for rows in packed_length_rows(steps, groups, n, seed=seed, max_response_len=cap):
        out.append(StepWorkload.from_groups(rows[0]["step"], [r["input"] for r in rows], [r["output"] for r in rows]))
    return out


def test_training_pass_time_by_hand():
    model = ModelConfig(params=1e9, layers=10, hidden=1000)
    cluster = ClusterConfig(gpu=GPU_PRESETS["H100"], n_gpus=2, train_dp=2, train_tp=1, train_mfu=0.5)
    lens = np.array([1000, 3000, 2000, 2000])
    f = lambda s: 6 * 1e9 * s + 6 * 10 * 1000 * s * s  # noqa: E731
    assert sequence_flops(lens, model).tolist() == pytest.approx([f(s) for s in lens])
    # two ranks: Amdahl's serial fraction slows each by 1 + s; not colocated: no overhead
    rate = 989e12 * 0.5 / (1 + cluster.train_serial_fraction)
    # balancing none: contiguous halves [1000, 3000] and [2000, 2000]
    p = training_pass(lens, model, cluster, Policy(), forward_only=False)
    a, b = (f(1000) + f(3000)) / rate, (f(2000) * 2) / rate
    assert p.seconds == pytest.approx(max(a, b))
    assert p.busy.tolist() == pytest.approx([a, b])
    assert p.idle.tolist() == pytest.approx([max(a, b) - a, max(a, b) - b])
    fwd = training_pass(lens, model, cluster, Policy(), forward_only=True)
    assert fwd.seconds == pytest.approx(p.seconds / 3)
    # two mini-batches, each synchronised: [1000 | 3000] then [2000 | 2000], two epochs
    p2 = training_pass(lens, model, cluster, Policy(minibatches=2, ppo_epochs=2), forward_only=False)
    assert p2.seconds == pytest.approx(2 * (f(3000) + f(2000)) / rate)
    # colocated with rollout: every pass pays the colocation overhead
    colo = training_pass(lens, model, cluster, Policy(), forward_only=False, colocated=True)
    assert colo.seconds == pytest.approx(p.seconds * cluster.colocation_overhead)
    assert colo.busy.tolist() == pytest.approx((p.busy * cluster.colocation_overhead).tolist())


# verl's fully async table (Qwen2.5-Math-7B, H20, 512 prompts x 16, 32 prompts a
# mini-batch), update_actor as published since verl PR #4307: (trainer-alone GPUs, its
# update, colocated GPUs, the colocated update). Its 64/128 pair (113.16, 113.81 s) is left
# out: at 4 samples a rank per mini-batch the draw's imbalance, not the scaling, sets it.
VERL_PAIRS = ((16, 313.81, 32, 269.80), (32, 156.98, 64, 133.41))


@pytest.mark.parametrize(("apart", "t_apart", "colocated_gpus", "t_colocated"), VERL_PAIRS)
def test_halving_the_trainer_reproduces_verl_update_times(apart, t_apart, colocated_gpus, t_colocated):
    """A trainer of half the GPUs beside the rollout against the colocated one: perfect DP
    scaling without overhead would make its update twice the colocated one; the defaults
    reproduce each published ratio within 10 %. Qwen2.5-7B's shape (Math is the same
    network), lengths from a seeded long-tailed draw up to 28K, ranks balanced by tokens
    (lpt) as verl's dynamic batching does, so the ratio measures the scaling model rather
    than one draw's imbalance."""
    model = MODEL_PRESETS["Qwen2.5-7B"]
    rng = np.random.default_rng(0)
    lens = np.minimum(200 + rng.lognormal(8.0, 0.8, 512 * 16), 28_000).astype(np.int64)
    policy = Policy(minibatches=16, balancing="lpt")
    colocated = ClusterConfig(
        gpu=GPU_PRESETS["H20"],
        n_gpus=colocated_gpus,
        rollout_replicas=colocated_gpus // 4,
        rollout_tp=4,
        train_dp=colocated_gpus,
    )
    trainer = dataclasses.replace(colocated, rollout_replicas=apart // 4, train_dp=apart)
    t_col = training_pass(lens, model, colocated, policy, forward_only=False, colocated=True).seconds
    t_half = training_pass(lens, model, trainer, policy, forward_only=False, colocated=False).seconds
    assert t_half / t_col == pytest.approx(t_apart / t_colocated, rel=0.10)
    # the old model (perfect scaling, no overhead) is what the defaults replace
    ideal = {"train_serial_fraction": 0.0, "colocation_overhead": 1.0}
    old_col = training_pass(lens, model, dataclasses.replace(colocated, **ideal), policy, forward_only=False).seconds
    old_half = training_pass(lens, model, dataclasses.replace(trainer, **ideal), policy, forward_only=False).seconds
    assert old_half / old_col == pytest.approx(2.0, rel=0.02)


def test_sync_step_is_the_sum_of_its_stages_and_gpu_time_adds_up():
    ws = long_tailed(steps=2, groups=32)
    ws[0].reward_time_by_rank = np.array([3.0, 7.5])
    cluster = ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8)
    seen = []
    r = simulate(ws, cluster, MODEL, EngineLimits(), Policy(), progress=seen.append)
    assert seen[-1] == 1.0 and seen == sorted(seen)
    s0, s1 = r.steps
    assert s0.stages["reward"] == 7.5 and s1.stages["reward"] == 0.0
    for s in r.steps:
        assert s.end - s.start == pytest.approx(sum(s.stages.values()))
    assert s1.start == pytest.approx(s0.end) and r.makespan == pytest.approx(s1.end)
    # every GPU-second is either busy or idle for a named cause
    total = sum(r.idle_gpu_s.values()) + r.busy_gpu_s
    assert total == pytest.approx(cluster.n_gpus * r.makespan, rel=1e-9)
    for lane in r.lanes:
        covered = sum(b - a for a, b, *_ in lane.intervals)
        assert covered == pytest.approx(r.makespan, rel=1e-9)
    assert r.idle_gpu_s["reward_wait"] == pytest.approx(7.5 * cluster.n_gpus)
    assert r.idle_gpu_s["rollout_tail"] > 0
    assert r.throughput_tokens_per_s_per_gpu == pytest.approx(
        sum(int(w.response_len.sum()) for w in ws) / r.makespan / cluster.n_gpus
    )
    d = orjson.loads(orjson.dumps(r.to_dict()))
    assert d["makespan_s"] == pytest.approx(r.makespan) and len(d["steps"]) == 2 and d["timeline"]


def test_chrome_trace_has_one_complete_event_per_interval():
    ws = long_tailed(steps=1, groups=16)
    r = simulate(
        ws, ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8), MODEL, EngineLimits(), Policy()
    )
    trace = orjson.loads(orjson.dumps(chrome_trace(r)))
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 0]
    assert len(xs) == sum(len(l.intervals) for l in r.lanes)
    assert all(e["dur"] >= 0 and "ts" in e for e in xs)
    names = {e["name"] for e in xs}
    assert "rollout" in names and "update_actor" in names


def test_compare_reports_speedup_and_where_time_went():
    ws = long_tailed(steps=3, groups=64)
    cluster = ClusterConfig(n_gpus=16, rollout_replicas=4, rollout_tp=4, train_dp=16)
    a = simulate(ws, cluster, MODEL, EngineLimits(), Policy("sync"))
    b = simulate(ws, cluster, MODEL, EngineLimits(), Policy("partial", params={"over_provision": 1.5}))
    c = compare(a, b)
    assert c["total"]["speedup"] == pytest.approx(a.makespan / b.makespan)
    assert [p["step"] for p in c["per_step"]] == [0, 1, 2]
    assert c["per_step"][0]["speedup"] == pytest.approx(a.steps[0].step_time / b.steps[0].step_time)
    assert c["stages_s"]["rollout"]["delta"] == pytest.approx(b.stage_totals()["rollout"] - a.stage_totals()["rollout"])
    assert c["idle_gpu_s"]["rollout_tail"]["delta"] < 0  # partial rollout cuts the tail


# --------------------------------------------------------------------------- published behaviour


def test_long_tail_partial_rollout_and_one_step_off_beat_sync():
    ws = long_tailed()
    n = 16
    colocated = ClusterConfig(n_gpus=n, rollout_replicas=4, rollout_tp=4, train_dp=16)
    split = ClusterConfig(n_gpus=n, rollout_replicas=2, rollout_tp=4, train_dp=8)  # same 16 GPUs
    sync = simulate(ws, colocated, MODEL, EngineLimits(), Policy("sync"))
    partial = simulate(ws, colocated, MODEL, EngineLimits(), Policy("partial", params={"over_provision": 1.5}))
    off = simulate(ws, split, MODEL, EngineLimits(), Policy("one_step_off"))
    assert partial.makespan < sync.makespan
    assert off.makespan < sync.makespan
    # every step of the partial run still trains a full batch of groups
    assert all(s.n_samples == ws[0].n_samples for s in partial.steps)
    # the synchronous rollout's long tail: its last 10% of samples take a large share
    assert np.mean([s.rollout["last10pct_share"] for s in sync.steps]) > 0.3


@pytest.mark.parametrize("seed", [3, 4])
def test_streaming_asynchrony_beats_one_step_off_on_a_long_tail(seed):
    """verl reports fully async 2.35-2.67x over colocated sync where one-step-off gains
    23-40%; Laminar reports beating such asynchronous systems. On 16 GPUs (TP1 replicas;
    disaggregated: 8 + 8) with every policy's defaults: laminar < async < one_step_off < sync."""
    ws = long_tailed(seed=seed)
    colocated = ClusterConfig(n_gpus=16, rollout_replicas=16, rollout_tp=1, train_dp=16)
    split = ClusterConfig(n_gpus=16, rollout_replicas=8, rollout_tp=1, train_dp=8)
    t = {
        kind: simulate(ws, split if kind != "sync" else colocated, MODEL, EngineLimits(), Policy(kind)).makespan
        for kind in ("sync", "one_step_off", "async", "laminar")
    }
    assert t["laminar"] < t["async"] < t["one_step_off"] < t["sync"]
    assert t["sync"] / t["async"] > 2.0


@pytest.mark.parametrize("seed", range(4))
def test_kk_balancing_never_loses_to_none(seed):
    ws = long_tailed(steps=2, groups=64, seed=seed)
    cluster = ClusterConfig(n_gpus=16, rollout_replicas=4, rollout_tp=4, train_dp=16)
    for mb in (1, 4):
        none = simulate(ws, cluster, MODEL, EngineLimits(), Policy(balancing="none", minibatches=mb))
        kk = simulate(ws, cluster, MODEL, EngineLimits(), Policy(balancing="kk", minibatches=mb))
        for a, b in zip(none.steps, kk.steps):
            assert b.stages["update_actor"] <= a.stages["update_actor"] + 1e-9
            assert b.idle_gpu_s.get("dp_imbalance", 0.0) <= a.idle_gpu_s.get("dp_imbalance", 0.0) + 1e-9


def test_more_replicas_plateau_once_the_longest_sample_dominates():
    from core.simulator.predictor import roofline_coefficients

    ws = long_tailed(steps=2)
    times = {}
    for n in (32, 64, 128):
        cluster = ClusterConfig(n_gpus=n, rollout_replicas=n // 4, rollout_tp=4, train_dp=n)
        r = simulate(ws, cluster, MODEL, EngineLimits(), Policy())
        times[n] = [s.stages["rollout"] for s in r.steps]
    total = {n: sum(t) for n, t in times.items()}
    assert total[32] >= total[64] >= total[128]
    assert total[32] / total[128] < 1.05  # 4x the GPUs, under 5% faster
    # the floor: the step's longest sample decoded alone, from its prompt onwards
    c = roofline_coefficients(ClusterConfig(rollout_tp=4), MODEL)
    for w, t in zip(ws, times[128]):
        i = int(np.argmax(w.response_len))
        p, n = int(w.prompt_len[i]), int(w.response_len[i])
        alone = c.prefill_a + c.prefill_b * p + c.prefill_c * p * p
        alone += sum(c.decode_a + c.decode_b * (p + 1 + k) + c.decode_c for k in range(n - 1))
        assert alone <= t < 1.5 * alone


def test_async_staleness_bound():
    ws = long_tailed(steps=4, groups=32)
    split = ClusterConfig(n_gpus=16, rollout_replicas=2, rollout_tp=4, train_dp=8)
    strict = simulate(ws, split, MODEL, EngineLimits(), Policy("async", params={"staleness_threshold": 0}))
    loose = simulate(ws, split, MODEL, EngineLimits(), Policy("async", params={"staleness_threshold": 0.5}))
    assert all(s.rollout["stale_groups"] == 0 for s in strict.steps)
    assert any(s.rollout["stale_groups"] > 0 for s in loose.steps)
    assert loose.makespan <= strict.makespan
    assert all(s.rollout["groups_consumed"] == 32 for s in loose.steps + strict.steps)


def test_longest_first_dispatch_beats_round_robin_on_skewed_groups():
    # groups alternate long/short: round robin puts every long group on replica 0
    prompts = [100] * 8
    resp = [[4000] * 4 if g % 2 == 0 else [100] * 4 for g in range(8)]
    ws = [StepWorkload.from_groups(0, prompts, resp)]
    cluster = ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8)
    limits = EngineLimits(max_running_seqs=4)
    rr = simulate(ws, cluster, MODEL, limits, Policy(dispatch="round_robin"))
    lf = simulate(ws, cluster, MODEL, limits, Policy(dispatch="longest_first"))
    assert lf.steps[0].stages["rollout"] < 0.75 * rr.steps[0].stages["rollout"]


def test_disaggregated_policy_needs_both_pools():
    with pytest.raises(ValueError, match="^cluster.n_gpus"):
        simulate(
            long_tailed(steps=1, groups=8),
            ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8),
            MODEL,
            EngineLimits(),
            Policy("one_step_off"),
        )
