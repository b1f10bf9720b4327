"""A replay's batch rollouts computed ahead, across forked processes.

The policies that roll each step out as one batch on fresh replicas (`sync`,
`one_step_off`, and those with their own batch rollout) make every step's rollout
independent of the others: it depends only on the step's workload and the engines.
Those rollouts are most of a replay's time, so on a big replay they are computed first,
spread over processes (`forked.fork_map`), and put in the replay's rollout cache; the policy's own loop then finds each one there. The results are the
same as computing them in order (`tests/core/simulator/test_parallel_rollouts.py`).

Only where forking is safe (`core.forking`) and pays (`forked.worth_forking`).
"""

from __future__ import annotations

from collections.abc import Callable

from core.simulator.forked import MIN_SAMPLES, fork_map, rollout_workers, worth_forking
from core.simulator.policies.base import Env, rollout_key, uncached_rollout_batch
from core.simulator.workload import StepWorkload

__all__ = ["MIN_SAMPLES", "prefill_rollouts", "rollout_workers"]


def prefill_rollouts(
    env: Env, workload: list[StepWorkload], progress: Callable[[float], None], workers: int | None = None
) -> bool:
    """Fill `env.rollout_cache` with every step's batch rollout, computed in `workers`
    processes (default `forked.rollout_workers()`); False (nothing done) when one
    process would do, or the workload is too small to be worth it."""
    workers = worth_forking(workload, workers)
    if not workers:
        return False
    cache = env.rollout_cache if env.rollout_cache is not None else {}
    env.rollout_cache = cache
    outcomes = fork_map(lambda i: uncached_rollout_batch(env, workload[i], False), len(workload), workers, progress)
    for w, outcome in zip(workload, outcomes):
        cache[rollout_key(env, w)] = outcome
    return True
