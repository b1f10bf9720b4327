"""`rlvr-explorer api --workers N`: N server processes, each with a listening socket of
its own on the same port (SO_REUSEPORT), so the kernel spreads new connections over them.

Why not uvicorn's own `workers`: its processes share one socket, and asyncio accepts
every waiting connection in one go (up to the backlog), so a burst of clients lands on
whichever process wakes first — 45 / 6, 41 / 10 and 38 / 13 of 50 readers on two
processes, measured with `ss` — and stays there while kept alive. With a socket per
process the kernel hashes each connection to one of them.

The port is checked first with an ordinary bind (a taken port fails before any process
starts); a process that dies is restarted, and one that keeps dying stops the server.
SIGTERM / SIGINT stop every process (uvicorn's graceful shutdown), and each process
also stops when this supervisor is gone (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import socket
import threading
import time

from rlvr_explorer.cli.lifecycle import bind_listener, tie_to_parent

RESTARTS_PER_MINUTE = 5


def reuseport_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def _serve_one(host: str, port: int, app: str) -> None:  # in each server process
    import uvicorn

    tie_to_parent()
    config = uvicorn.Config(app, factory=True, host=host, port=port, log_level="info")
    uvicorn.Server(config).run(sockets=[reuseport_socket(host, port)])


def run_api_processes(host: str, port: int, workers: int, app: str) -> int:
    """Run `workers` server processes of the app factory `app` ("module:function")
    until SIGTERM / SIGINT; the exit code."""
    bind_listener(host, port).close()  # PortInUse now, before anything starts
    ctx = multiprocessing.get_context("spawn")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}

    def start():
        proc = ctx.Process(target=_serve_one, args=(host, port, app), name="rlvr-api", daemon=False)
        proc.start()
        return proc

    procs = [start() for _ in range(workers)]
    restarts: list[float] = []
    code = 0
    try:
        while not stop.wait(0.5):
            for i, proc in enumerate(procs):
                if proc.is_alive():
                    continue
                now = time.monotonic()
                restarts = [t for t in restarts if t > now - 60] + [now]
                if len(restarts) > RESTARTS_PER_MINUTE:
                    print(f"server process exited (code {proc.exitcode}) {len(restarts)} times in a minute: stopping")
                    code = 1
                    stop.set()
                    break
                print(f"server process {proc.pid} exited (code {proc.exitcode}): starting another")
                procs[i] = start()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: uvicorn finishes the requests in progress
        deadline = time.monotonic() + 30
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)
    return code
