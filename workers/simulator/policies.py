"""The four scheduling policies, composing rollout, reward and training stages.

- sync (colocated): per step, rollout → reward → old_log_prob → ref → adv → update →
  weight sync, all GPUs time-shared.
- one_step_off (disaggregated): rollout k starts when rollout k−1 ended and the weights
  of update k−2 have arrived; training k starts when rollout k ended and update k−1 is
  done. Rollout of step k+1 thus overlaps training of step k.
- partial (colocated): the rollout pool holds carried-over groups plus fresh groups up
  to ceil(N · over_provision); it stops when the N-th group has finished; unfinished
  samples carry over with their progress (resumed by recomputing prompt + partial
  response). Training uses the groups finished by the stop.
- async (disaggregated, streaming): step j's groups are released to the rollout pool
  when update j−staleness−1 has finished (its weights are then at most `staleness`
  versions old); the trainer takes groups in completion order, N_j per step.

Each returns (list of StepResult, timeline builder, makespan).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from workers.simulator.cluster import RolloutCluster
from workers.simulator.config import ClusterConfig, EngineLimits, ModelConfig, Policy
from workers.simulator.dispatch import assign_groups
from workers.simulator.predictor import EngineCoefficients
from workers.simulator.requests import step_request_arrays
from workers.simulator.result import StepResult
from workers.simulator.timeline import TimelineBuilder, step_locator
from workers.simulator.training import training_pass, weight_sync_seconds
from workers.simulator.workload import StepWorkload


@dataclass
class Env:
    cluster: ClusterConfig
    model: ModelConfig
    limits: EngineLimits
    policy: Policy
    coefficients: EngineCoefficients
    kv_capacity: float

    def new_cluster(self) -> RolloutCluster:
        return RolloutCluster(
            self.cluster.rollout_replicas, self.coefficients, max_running=self.limits.max_running_seqs,
            kv_capacity=self.kv_capacity, max_prefill_tokens=self.limits.max_prefill_tokens,
        )


@dataclass
class RolloutOutcome:
    duration: float
    completion: np.ndarray  # per sample, seconds from the rollout start
    replica_busy: list[list[list[float]]]
    stats: dict
    store: object = None  # the RequestStore, when asked for


def group_replicas(env: Env, w: StepWorkload) -> np.ndarray:
    starts = w.group_slices()
    prompt = np.add.reduceat(w.prompt_len, starts[:-1]) if w.n_groups else np.zeros(0)
    total = np.add.reduceat(w.total_len, starts[:-1]) if w.n_groups else np.zeros(0)
    return assign_groups(env.policy.dispatch, env.cluster.rollout_replicas, prompt, total)


def rollout_batch(env: Env, w: StepWorkload, *, keep_store: bool = False) -> RolloutOutcome:
    """All of a step's groups submitted together to fresh replicas (time 0 = start).

    A trajectory completes when its last turn ends plus any tool latency after it."""
    rc = env.new_cluster()
    _, first, last = rc.add_step(w, np.arange(w.n_samples))
    replica = group_replicas(env, w)[w.group]
    rc.submit(first, replica, 0.0)
    rc.run_all()
    end = np.asarray(rc.store.end)
    completion = end[last] + np.asarray(rc.store.gap)[last]
    duration = float(completion.max()) if completion.size else 0.0
    return RolloutOutcome(duration, completion, rc.busy_intervals(0.0, duration), _rollout_stats(rc, completion, duration),
                          rc.store if keep_store else None)


def _rollout_stats(rc: RolloutCluster, completion: np.ndarray, duration: float) -> dict:
    done = completion[np.isfinite(completion)]
    out = {
        "time_s": duration,
        "preemptions": sum(e.preemptions for e in rc.replicas),
        "decoded_tokens": sum(e.decoded_tokens for e in rc.replicas),
        "prefilled_tokens": sum(e.prefilled_tokens for e in rc.replicas),
        "finished": int(done.size),
    }
    if done.size:
        p50, p90, p_last = np.percentile(done, [50, 90, 100])
        t90 = np.sort(done)[max(0, math.ceil(0.9 * done.size) - 1)]
        out.update({"p50_traj_s": float(p50), "p90_traj_s": float(p90), "max_traj_s": float(p_last),
                    "last10pct_share": float((duration - t90) / duration) if duration > 0 else 0.0})
    return out


def reward_seconds(w: StepWorkload, policy: Policy, n_samples: int | None = None) -> float:
    if policy.use_recorded_reward and w.reward_time_by_rank is not None and w.reward_time_by_rank.size:
        return float(np.max(w.reward_time_by_rank))
    n = w.n_samples if n_samples is None else n_samples
    if policy.reward_fixed_s == 0 and policy.reward_per_sample_s == 0:
        return 0.0
    return policy.reward_fixed_s + policy.reward_per_sample_s * n / policy.reward_workers


def post_rollout(
    env: Env, tb: TimelineBuilder, step: int, start: float, total_len: np.ndarray, reward_s: float,
    stages: dict, windows: dict,
) -> float:
    """Reward, forward passes, advantage, update and weight sync from `start`; returns the end."""
    t = start
    p = env.policy
    stages["reward"] = reward_s
    windows["reward"] = [t, t + reward_s]
    tb.span(step, t, t + reward_s, "idle", "reward_wait")
    t += reward_s
    for name, on in (("old_log_prob", p.old_log_prob_pass), ("ref", p.ref_pass)):
        if not on:
            stages[name] = 0.0
            continue
        ps = training_pass(total_len, env.model, env.cluster, p, forward_only=True)
        stages[name] = ps.seconds
        windows[name] = [t, t + ps.seconds]
        tb.training_pass(step, name, t, ps)
        t += ps.seconds
    stages["adv"] = p.adv_s
    windows["adv"] = [t, t + p.adv_s]
    tb.span(step, t, t + p.adv_s, "idle", "stage_serialisation")
    t += p.adv_s
    ps = training_pass(total_len, env.model, env.cluster, p, forward_only=False)
    stages["update_actor"] = ps.seconds
    windows["update_actor"] = [t, t + ps.seconds]
    tb.training_pass(step, "update_actor", t, ps)
    t += ps.seconds
    sync = weight_sync_seconds(env.model, env.cluster)
    stages["weight_sync"] = sync
    windows["weight_sync"] = [t, t + sync]
    tb.span(step, t, t + sync, "busy", "weight_sync")
    return t + sync


def _step_result(step, start, end, prev_end, stages, windows, n_samples, tokens, rollout_stats, completion):
    return StepResult(
        step=step, start=start, end=end, step_time=end - prev_end, stages=stages, windows=windows,
        n_samples=n_samples, generated_tokens=tokens, rollout=rollout_stats, trajectory_s=completion,
    )


# --------------------------------------------------------------------------- sync


def run_sync(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]):
    tb = TimelineBuilder(env.cluster, disaggregated=False)
    steps = []
    t = 0.0
    for i, w in enumerate(workload):
        ro = rollout_batch(env, w)
        stages = {"rollout": ro.duration}
        windows = {"rollout": [t, t + ro.duration]}
        tb.rollout(w.step, t, t + ro.duration, _shift(ro.replica_busy, t))
        end = post_rollout(env, tb, w.step, t + ro.duration, w.total_len, reward_seconds(w, env.policy), stages, windows)
        steps.append(_step_result(w.step, t, end, t, stages, windows, w.n_samples, w.generated_tokens, ro.stats, ro.completion))
        t = end
        progress((i + 1) / len(workload))
    return steps, tb, t


def _shift(busy: list[list[list[float]]], dt: float) -> list[list[list[float]]]:
    return [[[a + dt, b + dt, tail] for a, b, tail in ivs] for ivs in busy]


# --------------------------------------------------------------------------- one step off


def run_one_step_off(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]):
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
        r_end = start + ro.duration
        tb.rollout(w.step, start, r_end, _shift(ro.replica_busy, start))
        rollout_end = r_end
        stages = {"rollout": ro.duration}
        windows = {"rollout": [start, r_end]}
        t_start = max(r_end, train_ends[-1] + sync if train_ends else 0.0)
        end = post_rollout(env, tb, w.step, t_start, w.total_len, reward_seconds(w, env.policy), stages, windows)
        train_ends.append(end - sync)
        steps.append(_step_result(w.step, start, end, prev_end, stages, windows, w.n_samples, w.generated_tokens, ro.stats, ro.completion))
        prev_end = end
        progress((i + 1) / len(workload))
    return steps, tb, prev_end


# --------------------------------------------------------------------------- partial rollout


@dataclass
class _Pending:
    """A sample of a launched group: where its request chain resumes, or done."""

    step_idx: int
    sample: int
    req: int  # index into the step's request arrays of the turn to resume
    generated: int  # tokens of that turn already generated
    done: bool = False


class _Pool:
    """Builds request chains for pending samples (fresh or resumed)."""

    def __init__(self, workload: list[StepWorkload]):
        self.workload = workload
        self.arrays = {}

    def arrays_of(self, i: int) -> dict:
        if i not in self.arrays:
            self.arrays[i] = step_request_arrays(self.workload[i])
        return self.arrays[i]

    def chain_end(self, it: _Pending) -> int:
        a = self.arrays_of(it.step_idx)
        return int(a["first"][it.sample + 1]) if it.sample + 1 < a["first"].size else int(a["sample"].size)

    def chains(self, items: list[_Pending]) -> dict[str, np.ndarray]:
        cols = {k: [] for k in ("prefill", "context", "decode", "gap", "next", "owner", "src")}
        firsts, lasts = [], []
        for k, it in enumerate(items):
            a = self.arrays_of(it.step_idx)
            stop = self.chain_end(it)
            firsts.append(len(cols["prefill"]))
            for j in range(it.req, stop):
                ctx = int(a["context"][j])
                pre = int(a["prefill"][j])
                dec = int(a["decode"][j])
                if j == it.req and it.generated:
                    ctx += it.generated
                    pre = ctx  # resumed by recomputing prompt + partial response
                    dec = max(1, dec - it.generated)
                cols["prefill"].append(pre)
                cols["context"].append(ctx)
                cols["decode"].append(dec)
                cols["gap"].append(float(a["gap"][j]))
                cols["next"].append(len(cols["prefill"]) if j + 1 < stop else -1)
                cols["owner"].append(k)
                cols["src"].append(j)
            lasts.append(len(cols["prefill"]) - 1)
        out = {k: np.asarray(v) for k, v in cols.items()}
        out["first"] = np.asarray(firsts, dtype=np.int64)
        out["last"] = np.asarray(lasts, dtype=np.int64)
        return out


def run_partial(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]):
    """Fresh groups come from the trace in order; past its end they cycle through it
    again (a stand-in for the dataset's further prompts), so every step can wait for
    the same N finished groups a synchronous step trains on."""
    p = env.policy
    tb = TimelineBuilder(env.cluster, disaggregated=False)
    pool = _Pool(workload)
    stream = [(i, g) for i, w in enumerate(workload) for g in range(w.n_groups)]
    next_fresh = 0
    carried: list[list[_Pending]] = []
    steps = []
    t = 0.0
    for i, w in enumerate(workload):
        target = min(p.finished_groups or w.n_groups, max(1, len(stream)))
        want = max(target, math.ceil(target * p.over_provision))
        groups = list(carried)
        while len(groups) < want and stream:
            si, g = stream[next_fresh % len(stream)]
            next_fresh += 1
            sl = workload[si].group_slices()
            arr = pool.arrays_of(si)
            groups.append([_Pending(si, s, int(arr["first"][s]), 0) for s in range(sl[g], sl[g + 1])])
        items = [it for grp in groups for it in grp if not it.done]
        group_of_item = np.array([g for g, grp in enumerate(groups) for it in grp if not it.done], dtype=np.int64)
        left_in_group = np.bincount(group_of_item, minlength=len(groups))
        ch = pool.chains(items)
        rc = env.new_cluster()
        base = rc.store.add(ch["prefill"], ch["context"], ch["decode"], ch["gap"], ch["next"], ch["owner"])
        total_prompt = np.array([sum(int(workload[it.step_idx].prompt_len[it.sample]) for it in grp) for grp in groups])
        total_tok = np.array([sum(int(workload[it.step_idx].total_len[it.sample]) for it in grp if not it.done) for grp in groups])
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
        tokens = int(sum(_sample_generated(workload[si], s, pool.arrays_of(si)) for si, s in trained))
        stats = _rollout_stats(rc, np.where(item_done, end[last_rid], np.nan), stop)
        stats.update({"groups_launched": len(groups), "groups_finished": len(done_groups),
                      "groups_carried": len(carried)})
        stages = {"rollout": stop}
        windows = {"rollout": [t, t + stop]}
        tb.rollout(w.step, t, t + stop, _shift(rc.busy_intervals(0.0, stop), t))
        end_t = post_rollout(env, tb, w.step, t + stop, total_len, reward_seconds(w, p, len(trained)), stages, windows)
        steps.append(_step_result(w.step, t, end_t, t, stages, windows, len(trained), tokens, stats, None))
        t = end_t
        progress((i + 1) / len(workload))
    return steps, tb, t


def _sample_generated(w: StepWorkload, s: int, arr: dict) -> int:
    if not w.is_multiturn:
        return int(w.response_len[s])
    lo = arr["first"][s]
    hi = arr["first"][s + 1] if s + 1 < arr["first"].size else arr["sample"].size
    return int(arr["decode"][lo:hi].sum())


# --------------------------------------------------------------------------- fully async


def run_async(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]):
    p = env.policy
    eta = p.staleness
    tb = TimelineBuilder(env.cluster, disaggregated=True)
    sync = weight_sync_seconds(env.model, env.cluster)
    rc = env.new_cluster()
    pool = _Pool(workload)
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
            for r in last[starts[g]:starts[g + 1]].tolist():
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
        take = completed[need - w.n_groups:need]
        ready = take[-1][1] if take else train_end_prev
        lens, tokens, comp = [], 0, []
        for gid, tdone in take:
            si, samples = group_samples[gid]
            lens.append(workload[si].total_len[samples])
            tokens += sum(_sample_generated(workload[si], s, pool.arrays_of(si)) for s in samples.tolist())
            comp.append(tdone - released_at[si])
        total_len = np.concatenate(lens) if lens else np.zeros(0, np.int64)
        t_start = max(ready, train_end_prev + (sync if j else 0.0))
        stages = {"rollout": float(ready - (released_at[j] if j < len(released_at) else ready))}
        windows = {"rollout": [released_at[j] if j < len(released_at) else ready, ready]}
        end = post_rollout(env, tb, w.step, t_start, total_len, reward_seconds(w, p, total_len.size), stages, windows)
        train_end_prev = end - sync
        comp_arr = np.asarray(comp)
        stats = {"time_s": stages["rollout"], "groups_consumed": len(take),
                 "stale_groups": int(sum(1 for gid, _ in take if group_samples[gid][0] != j)),
                 "p50_group_s": float(np.median(comp_arr)) if comp_arr.size else None,
                 "max_group_s": float(comp_arr.max()) if comp_arr.size else None}
        steps.append(_step_result(w.step, windows["rollout"][0], end, prev_end, stages, windows, int(total_len.size), tokens, stats, None))
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


RUNNERS = {"sync": run_sync, "one_step_off": run_one_step_off, "partial": run_partial, "async": run_async}
