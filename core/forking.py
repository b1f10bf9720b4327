"""Where work may be spread over forked processes.

Forking is safe only in a process with no other threads (a forked child can deadlock on
a lock some other thread held at the fork), unless a thread is marked with
``fork_safe = True`` (its owner vouches that it holds no lock a child doing pure
computation and file writes could need: it only sleeps and talks to the database,
which such a child never touches), and not in a daemonic process (a Celery prefork
child may not have children).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading


def fork_safe() -> bool:
    """Whether this process may fork workers (see the module docstring)."""
    if "fork" not in mp.get_all_start_methods() or mp.current_process().daemon:
        return False
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    return all(getattr(t, "fork_safe", False) for t in others)


def cpus() -> int:
    return len(os.sched_getaffinity(0))


def fork_workers(limit: int) -> int:
    """How many processes to use here: the CPUs this process may run on (at most
    `limit`), or 1 where forking is not safe."""
    return max(1, min(limit, cpus())) if fork_safe() else 1
