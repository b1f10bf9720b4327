"""The policies that model published rollout systems: divided (Seer), length_ranked
(StreamRL) and tail_batching (RollPacker), each on a workload whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, simulate
from core.simulator.policies import POLICIES
from core.simulator.policies.base import Env, rollout_batch
from core.simulator.policies.length_ranked import ranked_prediction
from core.simulator.predictor import roofline_coefficients
from tests.core.simulator.test_simulator_invariants import long_tailed

MODEL = MODEL_PRESETS["Qwen2.5-7B"]
COLOCATED = ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8)
SPLIT = ClusterConfig(n_gpus=16, rollout_replicas=2, rollout_tp=4, train_dp=8)


def env_for(kind: str, cluster=COLOCATED, limits=None, **params) -> Env:
    spec = POLICIES[kind]
    limits = limits or EngineLimits()
    return Env(
        cluster,
        MODEL,
        limits,
        Policy(kind=kind),
        roofline_coefficients(cluster, MODEL),
        limits.kv_capacity(cluster, MODEL),
        params=spec.resolve(params),
        rollout=spec.rollout,
    )


# --------------------------------------------------------------------------- divided


def test_divided_spreads_a_group_and_prefills_its_prompt_once_per_replica():
    # one group of 8 samples on 2 replicas with 4 slots each: 4 samples run on each
    w = StepWorkload.from_groups(0, [500], [[100] * 8])
    limits = EngineLimits(max_running_seqs=4)
    ro = rollout_batch(env_for("divided", limits=limits), w, keep_store=True)
    assert ro.stats["prefilled_tokens"] == 2 * 500
    static = rollout_batch(env_for("sync", limits=limits), w)
    assert static.stats["prefilled_tokens"] == 500  # the whole group on one replica
    assert ro.duration < 0.6 * static.duration  # both replicas work


def test_context_aware_order_starts_the_long_group_early():
    """Probes first: the long group's probe is still running when the short groups'
    probes finish, so its other samples go before the short groups' (FIFO would put
    them last, behind every short sample)."""
    short = [[300] * 4 for _ in range(20)]
    long = [[3000] * 4]
    w = StepWorkload.from_groups(0, [100] * 21, short + long)  # the long group is queued last
    limits = EngineLimits(max_running_seqs=4)
    aware = rollout_batch(env_for("divided", limits=limits), w)
    fifo = rollout_batch(env_for("divided", limits=limits, context_aware=False), w)
    assert aware.duration < 0.8 * fifo.duration


def test_divided_chunks_move_long_requests_off_a_loaded_replica():
    """Seer's divided rollout over a global KV pool: served first come, first served, one
    replica takes the four long samples and the other the short ones; chunked, the long
    ones' continuations spread over both, and each decodes fewer cached tokens per
    iteration. Chunks larger than every response change nothing."""
    w = StepWorkload.from_groups(0, [1000, 1000], [[30000] * 4, [500] * 4])
    limits = EngineLimits(max_running_seqs=4)

    def run(chunk_tokens):
        env = env_for("divided", limits=limits, context_aware=False, chunk_tokens=chunk_tokens, spec_tail_seqs=0)
        return rollout_batch(env, w)

    whole, chunked, one_chunk = run(0), run(4096), run(40000)
    assert chunked.duration < 0.99 * whole.duration
    assert one_chunk.duration == whole.duration and np.array_equal(one_chunk.completion, whole.completion)


def test_divided_speculates_in_the_tail():
    """Grouped speculative decoding of the tail (Seer; TLT reports 1.7-2.1x from tail
    speculation): the long-tailed step's rollout ends far sooner."""
    w = long_tailed(steps=1)[0]
    plain = rollout_batch(env_for("divided", chunk_tokens=0, spec_tail_seqs=0), w)
    spec = rollout_batch(env_for("divided", chunk_tokens=0), w)
    assert spec.duration < 0.8 * plain.duration
    assert np.array_equal(spec.stats["finished"], plain.stats["finished"])


def test_divided_replays_are_cached_apart_from_static_ones():
    w = StepWorkload.from_groups(0, [100] * 4, [[80, 900]] * 4)
    cache: dict = {}
    a = simulate([w], COLOCATED, MODEL, EngineLimits(), Policy(kind="sync"), rollout_cache=cache)
    b = simulate([w], COLOCATED, MODEL, EngineLimits(), Policy(kind="divided"), rollout_cache=cache)
    c = simulate([w], COLOCATED, MODEL, EngineLimits(), Policy(kind="divided"))
    assert len(cache) == 2 and b.makespan == c.makespan != a.makespan


# --------------------------------------------------------------------------- length_ranked


def test_ranker_quality_is_the_correlation_of_normal_scores():
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(6, 1, 20_000).astype(int)
    assert np.array_equal(ranked_prediction(lengths, 1.0, rng), lengths)
    for q in (0.0, 0.5, 0.8):
        pred = ranked_prediction(lengths, q, np.random.default_rng(1))
        assert sorted(pred) == sorted(lengths)  # the same values, re-ordered
        rho = np.corrcoef(np.argsort(np.argsort(pred)), np.argsort(np.argsort(lengths)))[0, 1]
        assert rho == pytest.approx(q, abs=0.03)


