"""Active partial rollout, APRIL (arXiv 2509.18521, in slime): colocated; each step
launches more prompt groups than it trains on — the groups carried over from the
previous step first, then fresh ones, ceil(N · over_provision) in all (N =
`finished_groups`, else the step's group count) — and aborts the rollout once N groups
have finished. With `partial_rollout` the unfinished samples are recycled into the next
step with their partial responses and resume first, by recomputing prompt + partial
response (busy "recompute"); without it they are dropped (their generation is lost).
Fresh groups beyond the trace's end cycle through it again (a stand-in for further
prompts), so every step trains N groups."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.simulator.policies.base import Env, PolicyRun, post_rollout, reward_seconds, step_result
from core.simulator.policies.carryover import ChainPool, FreshStream, Groups, group_tokens
from core.simulator.policies.pool_run import PoolRun
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.result import StepResult
from core.simulator.timeline import TimelineBuilder
from core.simulator.workload import StepWorkload


@dataclass(frozen=True)
class PartialParams:
    finished_groups: int | None = param(
        None,
        "groups a step trains on, slime's rollout_batch_size (the rollout is aborted once this many have "
        "finished); null: the step's group count",
        ge=1,
    )
    over_provision: float = param(
        2.0,
        "groups launched per step as a multiple of finished_groups, slime's over_sampling_batch_size / "
        "rollout_batch_size (APRIL recommends about 2)",
        ge=1.0,
        grid=(1.5,),
    )
    partial_rollout: bool = param(
        True,
        "recycle aborted samples with their partial responses into the next step (slime's --partial-rollout); "
        "false: drop them",
    )


def run_partial(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]) -> PolicyRun:
    prm: PartialParams = env.params
    tb = TimelineBuilder(env.cluster, disaggregated=False)
    pool = ChainPool(workload)
    stream = FreshStream(workload, pool)
    carried = Groups()
    steps = []
    t = 0.0
    run: PoolRun | None = None
    for i, w in enumerate(workload):
        target = min(prm.finished_groups or w.n_groups, max(1, len(stream)))
        want = max(target, math.ceil(target * prm.over_provision))
        run = PoolRun(env, pool, t, recycle=run)
        run.launch(carried, t)
        run.launch(stream.take(max(0, want - len(carried))), t)
        stop = t
        if run.run_until_completed(target):
            stop = run.completed[target - 1][1]
        else:
            stop = max([t] + [c for _, c in run.completed])
        run.interrupt(stop)
        trained = np.zeros(len(run.groups), bool)
        trained[[g for g, _ in run.completed[:target]]] = True
        done = run.groups.pick(np.flatnonzero(trained))  # in prompt order, as slime sorts them
        # unfinished groups, and any finished beyond the N-th (kept for the next step)
        left = run.groups.pick(np.flatnonzero(~trained))
        carried = left if prm.partial_rollout else Groups()
        steps.append(_step(env, tb, run, w, t, stop, done, left, pool))
        t = steps[-1].end
        progress((i + 1) / len(workload))
    return steps, tb, t


def _step(
    env: Env,
    tb: TimelineBuilder,
    run: PoolRun,
    w: StepWorkload,
    t: float,
    stop: float,
    done: Groups,
    left: Groups,
    pool: ChainPool,
) -> StepResult:
    """Draw and account one step: its rollout window, then the stages after it."""
    total_len, tokens, n = group_tokens(pool, done)
    stats = run.stats(run.sample_completions() - t, stop - t)
    stats.update(
        {
            "groups_launched": len(run.groups),
            "groups_finished": len(done),
            "groups_carried": len(left),
            "recompute_s": float(sum(run.recompute())),
        }
    )
    stages = {"rollout": stop - t}
    windows = {"rollout": [t, stop]}
    tb.rollout(w.step, t, stop, run.busy(t, stop), run.recompute())
    end = post_rollout(env, tb, w.step, stop, total_len, reward_seconds(w, env.policy, n), stages, windows)
    return step_result(w.step, t, end, t, stages, windows, n, tokens, stats, None)


SPEC = PolicySpec(
    kind="partial",
    not_on_engine=None,
    disaggregated=False,
    params=PartialParams,
    same_as=lambda prm: "sync" if prm.over_provision == 1.0 and prm.finished_groups is None else None,
    paper="APRIL: Active Partial Rollouts in Reinforcement Learning to Tame Long-tail Generation (arXiv 2509.18521)",
    help="colocated APRIL: ceil(N * over_provision) groups launched, the rollout aborted once N have finished; "
    "unfinished samples carried into the next step with their partial responses",
    carries_over=True,
    stand_ins=True,
    run=run_partial,
)
