"""Rounds of prompt groups raced on fresh replicas: the trace's groups numbered over all
its steps (`Prompts`), and one round (`run_round`): launch some groups, stop when a
target number of them have every sample finished (or all of them), report what
finished. A round's outcome is plain data, so rounds can be computed in other processes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.simulator.dispatch import assign_groups
from core.simulator.policies.base import Env, rollout_stats
from core.simulator.requests import request_starts, sample_tokens, select_samples, step_request_arrays
from core.simulator.workload import StepWorkload


class Prompts:
    """The trace's prompt groups, numbered over all steps, with their requests."""

    def __init__(self, workload: list[StepWorkload]) -> None:
        arrays = [step_request_arrays(w) for w in workload]
        s_off = np.cumsum([0] + [w.n_samples for w in workload])
        r_off = np.cumsum([0] + [a["sample"].size for a in arrays])
        cat = np.concatenate
        self.arr = {k: cat([a[k] for a in arrays]) for k in ("prefill", "context", "decode", "gap", "prefix")}
        self.arr["sample"] = cat([a["sample"] + o for a, o in zip(arrays, s_off)])
        self.arr["first"] = cat([a["first"] + o for a, o in zip(arrays, r_off)])
        self.arr["next"] = cat([np.where(a["next"] >= 0, a["next"] + o, -1) for a, o in zip(arrays, r_off)])
        self.req_start = request_starts(self.arr)  # once: the trace's requests are many
        self.start = np.r_[cat([w.group_slices()[:-1] + o for w, o in zip(workload, s_off)]), s_off[-1]]
        self.n = self.start.size - 1
        self.step = np.repeat(np.arange(len(workload)), [w.n_groups for w in workload])  # step index per group
        self.total_len = cat([w.total_len for w in workload])
        self.tokens = cat([sample_tokens(a, w.n_samples) for a, w in zip(arrays, workload)])
        heads = self.start[:-1]
        self.longest = np.maximum.reduceat(self.tokens, heads) if self.n else heads
        self.prompt_tokens = np.add.reduceat(cat([w.prompt_len for w in workload]), heads) if self.n else heads
        self.total_tokens = np.add.reduceat(self.total_len, heads) if self.n else heads

    def samples(self, batch: list[int]) -> np.ndarray:
        """The samples of `batch`, group after group."""
        g = np.asarray(batch, dtype=np.int64)
        sizes = self.start[g + 1] - self.start[g]
        return np.repeat(self.start[g] - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())


@dataclass
class RoundOutcome:
    duration: float
    trained: list[int]  # groups with every sample finished by the stop
    unfinished: list[int]  # the others, in launch order
    busy: list[list[list[float]]]  # per replica [start, end, tail] within the round
    stats: dict  # `base.rollout_stats` of the trained samples


def _groups_done(rids: np.ndarray, sample_of_last: np.ndarray, group_of: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per group: whether the finished requests `rids` include the last request of each
    of its samples (a sample finishes once, so counting them is enough)."""
    s = sample_of_last[rids]
    count = np.bincount(group_of[s[s >= 0]], minlength=sizes.size)
    return (count == sizes) & (sizes > 0)


def run_round(env: Env, prompts: Prompts, batch: list[int], need: int) -> RoundOutcome:
    """Launch `batch` on fresh replicas (groups dispatched by `Policy.dispatch`); stop
    when `need` groups have every sample finished (run all when need == len(batch))."""
    g = np.asarray(batch, dtype=np.int64)
    arr = select_samples(prompts.arr, prompts.samples(batch), prompts.req_start)
    group_of = np.repeat(np.arange(len(batch)), prompts.start[g + 1] - prompts.start[g])  # per sample
    rc = env.new_cluster()
    base = rc.add_requests(arr, np.repeat(group_of, arr["last"] - arr["first"] + 1))
    first, last = base + arr["first"], base + arr["last"]
    replica = assign_groups(
        env.policy.dispatch, env.cluster.rollout_replicas, prompts.prompt_tokens[g], prompts.total_tokens[g]
    )
    rc.submit(first, replica[group_of], 0.0)
    trained = np.ones(len(batch), dtype=bool)
    if need < len(batch):
        sample_of_last = np.full(len(rc.store), -1, dtype=np.int64)
        sample_of_last[last] = np.arange(last.size)
        sizes = np.bincount(group_of, minlength=len(batch))
        reached, ends, rids = rc.run_groups_log(need, 0, sample_of_last, group_of, sizes.copy())
        stop = float(ends[-1]) if reached else None
        trained = _groups_done(rids, sample_of_last, group_of, sizes)
    else:
        rc.run_all()
        stop = None
    end = np.asarray(rc.store.end)
    if stop is None:
        stop = float(end[last].max()) if last.size else 0.0
    rc.advance_to(stop)
    return RoundOutcome(
        duration=stop,
        trained=[p for p, ok in zip(batch, trained.tolist()) if ok],
        unfinished=[p for p, ok in zip(batch, trained.tolist()) if not ok],
        busy=rc.busy_intervals(0.0, stop),
        stats=rollout_stats(rc, end[last[trained[group_of]]], stop),
    )