def test_length_ranked_oracle_balances_the_long_samples():
    # two long samples in one group: round robin by group puts both on one replica
    w = StepWorkload.from_groups(0, [100, 100], [[4000, 4000, 10, 10], [10, 10, 10, 10]])
    limits = EngineLimits(max_running_seqs=1)  # one at a time: a replica's samples queue
    oracle = rollout_batch(env_for("length_ranked", SPLIT, limits, ranker_quality=1.0), w)
    static = rollout_batch(env_for("one_step_off", SPLIT, limits), w)
    assert oracle.duration < 0.7 * static.duration


def test_length_ranked_is_seeded():
    w = StepWorkload.from_groups(0, [100] * 16, [list(np.arange(1, 9) * 97 % 1500 + 20)] * 16)
    limits = EngineLimits(max_running_seqs=8)
    runs = {
        seed: rollout_batch(env_for("length_ranked", SPLIT, limits, ranker_quality=0.0, seed=seed), w).duration
        for seed in (0, 1)
    }
    again = rollout_batch(env_for("length_ranked", SPLIT, limits, ranker_quality=0.0, seed=0), w).duration
    assert again == runs[0] and runs[0] != runs[1]
    spec = POLICIES["length_ranked"]
    assert spec.stochastic and {i.name: i.type for i in spec.param_infos}[spec.seed_param] == "integer"
    assert all(not s.stochastic for k, s in POLICIES.items() if k != "length_ranked")


# --------------------------------------------------------------------------- tail_batching


def two_groups_per_step(steps=4):
    """Per step 2 groups; group 1 of step 0 and of step 2 are long."""
    out = []
    for i in range(steps):
        long = i in (0, 2)
        out.append(StepWorkload.from_groups(i, [100, 100], [[200] * 4, [6000 if long else 300] * 4]))
    return out


def rounds(result):
    return [(s.step, s.rollout["round"], s.rollout["groups_launched"], s.n_samples) for s in result.steps]


def test_tail_batching_defers_the_unfinished_prompt_to_a_long_round():
    ws = two_groups_per_step()
    r = simulate(ws, COLOCATED, MODEL, EngineLimits(), Policy(kind="tail_batching", params={"over_provision": 1.5}))
    # short rounds launch 3 prompts and train the 2 that finish first; the long prompts
    # (step 0 and 2, group 1) wait until 2 are waiting, then run in a long round
    assert rounds(r) == [
        (0, "short", 3, 8),
        (1, "short", 3, 8),
        (2, "long", 2, 8),
        (3, "short", 2, 8),
    ]
    assert sum(s.n_samples for s in r.steps) == sum(w.n_samples for w in ws)
    sync = simulate(ws, COLOCATED, MODEL, EngineLimits(), Policy(kind="sync"))
    short = [s.stages["rollout"] for s in r.steps if s.rollout["round"] == "short"]
    assert max(short) < 0.2 * max(s.stages["rollout"] for s in sync.steps)


def test_tail_batching_oracle_does_not_launch_what_it_defers():
    ws = two_groups_per_step()
    params = {"over_provision": 1.5}
    spec = simulate(ws, COLOCATED, MODEL, EngineLimits(), Policy(kind="tail_batching", params=params))
    oracle = simulate(
        ws, COLOCATED, MODEL, EngineLimits(), Policy(kind="tail_batching", params={**params, "predictor": "oracle"})
    )
    assert [s.rollout["groups_deferred"] for s in oracle.steps][:2] == [1, 1]
    assert [s.rollout["groups_launched"] for s in oracle.steps][:2] == [2, 2]
    # the speculative round also decoded the long prompt until it stopped
    assert spec.steps[0].rollout["decoded_tokens"] > oracle.steps[0].rollout["decoded_tokens"]


def test_tail_batching_without_over_provisioning_is_sync():
    ws = two_groups_per_step()
    spec = POLICIES["tail_batching"]
    assert spec.equivalent_to(spec.resolve({"over_provision": 1.0})) == "sync"
    assert spec.equivalent_to(spec.resolve({})) is None
    a = simulate(ws, COLOCATED, MODEL, EngineLimits(), Policy(kind="sync"))
    b = simulate(ws, COLOCATED, MODEL, EngineLimits(), Policy(kind="tail_batching", params={"over_provision": 1.0}))
    assert [s.step_time for s in b.steps] == pytest.approx([s.step_time for s in a.steps], rel=1e-12)
    assert math.isclose(a.makespan, b.makespan, rel_tol=1e-12)


@pytest.mark.parametrize("kind", ["divided", "length_ranked", "tail_batching"])
def test_work_computed_in_forked_processes_gives_the_same_replay(kind, monkeypatch):
    from core.simulator import forked, parallel_rollouts
    from core.simulator.policies import tail_batching

    monkeypatch.setattr(forked, "MIN_SAMPLES", 0)
    forks: list[int] = []
    fork_map = forked.fork_map
    for where in (parallel_rollouts, tail_batching):  # they import it by name
        monkeypatch.setattr(
            where, "fork_map", lambda fn, n, w, progress: forks.append(n) or fork_map(fn, n, w, progress)
        )
    ws = two_groups_per_step(6)
    cluster = SPLIT if POLICIES[kind].disaggregated else COLOCATED
    runs = [simulate(ws, cluster, MODEL, EngineLimits(), Policy(kind=kind), workers=w) for w in (1, 2)]
    assert forks  # the second replay forked
    assert [s.step_time for s in runs[0].steps] == [s.step_time for s in runs[1].steps]
    assert [s.rollout for s in runs[0].steps] == [s.rollout for s in runs[1].steps]
    assert runs[0].idle_gpu_s == runs[1].idle_gpu_s
