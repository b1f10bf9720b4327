"""Independent pieces of a replay computed in forked processes.

`fork_map(fn, n, workers, progress)` evaluates fn(0..n-1) in `workers` processes made by
fork, so `fn` and whatever it reads reach them without pickling; only the results come
back; they end with this process, even one killed (`core.forking.forked_pool`). Used for batch rollouts computed ahead (`parallel_rollouts.py`) and for tail
batching's rounds. Only where forking is safe (`core.forking`) and pays: a workload big
enough that starting the processes costs little next to it (`worth_forking`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from core.forking import fork_workers, forked_pool
from core.simulator.workload import StepWorkload

T = TypeVar("T")

MIN_SAMPLES = 200_000  # below this the work takes about as long as starting the processes
MAX_WORKERS = 4

_JOB: Callable[[int], Any] | None = None  # set in the parent, inherited by fork


def rollout_workers() -> int:
    """How many processes to use here (`core.forking.fork_workers`, at most MAX_WORKERS)."""
    return fork_workers(MAX_WORKERS)


def worth_forking(workload: list[StepWorkload], workers: int | None) -> int:
    """The processes to use for work on `workload` (None: `rollout_workers()`), or 0
    when one process would do or the workload is too small to be worth it."""
    workers = rollout_workers() if workers is None else workers
    if workers < 2 or len(workload) < 2 or sum(w.n_samples for w in workload) < MIN_SAMPLES:
        return 0
    return workers


def _run(indices: list[int]) -> list:
    assert _JOB is not None  # set before the fork
    return [_JOB(i) for i in indices]


def fork_map(fn: Callable[[int], T], n: int, workers: int, progress: Callable[[float], None]) -> list[T]:
    """[fn(0), ..., fn(n-1)] computed in `workers` forked processes."""
    global _JOB
    # small chunks: items differ in cost, and progress moves chunk by chunk
    size = max(1, n // (8 * workers))
    chunks = [list(range(i, min(i + size, n))) for i in range(0, n, size)]
    out: list = [None] * n
    _JOB = fn
    try:
        with forked_pool(workers) as ex:  # they stop when this process dies
            done = 0
            for indices, results in zip(chunks, ex.map(_run, chunks)):
                for i, r in zip(indices, results):
                    out[i] = r
                done += len(indices)
                progress(done / n)
    finally:
        _JOB = None
    return out
