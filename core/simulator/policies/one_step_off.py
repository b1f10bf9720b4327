"""One-step-off async (disaggregated): rollout k starts when rollout k-1 ended and the
weights of update k-2 have arrived; training k starts when rollout k ended and update
k-1 is done. Rollout of step k+1 thus overlaps training of step k.

Idle time: the training pool waiting for rollout k is `trainer_waits_rollout`; the
rollout pool waiting for update k-2 is `rollout_waits_trainer` (the one-step bound is
fixed by design: the lever is the pool split), then `weight_sync` while the weights
move."""

from __future__ import annotations

from collections.abc import Callable

from core.simulator.policies.base import (
    Env,
    PolicyRun,
    post_rollout,
    reward_seconds,
    rollout_batch,
    shift_intervals,
    step_result,
)
from core.simulator.policies.spec import PolicySpec
from core.simulator.timeline import TimelineBuilder
from core.simulator.training import weight_sync_seconds
from core.simulator.workload import StepWorkload


def run_one_step_off(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]) -> PolicyRun:
    tb = TimelineBuilder(env.cluster, disaggregated=True)
    steps = []
    sync = weight_sync_seconds(env.model, env.cluster)
    rollout_end = 0.0
    train_ends: list[float] = []  # update end (before weight sync) per step
    prev_end = 0.0
    for i, w in enumerate(workload):
        ro = rollout_batch(env, w)
        start = rollout_end
        if i >= 2:
            start = max(start, train_ends[i - 2] + sync)
            # waiting for update k-2's weights: for the update (the pool's default,
            # rollout_waits_trainer), then for their transfer
            tb.background("rollout", max(rollout_end, train_ends[i - 2]), start, "weight_sync")
        r_end = start + ro.duration
        tb.rollout(w.step, start, r_end, shift_intervals(ro.replica_busy, start), ro.recompute)
        rollout_end = r_end
        stages = {"rollout": ro.duration}
        windows = {"rollout": [start, r_end]}
        t_start = max(r_end, train_ends[-1] + sync if train_ends else 0.0)
        end = post_rollout(env, tb, w.step, t_start, w.total_len, reward_seconds(w, env.policy), stages, windows)
        train_ends.append(end - sync)
        steps.append(
            step_result(
                w.step, start, end, prev_end, stages, windows, w.n_samples, w.generated_tokens, ro.stats, ro.completion
            )
        )
        prev_end = end
        progress((i + 1) / len(workload))
    return steps, tb, prev_end


SPEC = PolicySpec(
    kind="one_step_off",
    not_on_engine="its training stage would run beside the engine: not acted out on a real engine yet (needs a stand-in for the recorded training time)",
    disaggregated=True,
    help="disaggregated; rollout of step k+1 overlaps training of step k",
    paper="verl one-step-off async trainer (recipe one_step_off_policy)",
    batch_rollouts=True,
    run=run_one_step_off,
)
