"""Tail batching (RollPacker, NSDI'26, arXiv 2509.21009), colocated and synchronous:
prompts that give long responses are deferred into a few dedicated long rounds, so the
other (short) rounds finish fast. Each round is one training step: rollout, reward,
forward passes, update and weight sync as in `sync`.

- Short round: the prompts come from the trace in order; P, the prompt count of the step
  its first prompt belongs to, is the target; ceil(P · over_provision) prompts are
  launched and the round stops when P of them have finished every sample. The prompts
  not finished by then are aborted and wait, in that order, for a long round (they
  start again from scratch there: RollPacker re-submits the prompt).
- Long round: as soon as P prompts wait (P of the step of the oldest), the next round
  runs those P without over-provisioning, to completion. When the trace's prompts run
  out, the ones still waiting run in long rounds of at most P.
- Predictor of the long prompts: `speculative` (RollPacker's race to completion above:
  nothing is known in advance) or `oracle` (the trace's lengths: of the launched
  prompts, those with the longest sample are deferred without being run, and the rest
  run to completion).

Every prompt of the trace is trained exactly once, in its own round or a later long
round; rounds beyond the trace's step count are numbered on from its last step. The
groups of a round are dispatched to replicas by `Policy.dispatch`, as for `sync`.

A short round's prompts depend only on the trace, and a long round's only on what the
short rounds deferred, so on a big replay the short rounds, then the long ones, are
computed in forked processes (`forked.fork_map`) and the rounds then put in order.

Not modelled: over-provisioning of responses within a prompt (RollPacker also samples
more responses than it keeps; the trace records only the kept ones), the elastic
parallelism planner, the reward scheduler and the stream trainer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from core.simulator.forked import fork_map, worth_forking
from core.simulator.policies.base import Env, PolicyRun, post_rollout, reward_seconds, shift_intervals, step_result
from core.simulator.policies.rounds import Prompts, RoundOutcome, run_round
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.result import StepResult
from core.simulator.timeline import TimelineBuilder
from core.simulator.workload import StepWorkload


@dataclass(frozen=True)
class TailBatchingParams:
    over_provision: float = param(
        1.25,
        "prompts launched per short round, as a multiple of the prompts it trains (RollPacker's "
        "max_prompts_ratio 1.25); 1: nothing is deferred (sync)",
        ge=1.0,
        grid=(1.5,),
    )
    predictor: str = param(
        "speculative",
        "which prompts go to long rounds: speculative — those unfinished when the short round has its "
        "prompts (RollPacker); oracle — the launched prompts with the longest samples, known in advance",
        choices=("speculative", "oracle"),
    )


@dataclass
class RoundPlan:
    kind: str  # short | long
    batch: list[int]  # prompt groups launched
    need: int  # groups that must finish
    skipped: list[int] = field(default_factory=list)  # deferred by the oracle without running
    outcome: RoundOutcome | None = None
    waiting: int = 0  # prompts waiting for a long round once it has run


def short_rounds(prm: TailBatchingParams, prompts: Prompts, group_count: list[int]) -> list[RoundPlan]:
    out, pos = [], 0
    while pos < prompts.n:
        target = max(1, group_count[prompts.step[pos]])
        batch = list(range(pos, min(prompts.n, pos + math.ceil(target * prm.over_provision))))
        pos += len(batch)
        need = min(target, len(batch))
        if prm.predictor == "oracle" and need < len(batch):
            run = set(sorted(batch, key=lambda p: prompts.longest[p])[:need])  # stable: ties in order
            out.append(RoundPlan("short", [p for p in batch if p in run], need, [p for p in batch if p not in run]))
        else:
            out.append(RoundPlan("short", batch, need))
    return out


def long_rounds(waiting: list[int], prompts: Prompts, group_count: list[int]) -> list[RoundPlan]:
    out, pos = [], 0
    while pos < len(waiting):
        chunk = waiting[pos : pos + max(1, group_count[prompts.step[waiting[pos]]])]
        out.append(RoundPlan("long", chunk, len(chunk)))
        pos += len(chunk)
    return out


def compute(
    env: Env, prompts: Prompts, plans: list[RoundPlan], workers: int, progress: Callable[[float], None]
) -> None:
    """Every plan's outcome, in forked processes when `workers`."""

    def one(i: int) -> RoundOutcome:
        return run_round(env, prompts, plans[i].batch, plans[i].need)

    outcomes = fork_map(one, len(plans), workers, progress) if workers else [one(i) for i in range(len(plans))]
    for plan, outcome in zip(plans, outcomes):
        plan.outcome = outcome


