"""verl's fully async trainer (recipe fully_async_policy; kind "async"): disaggregated
rollouter and trainer pools, samples streamed group by group through a message queue,
a staleness bound, and a parameter sync every `trigger_parameter_sync_step` local updates.

Replay of trace step j = one parameter version (verl's fair comparison with colocated
training: trigger_parameter_sync_step x require_batches x ppo_mini_batch_size =
train_batch_size): the trainer trains the step's N_j groups in
`trigger_parameter_sync_step` local updates of about N_j / trigger groups each (taken in
completion order; each update's pass split into `require_batches` mini-batches), then
syncs. After each sync the rollouter starts new groups up to its quota,
(1 + staleness_threshold) x N_j minus the groups already in flight or queued (verl
resets its staleness counter to those at every version), the interrupted ones first.
At a sync the rollout is paused: with `partial_rollout` (and a threshold above 0) the
groups in flight are interrupted and resumed after it by recomputing prompt + partial
response; without, the trainer waits for them to finish (the drain) before syncing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.simulator.policies.base import Env, PolicyRun, reward_share, step_result, sync_weights, train_on
from core.simulator.policies.carryover import ChainPool, FreshStream, Groups, group_tokens
from core.simulator.policies.pool_run import PoolRun
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.timeline import TimelineBuilder
from core.simulator.workload import StepWorkload


@dataclass(frozen=True)
class AsyncParams:
    staleness_threshold: float = param(
        0.1,
        "how many more groups than a step trains on the rollouter may start per weight version, as a "
        "fraction (verl's async_training.staleness_threshold; 0: none beyond the step's)",
        ge=0.0,
        grid=(0.5,),
    )
    trigger_parameter_sync_step: int = param(
        4,
        "local updates of the trainer between two parameter syncs (verl's "
        "async_training.trigger_parameter_sync_step); a step's groups are split among them",
        ge=1,
    )
    require_batches: int = param(1, "mini-batches per local update (verl's async_training.require_batches)", ge=1)
    partial_rollout: bool = param(
        True,
        "at a parameter sync, interrupt the samples in flight and resume them after it (verl's "
        "async_training.partial_rollout); false: wait for them to finish first",
    )
    use_rollout_log_probs: bool = param(
        True,
        "train with the rollout's log-probs, skipping the trainer's old_log_prob pass (verl's "
        "async_training.use_rollout_log_probs)",
    )


class _Replay:
    """The state carried from one parameter version to the next."""

    def __init__(self, env: Env, workload: list[StepWorkload]) -> None:
        self.env = env
        self.prm: AsyncParams = env.params
        self.tb = TimelineBuilder(env.cluster, disaggregated=True)
        self.pool = ChainPool(workload)
        self.stream = FreshStream(workload, self.pool)
        self.carried, self.carried_v = Groups(), list[int]()  # interrupted groups, their versions
        self.queue, self.queue_v = Groups(), list[int]()  # finished, not trained, and their versions
        self.resume = 0.0  # when the rollouter (re)starts
        self.prev_end = 0.0
        self.run: PoolRun | None = None  # the last version's (its arrays are reused)

    def version(self, j: int, w: StepWorkload) -> tuple[dict[str, float], dict[str, list[float]], dict, float]:
        """Step j: rollout from the last resume, the trainer's local updates, the sync."""
        start = self.resume
        run = self.run = PoolRun(self.env, self.pool, start, recycle=self.run)
        quota = math.floor((1 + self.prm.staleness_threshold) * w.n_groups + 1e-9)
        quota -= len(self.carried) + len(self.queue)
        run.launch(self.carried, start)
        fresh = run.launch(self.stream.take(max(0, quota)), start)
        version = self.carried_v + [j] * len(fresh)  # per group id: the carried ones, then the fresh
        stages: dict = {}
        windows: dict = {}
        taken, waited = self.train(j, w, run, version, stages, windows)
        pause = self.trainer_free
        end = self.sync(j, w, run, version, pause, stages, windows)
        consumed = len(taken)
        stats = run.stats(run.sample_completions() - start, pause - start)
        stats.update(
            {
                "time_s": pause - start,
                "groups_consumed": consumed,
                "stale_groups": sum(1 for v in taken if v < j),
                "groups_launched": len(fresh),
                "groups_resumed": len(run.groups) - len(fresh),
                "groups_interrupted": len(self.carried),
                "groups_queued": len(self.queue),
                "trainer_wait_s": waited,
                "recompute_s": float(sum(run.recompute())),
            }
        )
        stages["rollout"] = pause - start
        windows["rollout"] = [start, pause]
        return stages, windows, stats, end

    def train(
        self, j: int, w: StepWorkload, run: PoolRun, version: list[int], stages: dict, windows: dict
    ) -> tuple[list[int], float]:
        """The local updates of step j, each on the next groups in completion order."""
        prm, n = self.prm, w.n_groups
        sizes = [c.size for c in np.array_split(np.arange(n), prm.trigger_parameter_sync_step) if c.size]
        self.trainer_free = max(self.resume, self.prev_end)
        used = 0  # groups of this run taken so far
        taken, waited = [], 0.0
        self.tokens = self.samples = 0
        for size in sizes:
            ready = self.resume
            q = min(size, len(self.queue))  # the queue's oldest first
            queued, self.queue = self.queue.pick(np.arange(q)), self.queue.pick(np.arange(q, len(self.queue)))
            taken += self.queue_v[:q]
            del self.queue_v[:q]
            need = size - q
            while need and not run.run_until_completed(used + need):
                run.launch(self.stream.take(used + need - len(run.completed)), run.drain())
            gs, ts = zip(*run.completed[used : used + need]) if need else ((), ())
            taken += [version[g] for g in gs]
            ready = max((ready, *ts))
            groups = queued + run.groups.pick(np.array(gs, np.int64))
            used += need
            start = max(self.trainer_free, ready)
            waited += start - self.trainer_free
            self.trainer_free = self.update(j, w, groups, start, stages, windows)
        self.used = used
        return taken, waited

    def update(self, j: int, w: StepWorkload, groups: Groups, start: float, stages: dict, windows: dict) -> float:
        total_len, tokens, n = group_tokens(self.pool, groups)
        self.tokens += tokens
        self.samples += n
        p = self.env.policy
        return train_on(
            self.env,
            self.tb,
            w.step,
            start,
            total_len,
            reward_share(w, p, n),
            stages,
            windows,
            adv_s=p.adv_s * n / max(1, w.n_samples),
            old_log_prob=False if self.prm.use_rollout_log_probs else None,
            minibatches=self.prm.require_batches,
        )

    def sync(
        self, j: int, w: StepWorkload, run: PoolRun, version: list[int], pause: float, stages: dict, windows: dict
    ) -> float:
        """Pause the rollouter (interrupt, or drain), sync the weights; returns the end."""
        tb, step = self.tb, w.step
        if self.prm.partial_rollout and self.prm.staleness_threshold > 0:
            run.interrupt(pause)
            sync_at = pause
        else:
            sync_at = max(pause, run.drain())
        open_ = np.ones(len(run.groups), bool)
        open_[[g for g, _ in run.completed]] = False
        unfinished = np.flatnonzero(open_)
        self.carried, self.carried_v = run.groups.pick(unfinished), [version[g] for g in unfinished.tolist()]
        later = [g for g, _ in run.completed[self.used :]]
        self.queue += run.groups.pick(np.array(later, np.int64))
        self.queue_v += [version[g] for g in later]
        tb.span(step, pause, sync_at, "idle", "weight_sync")
        stages["weight_sync"] = stages.get("weight_sync", 0.0) + (sync_at - pause)
        end = sync_weights(self.env, tb, step, sync_at, stages, windows)
        windows["weight_sync"][0] = pause
        tb.background("rollout", self.resume, pause, "staleness_wait")
        tb.background("rollout", pause, end, "weight_sync")
        tb.streaming_rollout(run.busy(self.resume, end), run.tool_gaps(), lambda _: step, run.recompute())
        self.resume = end
        return end


def run_async(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]) -> PolicyRun:
    r = _Replay(env, workload)
    steps = []
    for j, w in enumerate(workload):
        start = r.resume
        stages, windows, stats, end = r.version(j, w)
        steps.append(step_result(w.step, start, end, r.prev_end, stages, windows, r.samples, r.tokens, stats, None))
        r.prev_end = end
        progress((j + 1) / len(workload))
    return steps, r.tb, r.prev_end


SPEC = PolicySpec(
    kind="async",
    not_on_engine="streaming into a concurrently running trainer is not acted out on a real engine yet",
    disaggregated=True,
    params=AsyncParams,
    # groups in flight at the end are carried; prompts past the trace's end stand in for more
    carries_over=True,
    stand_ins=True,
    paper="verl fully async policy trainer (recipe fully_async_policy: verl.readthedocs.io/en/latest/advance/fully_async.html)",
    help="disaggregated verl fully async: groups streamed to the trainer, up to (1 + staleness_threshold) x a "
    "step's groups per weight version, a parameter sync every trigger_parameter_sync_step local updates "
    "(in-flight samples interrupted and resumed with partial_rollout)",
    run=run_async,
)
