"""The compiled event loop (`core/simulator/kernel.py`) against the Python engine it
replaces (`engine.ReplicaEngine`, the oracle): every registered policy gives the same
replay — every figure of its result, step by step, to 1e-9 relative — on a long-tailed
single-turn workload, a multi-turn one (tool waits, later turns arriving), one whose
KV cache is too small for its batch (preemption by recompute) and one with speculative
decoding of the replicas' tails on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.simulator import GPU_PRESETS, MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, simulate
from core.simulator import kernel as K
from core.simulator.array_cluster import ArrayCluster
from core.simulator.cluster import RolloutCluster
from core.simulator.defaults import layout_for
from core.simulator.policies import POLICIES
from core.simulator.policies.base import Env, reference_engine
from core.simulator.predictor import roofline_coefficients
from tests.core.simulator.test_simulator_invariants import long_tailed, multi_turn
from tests.core.simulator.test_simulator_sharing import CASES, COEF, _random_requests

WORKLOADS = {
    "long_tailed": (lambda: long_tailed(steps=4), EngineLimits()),
    "multi_turn": (lambda: multi_turn(steps=3), EngineLimits()),
    "tight_kv": (lambda: long_tailed(steps=3), EngineLimits(kv_cache_tokens=20_000)),
    # every replica decodes speculatively in its tail (the engine capability, on for all)
    "speculative": (lambda: long_tailed(steps=3), EngineLimits(spec_tail_seqs=16)),
}


def _flat(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _flat(v, f"{path}/{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _flat(v, f"{path}[{i}]")
    else:
        yield path, x


def _replay(kind: str, workload: str):
    make, limits = WORKLOADS[workload]
    model = MODEL_PRESETS["Qwen2.5-7B"]
    layout = layout_for(POLICIES[kind].disaggregated, 16, model, GPU_PRESETS["H100"])
    return simulate(make(), ClusterConfig(n_gpus=16, **layout), model, limits, Policy(kind=kind), workers=1)


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("kind", list(POLICIES))
def test_compiled_replay_equals_the_reference_engine(kind, workload):
    fast = dict(_flat(_replay(kind, workload).to_dict()))
    with reference_engine():
        ref = dict(_flat(_replay(kind, workload).to_dict()))
    assert not _differences(fast, ref), f"{kind} {workload}"


def _differences(got: dict, want: dict) -> list[str]:
    """Keys of two flattened results that differ (floats: by more than 1e-9 relative)."""
    if got.keys() != want.keys():
        return sorted(got.keys() ^ want.keys())
    out = []
    for key, w in want.items():
        g = got[key]
        if isinstance(w, float) and not (math.isnan(w) and math.isnan(g)):
            same = g == pytest.approx(w, rel=1e-9, abs=1e-12)
        else:
            same = g == w
        if not same:
            out.append(key)
    return out


def test_the_tight_workload_preempts_and_multi_turn_waits_for_tools():
    """The cases above exercise the paths they name (else equality proves little)."""
    tight = _replay("sync", "tight_kv")
    assert sum(s.rollout["preemptions"] for s in tight.steps) > 0
    turns = _replay("sync", "multi_turn")
    assert all(s.idle_gpu_s["tool_wait"] > 0 for s in turns.steps)


def test_speculation_in_the_tail_shortens_the_sync_replay():
    """The speculative case exercises speculation: the same steps end sooner (TLT,
    arXiv 2511.16665: speculating in the tail speeds RL training up 1.7-2.1x)."""
    plain = _replay("sync", "long_tailed").steps[:3]
    spec = _replay("sync", "speculative").steps
    assert all(b.rollout["time_s"] < 0.97 * a.rollout["time_s"] for a, b in zip(plain, spec, strict=True))


def test_static_dispatch_runs_on_the_compiled_loop_and_sharing_does_not():
    model = MODEL_PRESETS["Qwen2.5-7B"]
    cluster = ClusterConfig(n_gpus=16, rollout_replicas=4, rollout_tp=4, train_dp=16)
    env = Env(cluster, model, EngineLimits(), Policy(), roofline_coefficients(cluster, model), 1e6)
    assert isinstance(env.new_cluster(), ArrayCluster)
    assert isinstance(env.new_cluster(spread_groups=True), ArrayCluster)  # prompts shared, no work
    assert not isinstance(env.new_cluster(shared_queue=True), ArrayCluster)
    assert not isinstance(env.new_cluster(stealing=True, spread_groups=True), ArrayCluster)
    with reference_engine():
        assert not isinstance(env.new_cluster(), ArrayCluster)
        assert not isinstance(env.new_cluster(spread_groups=True), ArrayCluster)


def test_length_ranked_spreads_groups_and_preempts_on_the_tight_workload():
    """The policy comparison above covers shared prompts: a group's prompt is prefilled
    on several replicas but not for every sample, and the small KV cache preempts."""
    steps = long_tailed(steps=4)
    run = _replay("length_ranked", "long_tailed")
    for w, s in zip(steps, run.steps):
        first = np.r_[True, w.group[1:] != w.group[:-1]]
        assert w.prompt_len[first].sum() < s.rollout["prefilled_tokens"] < w.prompt_len.sum()
    tight = _replay("length_ranked", "tight_kv")
    assert sum(s.rollout["preemptions"] for s in tight.steps) > 0


@pytest.mark.parametrize("seed,replicas,max_running,kv_cap,max_prefill", CASES)
def test_shared_prompts_on_the_compiled_loop_equal_the_python_engine(seed, replicas, max_running, kv_cap, max_prefill):
    """Groups spread over replicas, each prefilling a group's prompt once where it has
    not yet (or in the same iteration), mixed with multi-turn trajectories; small KV
    caches preempt (a preempted request recomputes its whole context): `ArrayCluster`
    with shared prompts against `RolloutCluster(spread_groups=True)`, submitted in two
    calls."""
    rng = np.random.default_rng(seed)
    req, firsts = _random_requests(rng, 14)
    # most on replica 0, so that its KV cache runs short
    replica = np.where(rng.random(len(firsts)) < 0.7, 0, rng.integers(replicas, size=len(firsts)))
    half = len(firsts) // 2
    out = []
    for cls, sharing in ((RolloutCluster, {"spread_groups": True}), (ArrayCluster, {"shared_prompts": True})):
        limits = {"max_running": max_running, "kv_capacity": kv_cap, "max_prefill_tokens": max_prefill}
        rc = cls(replicas, COEF, **limits, **sharing)
        n = len(req["prefill"])
        rc.store.add(
            req["prefill"], req["context"], req["decode"], req["gap"], req["next"], list(range(n)), req["prefix"]
        )
        rc.submit(np.array(firsts[:half]), replica[:half], 0.0)
        rc.submit(np.array(firsts[half:]), replica[half:], 0.0)
        rc.run_all()
        stats = [(e.prefilled_tokens, e.decoded_tokens, e.preemptions, e.recompute_s) for e in rc.replicas]
        out.append((np.asarray(rc.store.end), list(rc.store.generated), stats, rc.busy_intervals(0.0, math.inf)))
    (end_py, gen_py, stats_py, busy_py), (end_c, gen_c, stats_c, busy_c) = out
    assert np.allclose(end_c, end_py, rtol=1e-9, atol=1e-12)
    assert gen_c == gen_py and sum(gen_c) == sum(req["decode"])
    assert [s[:3] for s in stats_c] == [s[:3] for s in stats_py]
    assert [s[3] for s in stats_c] == pytest.approx([s[3] for s in stats_py], rel=1e-9)
    assert np.allclose(np.concatenate([np.ravel(b) for b in busy_c]), np.concatenate([np.ravel(b) for b in busy_py]))
    if kv_cap == math.inf:  # nothing recomputed: some samples found their prompt prefilled
        assert sum(s[0] for s in stats_c) < sum(req["prefill"])
    if seed == 2:
        assert sum(s[2] for s in stats_c) > 0  # the case exercises preemption


def test_run_until_stops_where_the_python_engine_does():
    """`run_until` (a policy's own stop rule, asked after every finishing event) on the
    compiled loop: the same finishes, in the same order, at the same times."""
    model = MODEL_PRESETS["Qwen2.5-7B"]
    cluster = ClusterConfig(n_gpus=16, rollout_replicas=4, rollout_tp=4, train_dp=16)
    env = Env(cluster, model, EngineLimits(), Policy(), roofline_coefficients(cluster, model), 40_000)
    w = long_tailed(steps=1)[0]

    def first_finishes(rc, n=200):
        seen: list[tuple[float, list[int]]] = []
        _, first, _ = rc.add_step(w, np.arange(w.n_samples))
        rc.submit(first, np.arange(w.n_samples) % 4, 0.0)
        stop = rc.run_until(lambda done, t: seen.append((t, list(done))) or sum(len(d) for _, d in seen) >= n)
        return stop, seen

    fast = first_finishes(env.new_cluster())
    assert fast[0] is not None and len(fast[1]) > 10  # it stopped, after many finishing events
    assert isinstance(env.new_cluster(), ArrayCluster)
    with reference_engine():
        assert fast == first_finishes(env.new_cluster())


def _watched_cluster():
    model = MODEL_PRESETS["Qwen2.5-7B"]
    cluster = ClusterConfig(n_gpus=16, rollout_replicas=4, rollout_tp=4, train_dp=16)
    env = Env(cluster, model, EngineLimits(), Policy(), roofline_coefficients(cluster, model), 40_000)
    w = long_tailed(steps=1)[0]
    rc = env.new_cluster()
    _, first, _ = rc.add_step(w, np.arange(w.n_samples))
    rc.submit(first, np.arange(w.n_samples) % 4, 0.0)
    return rc


def _idle(rc, j):
    es = rc.es[j]
    return es[K.E_B] + es[K.E_WN] + es[K.E_AN] == 0


def test_a_watched_replica_stops_the_compiled_loop_where_its_work_runs_out():
    """`run_watched` (laminar's stops): after the event that drains a watched replica,
    before any later event; an unwatched one never stops it."""
    rc = _watched_cluster()
    watch = np.zeros((4, 3), dtype=np.int64)
    watch[:, K.W_TAG] = [-1, -1, 7, -1]
    stopped, ends, _ = rc.run_watched(math.inf, watch, -1.0)
    assert stopped == 2 and _idle(rc, 2) and not watch[:, K.W_STOP].any()
    t = rc.replicas[2].t
    assert ends.max() == t == ends[-1]  # nothing after that event
    watch[:, K.W_TAG] = -1
    assert rc.run_watched(math.inf, watch, -1.0)[0] == -1 and all(_idle(rc, j) for j in range(4))


def test_two_watched_replicas_of_one_tag_stop_the_compiled_loop_in_their_tails():
    """Two replicas holding the same weights, both in their tail (few running, none
    waiting): laminar repacks there; replicas of different tags do not stop it."""
    tail = 16.0
    rc = _watched_cluster()
    watch = np.zeros((4, 3), dtype=np.int64)
    watch[:, K.W_TAG] = [0, 0, -1, -1]
    stopped, _, _ = rc.run_watched(math.inf, watch, tail)
    assert stopped in (0, 1)
    for j in (0, 1):
        assert 0 < rc.es[j, K.E_B] <= tail and rc.es[j, K.E_WN] == 0
    t_tails = rc.replicas[stopped].t
    rc = _watched_cluster()
    watch[:, K.W_TAG] = [0, 1, -1, -1]
    stopped, _, _ = rc.run_watched(math.inf, watch, tail)
    assert rc.replicas[stopped].t > t_tails and _idle(rc, stopped)  # the first to drain


def _laminar_seed1():
    model = MODEL_PRESETS["Qwen2.5-7B"]
    layout = layout_for(True, 16, model, GPU_PRESETS["H100"])
    ws = long_tailed(steps=4, seed=1)
    return dict(
        _flat(simulate(ws, ClusterConfig(n_gpus=16, **layout), model, EngineLimits(), Policy("laminar")).to_dict())
    )


def test_laminar_orders_ties_as_its_event_queue_does():
    """Replicas woken together (by a new weight version) have events at the same time,
    which laminar's event loop orders by how often each was queued — a replica repacked
    away and left idle included, once its stale entry comes up (`_Compiled`): on this
    tie-heavy workload the compiled replay equals the Python engine's."""
    fast = _laminar_seed1()
    with reference_engine():
        assert not _differences(fast, _laminar_seed1())