def schedule(
    shorts: list[RoundPlan], longs: list[RoundPlan], group_count: list[int], prompts: Prompts
) -> list[RoundPlan]:
    """Rounds in the order they run: a long round as soon as its prompts all wait."""
    order: list[RoundPlan] = []
    waiting = li = 0
    for plan in shorts:
        while li < len(longs) and waiting >= group_count[prompts.step[longs[li].batch[0]]]:
            waiting -= len(longs[li].batch)
            longs[li].waiting = waiting
            order.append(longs[li])
            li += 1
        assert plan.outcome is not None
        waiting += len(plan.outcome.unfinished) + len(plan.skipped)
        plan.waiting = waiting
        order.append(plan)
    for plan in longs[li:]:
        waiting -= len(plan.batch)
        plan.waiting = waiting
    return order + longs[li:]


def run_tail_batching(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]) -> PolicyRun:
    prm: TailBatchingParams = env.params
    prompts = Prompts(workload)
    group_count = [w.n_groups for w in workload]
    workers = worth_forking(workload, env.workers)
    shorts = short_rounds(prm, prompts, group_count)
    compute(env, prompts, shorts, workers, lambda f: progress(0.6 * f))
    waiting = [p for plan in shorts if plan.outcome for p in plan.outcome.unfinished + plan.skipped]
    longs = long_rounds(waiting, prompts, group_count)
    compute(env, prompts, longs, workers, lambda f: progress(0.6 + 0.3 * f))
    tb = TimelineBuilder(env.cluster, disaggregated=False)
    steps: list[StepResult] = []
    t = 0.0
    for k, plan in enumerate(schedule(shorts, longs, group_count, prompts)):
        w = workload[min(k, len(workload) - 1)]
        label = w.step if k < len(workload) else workload[-1].step + k - len(workload) + 1
        t = assemble(env, tb, steps, prompts, plan, label, w, t)
    progress(1.0)
    return steps, tb, t


def assemble(
    env: Env,
    tb: TimelineBuilder,
    steps: list[StepResult],
    prompts: Prompts,
    plan: RoundPlan,
    label: int,
    w: StepWorkload,
    t: float,
) -> float:
    """The round's rollout, reward and training on the timeline from `t`; its end."""
    ro = plan.outcome
    assert ro is not None
    trained = prompts.samples(ro.trained)
    total_len = prompts.total_len[trained]
    stats = dict(ro.stats)
    stats.update(
        {
            "round": plan.kind,
            "groups_launched": len(plan.batch),
            "groups_trained": len(ro.trained),
            "groups_deferred": len(ro.unfinished) + len(plan.skipped),
            "groups_waiting": plan.waiting,
        }
    )
    stages, windows = {"rollout": ro.duration}, {"rollout": [t, t + ro.duration]}
    tb.rollout(label, t, t + ro.duration, shift_intervals(ro.busy, t))
    reward = reward_seconds(w, env.policy, total_len.size)
    end = post_rollout(env, tb, label, t + ro.duration, total_len, reward, stages, windows)
    tokens = int(prompts.tokens[trained].sum())
    steps.append(step_result(label, t, end, t, stages, windows, total_len.size, tokens, stats, None))
    return end


SPEC = PolicySpec(
    kind="tail_batching",
    not_on_engine="its rounds are not acted out on a real engine yet",
    disaggregated=False,
    help="colocated, synchronous; short rounds launch more prompts than they train and defer the "
    "unfinished ones to dedicated long rounds (RollPacker)",
    run=run_tail_batching,
    params=TailBatchingParams,
    same_as=lambda prm: "sync" if prm.over_provision == 1.0 else None,
    paper="RollPacker: Mitigating Long-Tail Rollouts for Fast, Synchronous RL Post-Training (NSDI'26, "
    "arXiv 2509.21009)",
)
