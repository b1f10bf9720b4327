"""Fully async (disaggregated, streaming): step j's groups are released to the rollout pool
when update j-staleness-1 has finished (its weights are then at most `staleness`
versions old); the trainer takes groups in completion order, N_j per step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.simulator.policies.base import (
    Env,
    group_replicas,
    post_rollout,
    reward_seconds,
    step_result,
)
from core.simulator.policies.carryover import ChainPool, sample_generated
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.timeline import TimelineBuilder, step_locator
from core.simulator.training import weight_sync_seconds
from core.simulator.workload import StepWorkload


@dataclass(frozen=True)
class AsyncParams:
    staleness: int = param(
        1, "how many weight versions behind a rollout may be when its group is trained on", ge=0, grid=(0, 2)
    )


def run_async(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]):
    p = env.policy
    prm: AsyncParams = env.params
    eta = prm.staleness
    tb = TimelineBuilder(env.cluster, disaggregated=True)
    sync = weight_sync_seconds(env.model, env.cluster)
    rc = env.new_cluster()
    pool = ChainPool(workload)
    n_steps = len(workload)
    # per global sample: (step index, sample); per global group: its samples
    last_to_group: dict[int, int] = {}
    group_samples: list[tuple[int, np.ndarray]] = []
    group_left: list[int] = []
    completed: list[tuple[int, float]] = []  # (global group, time)
    released_at: list[float] = []

    def release(i: int, time: float) -> None:
        w = workload[i]
        _, first, last = rc.add_step(w, np.arange(w.n_samples))
        replica = group_replicas(env, w)[w.group]
        rc.submit(first, replica, time)
        starts = w.group_slices()
        for g in range(w.n_groups):
            gid = len(group_samples)
            group_samples.append((i, np.arange(starts[g], starts[g + 1])))
            group_left.append(int(starts[g + 1] - starts[g]))
            for r in last[starts[g] : starts[g + 1]].tolist():
                last_to_group[r] = gid
        released_at.append(time)

    for i in range(min(eta + 1, n_steps)):
        release(i, 0.0)
    need = 0
    train_end_prev = 0.0
    steps = []
    ends, step_ids = [], []
    prev_end = 0.0
    for j, w in enumerate(workload):
        need += w.n_groups

        def on_finish(done: list[int], now: float) -> bool:
            for r in done:
                gid = last_to_group.get(r)
                if gid is None:
                    continue
                group_left[gid] -= 1
                if group_left[gid] == 0:
                    completed.append((gid, now))
            return len(completed) >= need

        if len(completed) < need:
            rc.run_until(on_finish)
        take = completed[need - w.n_groups : need]
        ready = take[-1][1] if take else train_end_prev
        lens, tokens, comp = [], 0, []
        for gid, tdone in take:
            si, samples = group_samples[gid]
            lens.append(workload[si].total_len[samples])
            tokens += sum(sample_generated(workload[si], s, pool.arrays_of(si)) for s in samples.tolist())
            comp.append(tdone - released_at[si])
        total_len = np.concatenate(lens) if lens else np.zeros(0, np.int64)
        t_start = max(ready, train_end_prev + (sync if j else 0.0))
        stages = {"rollout": float(ready - (released_at[j] if j < len(released_at) else ready))}
        windows = {"rollout": [released_at[j] if j < len(released_at) else ready, ready]}
        end = post_rollout(env, tb, w.step, t_start, total_len, reward_seconds(w, p, total_len.size), stages, windows)
        train_end_prev = end - sync
        comp_arr = np.asarray(comp)
        stats = {
            "time_s": stages["rollout"],
            "groups_consumed": len(take),
            "stale_groups": int(sum(1 for gid, _ in take if group_samples[gid][0] != j)),
            "p50_group_s": float(np.median(comp_arr)) if comp_arr.size else None,
            "max_group_s": float(comp_arr.max()) if comp_arr.size else None,
        }
        steps.append(
            step_result(
                w.step, windows["rollout"][0], end, prev_end, stages, windows, int(total_len.size), tokens, stats, None
            )
        )
        ends.append(end)
        step_ids.append(w.step)
        prev_end = end
        nxt = j + eta + 1
        if nxt < n_steps:
            release(nxt, end)
        progress((j + 1) / n_steps)
    makespan = prev_end
    # the rollout pool's timeline: busy intervals and labelled gaps
    step_of = step_locator(ends, step_ids)
    busy = rc.busy_intervals(0.0, makespan)
    gaps = []
    for eng in rc.replicas:
        gaps.append([(a, b, "tool_wait" if rc.store.cont[r] else "stage_serialisation") for a, b, r in eng.idle_gaps])
    tb.streaming_rollout(busy, gaps, step_of)
    return steps, tb, makespan


SPEC = PolicySpec(
    kind="async",
    disaggregated=True,
    params=AsyncParams,
    help="disaggregated streaming; a step's groups are released once the weights are at most `staleness` versions old; training consumes groups in completion order",
    run=run_async,
)
