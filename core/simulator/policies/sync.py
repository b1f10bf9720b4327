"""The synchronous colocated policy: per step, rollout -> reward -> old_log_prob -> ref ->
adv -> update -> weight sync, all GPUs time-shared."""

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
from core.simulator.workload import StepWorkload


def run_sync(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]) -> PolicyRun:
    tb = TimelineBuilder(env.cluster, disaggregated=False)
    steps = []
    t = 0.0
    for i, w in enumerate(workload):
        ro = rollout_batch(env, w)
        stages = {"rollout": ro.duration}
        windows = {"rollout": [t, t + ro.duration]}
        tb.rollout(w.step, t, t + ro.duration, shift_intervals(ro.replica_busy, t), ro.recompute)
        end = post_rollout(
            env, tb, w.step, t + ro.duration, w.total_len, reward_seconds(w, env.policy), stages, windows
        )
        steps.append(
            step_result(w.step, t, end, t, stages, windows, w.n_samples, w.generated_tokens, ro.stats, ro.completion)
        )
        t = end
        progress((i + 1) / len(workload))
    return steps, tb, t


SPEC = PolicySpec(
    kind="sync",
    not_on_engine=None,
    disaggregated=False,
    help="colocated; rollout, reward, forward passes and update in sequence, all GPUs time-shared",
    batch_rollouts=True,
    run=run_sync,
)
