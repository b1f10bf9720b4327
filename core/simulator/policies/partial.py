"""Partial rollout (colocated): the rollout pool holds carried-over groups plus fresh groups
up to ceil(N * over_provision); it stops when the N-th group has finished; unfinished
samples carry over with their progress (resumed by recomputing prompt + partial
response). Training uses the groups finished by the stop."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.simulator.dispatch import assign_groups
from core.simulator.policies.base import (
    Env,
    post_rollout,
    reward_seconds,
    rollout_stats,
    shift_intervals,
    step_result,
)
from core.simulator.policies.carryover import ChainPool, Pending, sample_generated
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.timeline import TimelineBuilder
from core.simulator.workload import StepWorkload


@dataclass(frozen=True)
class PartialParams:
    finished_groups: int | None = param(
        None,
        "groups a step trains on (the rollout stops when this many have finished); null: the step's group count",
        ge=1,
    )
    over_provision: float = param(
        2.0,
        "groups launched per step, as a multiple of finished_groups (APRIL over-provisions)",
        ge=1.0,
        grid=(1.25, 1.5),
    )


def run_partial(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]):
    """Fresh groups come from the trace in order; past its end they cycle through it
    again (a stand-in for the dataset's further prompts), so every step can wait for
    the same N finished groups a synchronous step trains on."""
    p = env.policy
    prm: PartialParams = env.params
    tb = TimelineBuilder(env.cluster, disaggregated=False)
    pool = ChainPool(workload)
    stream = [(i, g) for i, w in enumerate(workload) for g in range(w.n_groups)]
    next_fresh = 0
    carried: list[list[Pending]] = []
    steps = []
    t = 0.0
    for i, w in enumerate(workload):
        target = min(prm.finished_groups or w.n_groups, max(1, len(stream)))
        want = max(target, math.ceil(target * prm.over_provision))
        groups = list(carried)
        while len(groups) < want and stream:
            si, g = stream[next_fresh % len(stream)]
            next_fresh += 1
            sl = workload[si].group_slices()
            arr = pool.arrays_of(si)
            groups.append([Pending(si, s, int(arr["first"][s]), 0) for s in range(sl[g], sl[g + 1])])
        items = [it for grp in groups for it in grp if not it.done]
        group_of_item = np.array([g for g, grp in enumerate(groups) for it in grp if not it.done], dtype=np.int64)
        left_in_group = np.bincount(group_of_item, minlength=len(groups))
        ch = pool.chains(items)
        rc = env.new_cluster()
        base = rc.store.add(ch["prefill"], ch["context"], ch["decode"], ch["gap"], ch["next"], ch["owner"])
        total_prompt = np.array([sum(int(workload[it.step_idx].prompt_len[it.sample]) for it in grp) for grp in groups])
        total_tok = np.array(
            [sum(int(workload[it.step_idx].total_len[it.sample]) for it in grp if not it.done) for grp in groups]
        )
        replica_of_group = assign_groups(p.dispatch, env.cluster.rollout_replicas, total_prompt, total_tok)
        rc.submit(base + ch["first"], replica_of_group[group_of_item], 0.0)
        last_rid = base + ch["last"]
        item_of_last = {int(r): k for k, r in enumerate(last_rid)}
        finished_groups: list[int] = [g for g in range(len(groups)) if left_in_group[g] == 0]

        def on_finish(done: list[int], now: float) -> bool:
            for r in done:
                k = item_of_last.get(r)
                if k is None:
                    continue
                g = group_of_item[k]
                left_in_group[g] -= 1
                if left_in_group[g] == 0:
                    finished_groups.append(int(g))
            return len(finished_groups) >= target

        stop = None if len(finished_groups) >= target else rc.run_until(on_finish)
        end = np.asarray(rc.store.end)
        if stop is None:
            stop = float(np.nanmax(end)) if end.size and np.isfinite(end).any() else 0.0
        rc.advance_to(stop)
        for eng in rc.replicas:
            eng.unfinished()
        store = rc.store
        end = np.asarray(store.end)
        item_done = np.isfinite(end[last_rid]) & (end[last_rid] <= stop) if items else np.zeros(0, bool)
        for k, it in enumerate(items):
            if item_done[k]:
                it.done = True
                continue
            r = base + int(ch["first"][k])
            while np.isfinite(end[r]) and r < last_rid[k]:
                r += 1
            src = int(ch["src"][r - base])
            gen = int(store.generated[r]) + (it.generated if src == it.req else 0)
            it.req, it.generated = src, gen
        done_groups = [grp for grp in groups if all(it.done for it in grp)]
        carried = [grp for grp in groups if not all(it.done for it in grp)]
        trained = [(it.step_idx, it.sample) for grp in done_groups for it in grp]
        total_len = np.array([workload[si].total_len[s] for si, s in trained], dtype=np.int64)
        tokens = int(sum(sample_generated(workload[si], s, pool.arrays_of(si)) for si, s in trained))
        stats = rollout_stats(rc, np.where(item_done, end[last_rid], np.nan), stop)
        stats.update(
            {"groups_launched": len(groups), "groups_finished": len(done_groups), "groups_carried": len(carried)}
        )
        stages = {"rollout": stop}
        windows = {"rollout": [t, t + stop]}
        tb.rollout(w.step, t, t + stop, shift_intervals(rc.busy_intervals(0.0, stop), t))
        end_t = post_rollout(env, tb, w.step, t + stop, total_len, reward_seconds(w, p, len(trained)), stages, windows)
        steps.append(step_result(w.step, t, end_t, t, stages, windows, len(trained), tokens, stats, None))
        t = end_t
        progress((i + 1) / len(workload))
    return steps, tb, t


SPEC = PolicySpec(
    kind="partial",
    disaggregated=False,
    params=PartialParams,
    same_as=lambda prm: "sync" if prm.over_provision == 1.0 and prm.finished_groups is None else None,
    carries_over=True,
    stand_ins=True,
    help="colocated; rollout stops when `finished_groups` groups are done out of ceil(N * over_provision) launched; unfinished samples carry over",
    run=run_partial,
)
