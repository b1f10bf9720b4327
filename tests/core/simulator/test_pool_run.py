"""The carried-sample bookkeeping of partial and streaming policies (`policies/pool_run.py`,
`policies/carryover.py`): pending samples as ids into the pool's columns, finishing
recorded in bulk or one by one, and an interrupt that keeps each sample's progress."""

from __future__ import annotations

import numpy as np
import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy
from core.simulator.policies.base import Env
from core.simulator.policies.carryover import ChainPool, FreshStream, Groups, group_tokens
from core.simulator.policies.pool_run import PoolRun
from core.simulator.predictor import roofline_coefficients
from tests.core.simulator.test_simulator_invariants import long_tailed, multi_turn


def _env(replicas: int = 4) -> Env:
    cluster = ClusterConfig(n_gpus=4 * replicas, rollout_replicas=replicas, rollout_tp=4, train_dp=4 * replicas)
    model = MODEL_PRESETS["Qwen2.5-7B"]
    return Env(cluster, model, EngineLimits(), Policy(), roofline_coefficients(cluster, model), 1e6)


def test_the_stream_hands_out_the_trace_groups_in_order_then_cycles():
    work = long_tailed(steps=2, groups=5, n=3)
    pool = ChainPool(work)
    stream = FreshStream(work, pool)
    groups = stream.take(7) + stream.take(6)  # across a step's end, then past the trace's
    order = [(i, g) for i, w in enumerate(work) for g in range(w.n_groups)]
    assert len(groups) == 13
    for grp, (i, g) in zip(groups, order + order):
        sl = work[i].group_slices()
        assert pool.step[grp].tolist() == [i] * grp.size
        assert pool.lookup(grp, "total")[0].tolist() == work[i].total_len[sl[g] : sl[g + 1]].tolist()
    ids = groups.ids
    assert np.unique(ids).size == ids.size  # a cycled prompt is a new pending sample
    total, tokens, n = group_tokens(pool, groups.pick(np.arange(2)))
    assert n == total.size == groups[0].size + groups[1].size
    assert tokens == int(pool.lookup(np.concatenate([groups[0], groups[1]]), "generated")[0].sum())


def _stopped_run(compiled: bool) -> tuple[PoolRun, ChainPool, list[int]]:
    work = multi_turn(steps=1, n=48)
    pool = ChainPool(work)
    run = PoolRun(_env(), pool, 0.0, compiled=compiled)
    run.launch(FreshStream(work, pool).take(12), 0.0)
    assert run.run_until_completed(3)
    stopped = run.interrupt(run.completed[2][1])
    return run, pool, stopped


@pytest.mark.parametrize("compiled", [True, False])
def test_an_interrupt_keeps_each_unfinished_samples_progress(compiled):
    run, pool, stopped = _stopped_run(compiled)
    store = run.rc.store
    assert stopped and len(run.completed) >= 3
    for k in stopped:
        sid = int(run.items[k])
        assert not pool.done[sid] and run.item_replica[k] == -1
        r = int(run.item_first[k])  # the first turn not finished resumes
        while r < run.item_last[k] and not np.isnan(store.end[r]):
            r += 1
        assert pool.req[sid] == run._rid_src[r]
        assert pool.generated[sid] == store.generated[r]
    assert any(pool.generated[run.items[k]] > 0 for k in stopped)  # some stopped mid-turn
    done = [int(s) for s in run.items[: run.n_items] if pool.done[s]]
    assert len(done) + len(stopped) == run.n_items


def test_the_compiled_loop_and_the_python_engine_stop_alike():
    fast, fast_pool, fast_stopped = _stopped_run(True)
    slow, slow_pool, slow_stopped = _stopped_run(False)
    assert [g for g, _ in fast.completed] == [g for g, _ in slow.completed]
    assert [t for _, t in fast.completed] == pytest.approx([t for _, t in slow.completed], rel=1e-9)
    assert fast_stopped == slow_stopped
    for col in ("req", "generated", "done"):
        assert getattr(fast_pool, col)[: fast_pool.n].tolist() == getattr(slow_pool, col)[: slow_pool.n].tolist()


def test_resumed_samples_finish_in_a_later_run():
    run, pool, stopped = _stopped_run(True)
    left = Groups.of([g for i, g in enumerate(run.groups) if i not in {c for c, _ in run.completed}])
    later = PoolRun(_env(), pool, 100.0)
    later.launch(left, 100.0)
    assert later.recompute_tokens > 0  # the partial responses are prefilled again
    later.drain()
    assert len(later.completed) == len(left)
    assert pool.done[left.ids].all()


def test_finishing_one_by_one_is_finishing_in_bulk():
    """Few finished requests are recorded one at a time, many as arrays: the same
    completions, and the callbacks in the same order."""

    def record(chunk: int) -> tuple[list, list]:
        work = long_tailed(steps=1, groups=6, n=4)
        pool = ChainPool(work)
        run = PoolRun(_env(2), pool, 0.0, compiled=False)
        calls: list = []
        run.on_item_done = lambda k, t: calls.append(("item", k))
        run.on_group_done = lambda g, t: calls.append(("group", g))
        run.launch(FreshStream(work, pool).take(6), 0.0)
        rids = np.argsort(-np.arange(len(run.rc.store))).tolist()  # in an order of its own
        for i in range(0, len(rids), chunk):
            run.finished(rids[i : i + chunk], float(i))
        return run.completed, calls

    few, bulk = record(3), record(1000)
    assert few[1] == bulk[1] and len(few[1]) == 6 * 4 + 6
    assert [g for g, _ in few[0]] == [g for g, _ in bulk[0]]


def test_groups_picked_extended_and_joined_keep_their_ids():
    parts = [np.array([3, 4]), np.array([7]), np.array([], np.int64), np.array([1, 2, 9])]
    groups = Groups.of(parts)
    assert [g.tolist() for g in groups] == [p.tolist() for p in parts]
    picked = groups.pick(np.array([3, 0]))
    assert [g.tolist() for g in picked] == [[1, 2, 9], [3, 4]]
    log = Groups()
    first = None
    for _ in range(5):  # past its capacity: a group handed out earlier stays as it was
        log.extend(groups)
        first = log[0] if first is None else first
    assert len(log) == 20 and log[17].tolist() == [7] and first.tolist() == [3, 4]
    joined = picked + groups
    assert joined.ids.tolist() == [1, 2, 9, 3, 4, 3, 4, 7, 1, 2, 9] and len(joined) == 6
