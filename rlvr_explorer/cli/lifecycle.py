"""What `serve` needs to start and stop cleanly: its listening socket bound before
anything else runs, and a worker process that never outlives it.

The worker runs in a process group of its own (so its pool children are stopped with it)
and is tied to `serve` three ways: `serve` stops the group on exit (also after SIGTERM,
which uvicorn re-raises once it has shut down), the kernel sends it SIGTERM when `serve`
dies (PR_SET_PDEATHSIG, Linux), and the worker polls its parent and stops when it is gone
(`watch_parent`, everywhere else and for a parent killed with SIGKILL between fork and
prctl)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from core.forking import set_parent_death_signal

PARENT_ENV = "RLVR_PARENT_PID"


class PortInUse(RuntimeError):
    pass


def bind_listener(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound now: a port already taken fails here, before
    migrations or a worker start (uvicorn is then handed this very socket)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(f"port {port} on {host} is already in use (another server running?)") from exc
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(False)
    return sock


def tie_to_parent() -> None:
    """SIGTERM to this process when its parent dies (Linux; elsewhere a no-op)."""
    set_parent_death_signal(signal.SIGTERM)


WORKER_NICE = 10  # beside the server on one machine: reads come before ingestion


def start_worker(concurrency: int, python: str = sys.executable, queues: str | None = None) -> subprocess.Popen:
    """The worker (of the environment of `python`, reading `queues` or the default one), in
    its own process group, told who its parent is, at a lower CPU priority than the server
    (pages stay quick while it ingests or replays)."""
    cmd = [python, "-m", "rlvr_explorer", "worker", f"--concurrency={concurrency}", f"--nice={WORKER_NICE}"]
    return subprocess.Popen(
        cmd + ([f"--queues={queues}"] if queues else []),
        env={**os.environ, PARENT_ENV: str(os.getpid())},
        process_group=0,
        preexec_fn=tie_to_parent,  # runs in the child between fork and exec
    )


def start_engine_worker() -> subprocess.Popen | None:
    """A worker of the engine environment reading only the engine queue, when an engine is
    installed (RLVR_ENGINE_PYTHON, or vLLM here); None otherwise (engine replays then wait
    in their queue for an engine worker elsewhere)."""
    from backend.jobs.contracts import ENGINE_QUEUE
    from engine.client import EngineMissing, engine_python

    try:
        return start_worker(1, engine_python(), ENGINE_QUEUE)
    except EngineMissing:
        return None


def warm_replay_loop() -> subprocess.Popen:
    """Compile the replay loop into its cache beside the worker (a no-op when the install
    did: image build, CI), so no replay a user asks for waits for it."""
    return subprocess.Popen(
        [sys.executable, "-m", "core.simulator.warm"],
        stdout=subprocess.DEVNULL,
        process_group=0,
        preexec_fn=tie_to_parent,
    )


def stop_worker(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to the worker (a warm shutdown: it stops its pool), then SIGKILL to its
    whole group, at once when it has exited (a pool child left behind) or after `grace_s`."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)


def exit_on_signal(signum, _frame) -> None:
    """SIGTERM as an exception, so `finally` blocks (stopping the worker) run."""
    raise SystemExit(128 + signum)


def watch_parent(poll_s: float = 1.0, grace_s: float = 15.0) -> None:
    """In a worker started by `serve`: stop when `serve` is gone (SIGTERM to itself, a
    warm shutdown; SIGKILL to its group if that has not ended it after `grace_s`)."""
    parent = os.environ.pop(PARENT_ENV, None)
    if not parent:
        return
    parent_pid = int(parent)

    def poll() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        if os.getpgrp() == os.getpid():  # the group is the worker's own (see start_worker)
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=poll, name="watch-parent", daemon=True).start()
