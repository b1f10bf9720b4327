"""Tail batching (RollPacker, NSDI'26, arXiv 2509.21009), colocated and synchronous:
prompts that give long responses are deferred into a few dedicated long rounds, so the
other (short) rounds finish fast. Each round is one training step: rollout, reward,
forward passes, update and weight sync as in `sync`.

- Short round: the step's prompt count P is the target; ceil(P · over_provision) prompts
  are launched and the round stops when P of them have finished every sample. The
  prompts not finished by then are aborted and wait, in that order, for a long round
  (they start again from scratch there: RollPacker re-submits the prompt).
- Long round: as soon as P prompts wait, the next round runs P of them (the oldest
  first) without over-provisioning, to completion. When the trace's prompts run out,
  the ones still waiting run in long rounds of at most P.
- Predictor of the long prompts: `speculative` (RollPacker's race to completion above:
  nothing is known in advance) or `oracle` (the trace's lengths: of the launched
  prompts, those with the longest sample are deferred without being run, and the rest
  run to completion).

Every prompt of the trace is trained exactly once, in its own round or a later long
round; rounds beyond the trace's step count are numbered on from its last step. The
groups of a round are dispatched to replicas by `Policy.dispatch`, as for `sync`.

Not modelled: over-provisioning of responses within a prompt (RollPacker also samples
more responses than it keeps; the trace records only the kept ones), the elastic
parallelism planner, the reward scheduler and the stream trainer.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.simulator.cluster import RolloutCluster
from core.simulator.dispatch import assign_groups
from core.simulator.policies.base import (
    Env,
    post_rollout,
    reward_seconds,
    rollout_stats,
    shift_intervals,
    step_result,
)
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.requests import sample_tokens, select_samples, step_request_arrays
from core.simulator.result import StepResult
from core.simulator.timeline import TimelineBuilder
from core.simulator.workload import StepWorkload

Prompt = tuple[int, int]  # (step index, group)


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
class Round:
    duration: float
    trained: list[Prompt]
    deferred: list[Prompt]
    rc: RolloutCluster
    completion: np.ndarray  # per trained sample, from the round's start


class Prompts:
    """The trace's prompts: request arrays per step, sample ranges, lengths."""

    def __init__(self, workload: list[StepWorkload]) -> None:
        self.workload = workload
        self.arrays = [step_request_arrays(w) for w in workload]
        self.starts = [w.group_slices() for w in workload]
        self.tokens = [sample_tokens(a, w.n_samples) for a, w in zip(self.arrays, workload)]
        self.total_len = [w.total_len for w in workload]

    def samples(self, p: Prompt) -> np.ndarray:
        i, g = p
        return np.arange(self.starts[i][g], self.starts[i][g + 1])

    def longest(self, p: Prompt) -> int:
        return int(self.tokens[p[0]][self.samples(p)].max(initial=0))

    def requests(self, batch: list[Prompt]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The batch's requests (concatenated) and the batch index of each request."""
        parts = [select_samples(self.arrays[i], self.samples((i, g))) for i, g in batch]
        sizes = [p["sample"].size for p in parts]
        offsets = np.r_[0, np.cumsum(sizes)][:-1]
        out = {k: np.concatenate([p[k] for p in parts]) for k in ("prefill", "context", "decode", "gap", "prefix")}
        out["next"] = np.concatenate([np.where(p["next"] >= 0, p["next"] + o, -1) for p, o in zip(parts, offsets)])
        out["first"] = np.concatenate([p["first"] + o for p, o in zip(parts, offsets)])
        out["last"] = np.concatenate([p["last"] + o for p, o in zip(parts, offsets)])
        owner = np.repeat(np.arange(len(batch)), sizes)
        return out, owner


def run_round(env: Env, prompts: Prompts, batch: list[Prompt], need: int) -> Round:
    """Launch `batch` on fresh replicas; stop when `need` prompts have every sample
    finished (all of them when need == len(batch))."""
    arr, owner = prompts.requests(batch)
    rc = env.new_cluster()
    base = rc.add_requests(arr, owner)
    first, last = base + arr["first"], base + arr["last"]
    prompt_of = owner[arr["first"]]  # batch index per sample
    prompt_tok = np.array([prompts.workload[p[0]].prompt_len[prompts.samples(p)].sum() for p in batch])
    total_tok = np.array([prompts.total_len[p[0]][prompts.samples(p)].sum() for p in batch])
    replica = assign_groups(env.policy.dispatch, env.cluster.rollout_replicas, prompt_tok, total_tok)
    rc.submit(first, replica[prompt_of], 0.0)
    left = np.bincount(prompt_of, minlength=len(batch)).tolist()
    prompt_of_last = dict(zip(last.tolist(), prompt_of.tolist()))
    finished: list[int] = []

    def on_finish(done: list[int], t: float) -> bool:
        for r in done:
            b = prompt_of_last.get(r)
            if b is not None:
                left[b] -= 1
                if left[b] == 0:
                    finished.append(b)
        return len(finished) >= need

    stop = rc.run_until(on_finish)
    end = np.asarray(rc.store.end)
    if stop is None:
        stop = float(np.nanmax(end[last])) if last.size else 0.0
    rc.advance_to(stop)
    trained = set(finished)
    keep = np.isin(prompt_of, list(trained))
    return Round(
        duration=stop,
        trained=[p for b, p in enumerate(batch) if b in trained],
        deferred=[p for b, p in enumerate(batch) if b not in trained],
        rc=rc,
        completion=end[last[keep]],
    )


def next_batch(prm: TailBatchingParams, prompts: Prompts, fresh: deque, waiting: deque, target: int):
    """The next round's prompts, how many must finish, its kind, and what the oracle
    defers without running."""
    if len(waiting) >= target or not fresh:
        batch = [waiting.popleft() for _ in range(min(target, len(waiting)))]
        return batch, len(batch), "long", []
    batch = [fresh.popleft() for _ in range(min(math.ceil(target * prm.over_provision), len(fresh)))]
    need = min(target, len(batch))
    if prm.predictor == "oracle" and need < len(batch):
        by_length = sorted(range(len(batch)), key=lambda b: prompts.longest(batch[b]))
        run = set(by_length[:need])
        return (
            [p for b, p in enumerate(batch) if b in run],
            need,
            "short",
            [p for b, p in enumerate(batch) if b not in run],
        )
    return batch, need, "short", []


def run_tail_batching(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]):
    prm: TailBatchingParams = env.params
    prompts = Prompts(workload)
    tb = TimelineBuilder(env.cluster, disaggregated=False)
    fresh: deque[Prompt] = deque((i, g) for i, w in enumerate(workload) for g in range(w.n_groups))
    waiting: deque[Prompt] = deque()
    n_prompts = len(fresh)
    steps: list[StepResult] = []
    t, done = 0.0, 0
    while fresh or waiting:
        k = len(steps)
        w = workload[min(k, len(workload) - 1)]
        label = w.step if k < len(workload) else workload[-1].step + k - len(workload) + 1
        batch, need, kind, skipped = next_batch(prm, prompts, fresh, waiting, max(1, w.n_groups))
        rd = run_round(env, prompts, batch, need)
        waiting.extend(rd.deferred + skipped)
        total_len = np.concatenate([prompts.total_len[p[0]][prompts.samples(p)] for p in rd.trained] or [[]])
        tokens = int(sum(prompts.tokens[p[0]][prompts.samples(p)].sum() for p in rd.trained))
        stats = rollout_stats(rd.rc, rd.completion, rd.duration)
        stats.update(
            {
                "round": kind,
                "groups_launched": len(batch),
                "groups_trained": len(rd.trained),
                "groups_deferred": len(rd.deferred) + len(skipped),
                "groups_waiting": len(waiting),
            }
        )
        stages, windows = {"rollout": rd.duration}, {"rollout": [t, t + rd.duration]}
        tb.rollout(label, t, t + rd.duration, shift_intervals(rd.rc.busy_intervals(0.0, rd.duration), t))
        reward = reward_seconds(w, env.policy, total_len.size)
        end = post_rollout(env, tb, label, t + rd.duration, total_len, reward, stages, windows)
        steps.append(step_result(label, t, end, t, stages, windows, total_len.size, tokens, stats, None))
        t = end
        done += len(rd.trained)
        progress(done / n_prompts)
    return steps, tb, t


SPEC = PolicySpec(
    kind="tail_batching",
    disaggregated=False,
    help="colocated, synchronous; short rounds launch more prompts than they train and defer the "
    "unfinished ones to dedicated long rounds (RollPacker)",
    run=run_tail_batching,
    params=TailBatchingParams,
    same_as=lambda prm: "sync" if prm.over_provision == 1.0 else None,
    paper="RollPacker: Mitigating Long-Tail Rollouts for Fast, Synchronous RL Post-Training (NSDI'26, "
    "arXiv 2509.21009)",
)
