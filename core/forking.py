"""Where work may be spread over forked processes.

Forking is safe only in a process with no other threads (a forked child can deadlock on
a lock some other thread held at the fork), unless a thread is marked with
``fork_safe = True`` (its owner vouches that it holds no lock a child doing pure
computation and file writes could need: it only sleeps and talks to the database,
which such a child never touches), and not in a daemonic process (a Celery prefork
child may not have children).

Forked workers never outlive the process that made them (`forked_pool`): a command
killed with SIGKILL (a timeout) leaves no workers computing for nobody.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

_PR_SET_PDEATHSIG = 1
PARENT_POLL_S = 0.5  # where the kernel cannot tie a child to its parent


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


def set_parent_death_signal(signum: int) -> bool:
    """Have the kernel send `signum` to this process when its parent dies (Linux
    PR_SET_PDEATHSIG; strictly, when the parent's thread that forked it ends); False
    where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int) -> None:
    """In a forked worker: end at once when process `parent_pid` is gone (SIGKILL from
    the kernel on Linux, else a thread polling the parent), also when it died between
    the fork and this call."""
    tied = set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # already orphaned (adopted by init or a subreaper)
        os._exit(1)
    if tied:
        return

    def poll() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    watcher = threading.Thread(target=poll, name="watch-parent", daemon=True)
    watcher.fork_safe = True  # type: ignore[attr-defined]  # holds no lock: sleeps and exits
    watcher.start()


def _start_worker(parent_pid: int, initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    die_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


def forked_pool(
    workers: int, initializer: Callable[..., Any] | None = None, initargs: tuple = ()
) -> ProcessPoolExecutor:
    """A pool of `workers` processes made by fork that end when this process does, even
    killed with SIGKILL (`die_with_parent`); `initializer(*initargs)` runs in each after
    that. Fork pools start every worker at the first submit, in the submitting thread."""
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("fork"),
        initializer=_start_worker,
        initargs=(os.getpid(), initializer, initargs),
    )
