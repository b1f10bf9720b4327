"""A replay's batch rollouts computed ahead, across forked processes.

The policies that roll each step out as one batch on fresh replicas (`sync`,
`one_step_off`) make every step's rollout independent of the others: it depends only on
the step's workload and the engines. Those rollouts are most of a replay's time, so on a
big replay they are computed first, spread over processes, and put in the replay's
rollout cache; the policy's own loop then finds each one there. The results are the
same as computing them in order (`tests/test_parallel_rollouts.py`).

Only where forking is safe (`core.forking`) and pays: a workload big enough that a
fork costs little next to it.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from core.forking import fork_workers
from core.simulator.policies.base import Env, RolloutOutcome, rollout_key, uncached_rollout_batch
from core.simulator.workload import StepWorkload

MIN_SAMPLES = 200_000  # below this the rollouts take about as long as starting the processes
MAX_WORKERS = 4

_JOB: tuple[Env, list[StepWorkload]] | None = None  # set in the parent, inherited by fork


def rollout_workers() -> int:
    """How many processes to use here (`core.forking.fork_workers`, at most MAX_WORKERS)."""
    return fork_workers(MAX_WORKERS)


def _rollouts(indices: list[int]) -> list[RolloutOutcome]:
    assert _JOB is not None  # set before the fork
    env, workload = _JOB
    return [uncached_rollout_batch(env, workload[i], False) for i in indices]


def prefill_rollouts(
    env: Env, workload: list[StepWorkload], progress: Callable[[float], None], workers: int | None = None
) -> bool:
    """Fill `env.rollout_cache` with every step's batch rollout, computed in `workers`
    processes (default `rollout_workers()`); False (nothing done) when one process
    would do, or the workload is too small to be worth it."""
    global _JOB
    workers = rollout_workers() if workers is None else workers
    if workers < 2 or len(workload) < 2 or sum(w.n_samples for w in workload) < MIN_SAMPLES:
        return False
    cache = env.rollout_cache if env.rollout_cache is not None else {}
    env.rollout_cache = cache
    # small chunks: the steps differ in length, and progress moves chunk by chunk
    size = max(1, len(workload) // (8 * workers))
    chunks = [list(range(i, min(i + size, len(workload)))) for i in range(0, len(workload), size)]
    _JOB = (env, workload)
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as ex:
            done = 0
            for indices, outcomes in zip(chunks, ex.map(_rollouts, chunks)):
                for i, outcome in zip(indices, outcomes):
                    cache[rollout_key(env, workload[i])] = outcome
                done += len(indices)
                progress(done / len(workload))
    finally:
        _JOB = None
    return True
