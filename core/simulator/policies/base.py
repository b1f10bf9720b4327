"""What every policy composes: the environment of a replay, a rollout of one step's
groups on fresh replicas, and the stages after rollout (reward, forward passes, update,
weight sync) on the timeline."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.simulator.array_cluster import ArrayCluster
from core.simulator.cluster import RolloutCluster
from core.simulator.config import ClusterConfig, EngineLimits, ModelConfig, Policy
from core.simulator.dispatch import assign_groups
from core.simulator.predictor import EngineCoefficients
from core.simulator.requests import RequestStore
from core.simulator.result import StepResult
from core.simulator.timeline import TimelineBuilder
from core.simulator.training import training_pass, weight_sync_seconds
from core.simulator.workload import StepWorkload

_REFERENCE = [False]


@contextmanager
def reference_engine() -> Iterator[None]:
    """Replay on the token-accurate Python engine (`engine.ReplicaEngine`), the oracle
    the compiled loop is checked against."""
    before = _REFERENCE[0]
    _REFERENCE[0] = True
    try:
        yield
    finally:
        _REFERENCE[0] = before


@dataclass
class Env:
    cluster: ClusterConfig
    model: ModelConfig
    limits: EngineLimits
    policy: Policy
    coefficients: EngineCoefficients
    kv_capacity: float
    # optional {(step, dispatch): RolloutOutcome}: replays of the same rollout layout
    # under other policies / balancing reuse the batch rollouts (the advisor's sweep)
    rollout_cache: dict | None = None
    # the policy's own parameters, resolved (an instance of its spec's `params`)
    params: Any = None
    # the policy's batch rollout of a step (its spec's `rollout`), or None: static dispatch
    rollout: Callable[[Env, StepWorkload, bool], RolloutOutcome] | None = None
    # processes the policy may fork for work it computes ahead (None: the CPUs, where safe)
    workers: int | None = None
    # a Monte-Carlo run's perturbation of request lengths (`request_noise.RequestNoise`),
    # applied by every cluster the policy makes; None: the deterministic replay
    noise: Any = None
    # rollout and training share the GPUs (the policy is not disaggregated): training
    # passes pay the cluster's colocation overhead
    colocated: bool = False

    def new_cluster(
        self,
        start_time: float = 0.0,
        *,
        compiled: bool = True,
        shared_queue: bool = False,
        stealing: bool = False,
        spread_groups: bool = False,
        spec_tail_seqs: int = 0,
    ) -> RolloutCluster:
        """Fresh replicas from `start_time`, sharing work as `RolloutCluster` says
        (shared_queue, stealing, spread_groups), decoding speculatively while at most
        `spec_tail_seqs` sequences run (or the limits' own threshold,
        `EngineLimits.speculation`). Replicas sharing no work (prompts shared by
        `spread_groups` alone couple nothing) run on the compiled loop (`ArrayCluster`)
        unless `reference_engine()` is in force or the
        caller steps them one event at a time (`compiled=False`: each event would cross
        into the loop, which costs more than the Python engine's step)."""
        args: dict[str, Any] = {
            "max_running": self.limits.max_running_seqs,
            "kv_capacity": self.kv_capacity,
            "max_prefill_tokens": self.limits.max_prefill_tokens,
            "start_time": start_time,
            "noise": self.noise,
            "speculation": self.limits.speculation(spec_tail_seqs),
        }
        if compiled and not (shared_queue or stealing) and not _REFERENCE[0]:
            return ArrayCluster(self.cluster.rollout_replicas, self.coefficients, **args, shared_prompts=spread_groups)
        return RolloutCluster(
            self.cluster.rollout_replicas,
            self.coefficients,
            **args,
            shared_queue=shared_queue,
            stealing=stealing,
            spread_groups=spread_groups,
        )


@dataclass
class RolloutOutcome:
    duration: float
    completion: np.ndarray  # per sample, seconds from the rollout start
    replica_busy: list[list[list[float]]]
    stats: dict
    store: RequestStore | None = None  # when asked for (keep_store)
    recompute: list[float] | None = None  # per replica, seconds re-prefilling preempted requests


def group_replicas(env: Env, w: StepWorkload) -> np.ndarray:
    starts = w.group_slices()
    prompt = np.add.reduceat(w.prompt_len, starts[:-1]) if w.n_groups else np.zeros(0)
    total = np.add.reduceat(w.total_len, starts[:-1]) if w.n_groups else np.zeros(0)
    return assign_groups(env.policy.dispatch, env.cluster.rollout_replicas, prompt, total)


def rollout_batch(env: Env, w: StepWorkload, *, keep_store: bool = False) -> RolloutOutcome:
    """All of a step's groups submitted together to fresh replicas (time 0 = start).

    A trajectory completes when its last turn ends plus any tool latency after it."""
    cache = env.rollout_cache
    key = rollout_key(env, w)
    if cache is not None and not keep_store and key in cache:
        return cache[key]
    out = uncached_rollout_batch(env, w, keep_store)
    if cache is not None and not keep_store:
        cache[key] = out
    return out


def rollout_key(env: Env, w: StepWorkload) -> tuple:
    """What a batch rollout depends on beyond the env's engines: the step's workload
    (this very object), how groups are dispatched to replicas, and the policy's own
    rollout with its parameters when it has one."""
    own = None if env.rollout is None else (env.policy.kind, env.params)
    return (w.step, env.policy.dispatch, id(w), own)


def uncached_rollout_batch(env: Env, w: StepWorkload, keep_store: bool) -> RolloutOutcome:
    if env.rollout is not None:
        return env.rollout(env, w, keep_store)
    rc = env.new_cluster()
    _, first, last = rc.add_step(w, np.arange(w.n_samples))
    replica = group_replicas(env, w)[w.group]
    rc.submit(first, replica, 0.0)
    rc.run_all()
    return rollout_outcome(rc, last, keep_store)


def rollout_outcome(rc: RolloutCluster, last: np.ndarray, keep_store: bool) -> RolloutOutcome:
    """A finished batch rollout; `last` is each sample's last request."""
    end = np.asarray(rc.store.end)
    completion = end[last] + np.asarray(rc.store.gap)[last]
    duration = float(completion.max()) if completion.size else 0.0
    recompute = [e.recompute_s for e in rc.replicas] if any(e.preemptions for e in rc.replicas) else None
    stats = rollout_stats(rc, completion, duration)
    return RolloutOutcome(
        duration, completion, rc.busy_intervals(0.0, duration), stats, rc.store if keep_store else None, recompute
    )


def rollout_stats(rc: RolloutCluster, completion: np.ndarray, duration: float) -> dict:
    done = completion[np.isfinite(completion)]
    out = {
        "time_s": duration,
        "preemptions": sum(e.preemptions for e in rc.replicas),
        "decoded_tokens": sum(e.decoded_tokens for e in rc.replicas),
        "prefilled_tokens": sum(e.prefilled_tokens for e in rc.replicas),
        "finished": int(done.size),
    }
    if done.size:
        done = np.sort(done)  # percentiles of a sorted array take half the time (the same values)
        p50, p90, p_last = np.percentile(done, [50, 90, 100])
        t90 = done[max(0, math.ceil(0.9 * done.size) - 1)]
        out.update(
            {
                "p50_traj_s": float(p50),
                "p90_traj_s": float(p90),
                "max_traj_s": float(p_last),
                "last10pct_share": float((duration - t90) / duration) if duration > 0 else 0.0,
            }
        )
    return out


def reward_seconds(w: StepWorkload, policy: Policy, n_samples: int | None = None) -> float:
    if policy.use_recorded_reward and w.reward_time_by_rank is not None and w.reward_time_by_rank.size:
        return float(np.max(w.reward_time_by_rank))
    n = w.n_samples if n_samples is None else n_samples
    if policy.reward_fixed_s == 0 and policy.reward_per_sample_s == 0:
        return 0.0
    return policy.reward_fixed_s + policy.reward_per_sample_s * n / policy.reward_workers


def reward_share(w: StepWorkload, policy: Policy, n_samples: int) -> float:
    """Reward seconds of `n_samples` of step `w` trained apart from the rest: the
    recorded step's reward time pro rata, else the reward model for that many."""
    if policy.use_recorded_reward and w.reward_time_by_rank is not None and w.reward_time_by_rank.size:
        return float(np.max(w.reward_time_by_rank)) * n_samples / max(1, w.n_samples)
    return reward_seconds(w, policy, n_samples)


def post_rollout(
    env: Env,
    tb: TimelineBuilder,
    step: int,
    start: float,
    total_len: np.ndarray,
    reward_s: float,
    stages: dict,
    windows: dict,
) -> float:
    """Reward, forward passes, advantage, update and weight sync from `start`; returns the end."""
    t = train_on(env, tb, step, start, total_len, reward_s, stages, windows)
    return sync_weights(env, tb, step, t, stages, windows)


def train_on(
    env: Env,
    tb: TimelineBuilder,
    step: int,
    start: float,
    total_len: np.ndarray,
    reward_s: float,
    stages: dict,
    windows: dict,
    *,
    adv_s: float | None = None,
    old_log_prob: bool | None = None,
    minibatches: int | None = None,
) -> float:
    """Reward, forward passes (old log-probs unless `old_log_prob` is False, reference),
    advantage and update of the samples `total_len` from `start`; returns the end. Stage
    seconds add up in `stages` and `windows` span every call of the step, so a policy may
    train a step in several local updates."""
    p = env.policy
    t = _stage(tb, step, start, reward_s, "reward", stages, windows, ("idle", "reward_wait"))
    passes = (("old_log_prob", p.old_log_prob_pass if old_log_prob is None else old_log_prob), ("ref", p.ref_pass))
    for name, on in passes:
        stages.setdefault(name, 0.0)
        if on:
            ps = training_pass(total_len, env.model, env.cluster, p, forward_only=True, colocated=env.colocated)
            tb.training_pass(step, name, t, ps)
            t = _stage(tb, step, t, ps.seconds, name, stages, windows, None)
    adv = p.adv_s if adv_s is None else adv_s
    t = _stage(tb, step, t, adv, "adv", stages, windows, ("idle", "stage_serialisation"))
    upd = p if minibatches is None else dataclasses.replace(p, minibatches=minibatches)
    ps = training_pass(total_len, env.model, env.cluster, upd, forward_only=False, colocated=env.colocated)
    tb.training_pass(step, "update_actor", t, ps)
    return _stage(tb, step, t, ps.seconds, "update_actor", stages, windows, None)


def sync_weights(
    env: Env, tb: TimelineBuilder, step: int, start: float, stages: dict, windows: dict, seconds: float | None = None
) -> float:
    """The trainer sending its weights to the rollout engines (busy weight_sync on the
    training GPUs; colocated: on every GPU) from `start`; returns the end."""
    sync = weight_sync_seconds(env.model, env.cluster) if seconds is None else seconds
    return _stage(tb, step, start, sync, "weight_sync", stages, windows, ("busy", "weight_sync"))


def _stage(
    tb: TimelineBuilder,
    step: int,
    start: float,
    seconds: float,
    name: str,
    stages: dict,
    windows: dict,
    draw: tuple[str, str] | None,
) -> float:
    """Account `seconds` of stage `name` from `start` (drawn on the training lanes as
    `draw` = (state, label) unless None); returns its end."""
    end = start + seconds
    stages[name] = stages.get(name, 0.0) + seconds
    lo, hi = windows.get(name, (start, end))
    windows[name] = [min(lo, start), max(hi, end)]
    if draw is not None:
        tb.span(step, start, end, *draw)
    return end


# what a policy's `run` returns: the steps, their timeline and the makespan
PolicyRun = tuple[list[StepResult], TimelineBuilder, float]


def step_result(
    step: int,
    start: float,
    end: float,
    prev_end: float,
    stages: dict[str, float],
    windows: dict[str, list[float]],
    n_samples: int,
    tokens: int,
    rollout_stats: dict,
    completion: np.ndarray | None,
) -> StepResult:
    return StepResult(
        step=step,
        start=start,
        end=end,
        step_time=end - prev_end,
        stages=stages,
        windows=windows,
        n_samples=n_samples,
        generated_tokens=tokens,
        rollout=rollout_stats,
        trajectory_s=completion,
    )


def shift_intervals(busy: list[list[list[float]]], dt: float) -> list[list[list[float]]]:
    return [[[a + dt, b + dt, tail] for a, b, tail in ivs] for ivs in busy]
