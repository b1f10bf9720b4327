"""The partial and asynchronous policies' mechanisms on workloads small enough to follow by
hand (APRIL's over-provisioned rollout, verl's fully async trainer, Laminar), and their
invariants on the shared PolyTrace fixtures.

Hand-checked workloads use an engine whose decode iteration takes exactly 1 s whatever
runs, and whose prefill costs nothing (or 1 ms per token where recomputation must
show): a sample of L response tokens then finishes L - 1 s after it was admitted (its
first token comes from the prefill)."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, simulate
from core.simulator.config import GPU_PRESETS
from core.simulator.defaults import layout_for
from core.simulator.policies import POLICIES, make_policy
from core.simulator.policies.laminar import LaminarParams
from core.simulator.policies.partial import PartialParams
from core.simulator.policies.verl_async import AsyncParams
from core.simulator.predictor import EngineCoefficients
from core.simulator.training import training_pass, weight_sync_seconds
from core.simulator.workload import workload_from_columns
from core.workload.polytrace_rows import multiturn_rows_to_columns, packed_rows_to_columns

MODEL = MODEL_PRESETS["Qwen2.5-7B"]
ONE_SECOND = EngineCoefficients(1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
LIMITS = EngineLimits(max_running_seqs=256, kv_cache_tokens=10**7)
ONE_REPLICA = ClusterConfig(n_gpus=4, rollout_replicas=1, rollout_tp=4, train_dp=4)
SPLIT = ClusterConfig(n_gpus=8, rollout_replicas=1, rollout_tp=4, train_dp=4)
PROMPT = 10


def singles(steps: list[list[int]]) -> list[StepWorkload]:
    """One prompt group of one sample per response length."""
    return [StepWorkload.from_groups(s, [PROMPT] * len(r), [[x] for x in r]) for s, r in enumerate(steps)]


def lane_labels(result, role: str, state: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for lane in result.lanes:
        if lane.role == role:
            for a, b, st, label, _ in lane.intervals:
                if st == state:
                    out[label] = out.get(label, 0.0) + (b - a) * len(lane.gpus)
    return out


# --------------------------------------------------------------------------- APRIL


def test_april_defaults_are_the_papers():
    assert PartialParams().over_provision == 2.0  # APRIL: "oversample about 2x the rollout batch"
    assert PartialParams().partial_rollout is True
    assert "2509.18521" in POLICIES["partial"].paper


def test_april_aborts_at_the_target_and_resumes_the_partial_responses():
    # 2 groups trained per step out of 4 launched; the two 100-token samples are aborted
    # when the second short one ends (t = 7) with 1 + 7 = 8 tokens, and resumed first
    ws = singles([[5, 8, 100, 100], [5, 8, 100, 100]])
    policy = Policy("partial", params={"finished_groups": 2, "over_provision": 2.0})
    r = simulate(ws, ONE_REPLICA, MODEL, LIMITS, policy, coefficients=ONE_SECOND)
    s0, s1 = r.steps
    assert s0.stages["rollout"] == pytest.approx(7.0)
    assert (s0.rollout["groups_launched"], s0.rollout["groups_finished"], s0.rollout["groups_carried"]) == (4, 2, 2)
    assert s0.rollout["recompute_tokens"] == 0
    # step 1: the two carried samples re-prefill prompt + 8 generated tokens, 2 fresh join them
    assert s1.rollout["recompute_tokens"] == 2 * (PROMPT + 8)
    assert s1.rollout["groups_launched"] == 4 and s1.stages["rollout"] == pytest.approx(7.0)
    assert s0.n_samples == s1.n_samples == 2
    dropped = simulate(
        ws, ONE_REPLICA, MODEL, LIMITS, dataclasses.replace(policy, params={**policy.params, "partial_rollout": False})
    )
    assert dropped.steps[1].rollout["recompute_tokens"] == 0 and dropped.steps[1].rollout["groups_launched"] == 4


def test_april_recompute_is_busy_time_on_the_rollout_replicas():
    coeffs = dataclasses.replace(ONE_SECOND, prefill_b=1e-3)
    ws = singles([[5, 8, 100, 100], [5, 8, 100, 100]])
    r = simulate(ws, ONE_REPLICA, MODEL, LIMITS, Policy("partial", params={"finished_groups": 2}), coefficients=coeffs)
    busy = lane_labels(r, "shared", "busy")
    # b' x (prompt + 8) per carried sample, on the 4 GPUs of the replica
    assert busy["recompute"] == pytest.approx(4 * 2 * 1e-3 * (PROMPT + 8))
    assert r.steps[1].rollout["recompute_s"] == pytest.approx(2 * 1e-3 * (PROMPT + 8))


# --------------------------------------------------------------------------- verl fully async


def test_async_defaults_are_verls():
    p = AsyncParams()
    assert (p.staleness_threshold, p.trigger_parameter_sync_step, p.require_batches) == (0.1, 4, 1)
    assert p.partial_rollout is True and p.use_rollout_log_probs is True


def _async(ws, **params):
    return simulate(ws, SPLIT, MODEL, LIMITS, Policy("async", params=params), coefficients=ONE_SECOND)


def test_async_quota_interrupts_and_resumes_at_a_sync():
    # 4 groups a step; staleness 0.5: 6 launched after the start (step 0's 4, step 1's first 2).
    # The trainer takes four 5-token groups by t ~ 4; the 50-token one is in flight at the sync
    ws = singles([[5, 5, 5, 50], [5, 5, 5, 5], [5, 5, 5, 5]])
    r = _async(ws, staleness_threshold=0.5)
    s0, s1 = r.steps[:2]
    assert s0.rollout["groups_launched"] == 6 and s0.rollout["groups_consumed"] == 4
    assert s0.rollout["groups_interrupted"] == 1 and s0.rollout["groups_queued"] == 1
    sync = weight_sync_seconds(MODEL, SPLIT)
    pause = s0.windows["weight_sync"][0]
    assert pause < 10 and s0.end == pytest.approx(pause + sync)  # interrupted, not drained
    # version 1: 6 - 1 in flight - 1 queued = 4 new; the interrupted one re-prefills what it had
    assert s1.rollout["groups_launched"] == 4 and s1.rollout["groups_resumed"] == 1
    assert s1.rollout["recompute_tokens"] > PROMPT and s1.rollout["stale_groups"] >= 1
    assert lane_labels(r, "train", "idle").get("weight_sync", 0.0) == 0.0


def test_async_without_partial_rollout_drains_before_the_sync():
    ws = singles([[5, 5, 5, 50], [5, 5, 5, 5], [5, 5, 5, 5]])
    r = _async(ws, staleness_threshold=0.5, partial_rollout=False)
    s0 = r.steps[0]
    sync = weight_sync_seconds(MODEL, SPLIT)
    # the 50-token sample, admitted at 0, ends at 49: the sync waits for it
    assert s0.end == pytest.approx(49.0 + sync)
    pause = s0.windows["weight_sync"][0]
    idle_sync = lane_labels(r, "train", "idle")["weight_sync"]
    assert idle_sync >= (49.0 - pause) * SPLIT.train_gpus - 1e-6
    assert all(s.rollout["recompute_tokens"] == 0 for s in r.steps)


def test_async_staleness_zero_is_on_policy_and_waits_at_the_bound():
    ws = singles([[5, 5, 5, 50], [5, 5, 5, 5], [5, 5, 5, 5]])
    r = _async(ws, staleness_threshold=0.0)
    assert all(s.rollout["stale_groups"] == 0 and s.rollout["groups_consumed"] == 4 for s in r.steps)
    assert r.steps[0].rollout["groups_launched"] == 4
    assert r.idle_gpu_s.get("staleness_wait", 0.0) > 0


def test_async_trains_each_step_in_local_updates_without_the_old_log_prob_pass():
    ws = singles([[30 + 7 * i for i in range(8)], [40] * 8])
    r = _async(ws, staleness_threshold=0.0, trigger_parameter_sync_step=4, require_batches=2)
    for w, s in zip(ws, r.steps):
        lens = w.total_len  # staleness 0: each step trains its own groups, in completion order
        chunks = np.array_split(np.sort(lens), 4)  # equal lengths finish in order of length
        policy = Policy("async", minibatches=2)
        want = sum(training_pass(c, MODEL, SPLIT, policy, forward_only=False).seconds for c in chunks)
        assert s.stages["update_actor"] == pytest.approx(want)
        assert s.stages["old_log_prob"] == 0.0
    with_pass = _async(ws, use_rollout_log_probs=False)
    assert all(s.stages["old_log_prob"] > 0 for s in with_pass.steps)


# --------------------------------------------------------------------------- Laminar


def _laminar(ws, cluster=SPLIT, coefficients=ONE_SECOND, limits=LIMITS, **params):
    return simulate(ws, cluster, MODEL, limits, Policy("laminar", params=params), coefficients=coefficients)


def test_laminar_is_registered_with_its_paper():
    spec = POLICIES["laminar"]
    assert spec.disaggregated and "2510.12633" in spec.paper
    assert {i.name for i in spec.param_infos} == {f.name for f in dataclasses.fields(LaminarParams)}


def test_laminar_rollout_runs_ahead_and_pulls_weights_from_the_relay():
    # one replica, one step's 2 groups per batch: batch 0 ends at 9 (a 10-token sample) and,
    # no newer weights existing yet, batch 1 starts at once; at 18 it loads version 1
    ws = singles([[5, 10], [5, 10], [5, 10]])
    r = _laminar(ws, batch_groups=2, repack=False)
    transfer = weight_sync_seconds(MODEL, SPLIT)
    pull = MODEL.weight_bytes / 25e9
    s0, s1, s2 = r.steps
    assert s0.start == 0.0 and s0.stages["rollout"] == pytest.approx(9.0)  # the trainer waited for batch 0
    assert s1.windows["reward"][0] == pytest.approx(max(18.0, s0.end))  # batch 1, generated with version 0
    assert s1.rollout["staleness_max"] == 1 and s0.rollout["staleness_max"] == 0
    assert s2.windows["reward"][0] == pytest.approx(27.0 + pull)  # batch 2 started after the pull
    for s in r.steps:  # the trainer only pushes to the master relay, once per update
        assert s.stages["weight_sync"] == pytest.approx(transfer)
    lane = next(lane for lane in r.lanes if lane.role == "rollout")
    pulls = [(a, b) for a, b, state, label, _ in lane.intervals if label == "weight_sync"]
    assert pulls[0] == pytest.approx((18.0, 18.0 + pull))  # loading version 1 from the relay
    assert lane_labels(r, "train", "idle").get("weight_sync", 0.0) == 0.0  # non-blocking


def test_laminar_staleness_bound_holds_the_rollout_back():
    ws = singles([[5, 10], [5, 10], [5, 10]])
    r = _laminar(ws, batch_groups=2, repack=False, max_staleness=0)
    transfer = weight_sync_seconds(MODEL, SPLIT)
    pull = MODEL.weight_bytes / 25e9
    s0, s1 = r.steps[:2]
    assert all(s.rollout["stale_groups"] == 0 for s in r.steps)
    # batch 1 may not start before version 1 reaches the relays, then loads it
    ready = s0.end + transfer
    assert s1.windows["reward"][0] == pytest.approx(ready + pull + 9.0)
    assert lane_labels(r, "rollout", "idle")["staleness_wait"] >= (ready - 9.0) * SPLIT.rollout_gpus - 1e-6


def test_laminar_repack_moves_tail_trajectories_and_frees_a_replica():
    # two replicas, each with a short and a 200-token sample: at t = 4 both run one
    # sample (<= 25% of 4 slots) with the same weights, so one takes the other's
    two = ClusterConfig(n_gpus=12, rollout_replicas=2, rollout_tp=4, train_dp=4)
    limits = EngineLimits(max_running_seqs=4, kv_cache_tokens=10**7)
    coeffs = dataclasses.replace(ONE_SECOND, prefill_b=1e-3)
    ws = singles([[5, 200, 5, 200], [5, 5, 5, 5], [5, 5, 5, 5]])
    on = _laminar(ws, two, coeffs, limits, batch_groups=2)
    off = _laminar(ws, two, coeffs, limits, batch_groups=2, repack=False)
    assert sum(s.rollout["repacks"] for s in on.steps) >= 1
    assert sum(s.rollout["repacks"] for s in off.steps) == 0
    assert lane_labels(on, "rollout", "busy").get("recompute", 0.0) > 0
    assert "recompute" not in lane_labels(off, "rollout", "busy")
    assert on.makespan < off.makespan


# --------------------------------------------------------------------------- shared fixtures


def _fixture(shared_fixtures, name: str) -> list[StepWorkload]:
    folder = shared_fixtures / "polytrace" / name
    rows = []
    for f in sorted(folder.glob("*_step_*.jsonl")):
        if not f.name.startswith("reward"):
            rows += [orjson.loads(line) for line in f.read_bytes().splitlines()]
    if name.startswith("search"):
        cols = multiturn_rows_to_columns(rows)
        return workload_from_columns(cols["samples"], cols["turns"], cols["tool_calls"])
    return workload_from_columns(packed_rows_to_columns(rows))


@pytest.mark.parametrize("name", ["verl_dapo_qwen2_5_32b", "search_r1_qwen2_5_7b"])
@pytest.mark.parametrize("kind", ["partial", "async", "laminar"])
def test_fixture_invariants(shared_fixtures, name, kind):
    """On 16 H100 with the budget's default layout: every step trains exactly its N groups;
    GPU-seconds add up; the trainer runs its updates one after another, so the makespan is
    at least their sum; laminar keeps every trajectory within its staleness bound."""
    ws = _fixture(shared_fixtures, name)
    spec = POLICIES[kind]
    cluster = ClusterConfig(n_gpus=16, **layout_for(spec.disaggregated, 16, MODEL, GPU_PRESETS["H100"]))
    r = simulate(ws, cluster, MODEL, EngineLimits(), make_policy(kind))
    for w, s in zip(ws, r.steps):
        n = s.rollout["groups_finished"] if kind == "partial" else s.rollout["groups_consumed"]
        assert n == w.n_groups
        assert all(v >= 0 for v in s.stages.values()) and s.step_time >= 0
    total = sum(r.idle_gpu_s.values()) + r.busy_gpu_s
    assert total == pytest.approx(cluster.n_gpus * r.makespan, rel=1e-9)
    assert r.makespan >= sum(s.stages["update_actor"] for s in r.steps) - 1e-9
    if kind == "laminar":
        bound = LaminarParams().max_staleness
        assert all(s.rollout["staleness_max"] <= bound for s in r.steps)
    assert any(s.rollout.get("stale_groups", 0) or s.rollout.get("groups_carried", 0) for s in r.steps)
