"""Private servers on their own loopback ports, stopped and started at will: a
redis-server without persistence and a Postgres cluster in a temporary folder (initdb,
trust auth). The fault tests (tests/backend/jobs/test_faults.py) and the chaos run (bench/chaos.py)
use them; the shared servers on the standard ports are never touched. Also how the
benches stop the product's own processes (`stop_process`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class ServerUnavailable(RuntimeError):
    """The server's binaries are not installed."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Ask a process started in a session of its own (`start_new_session`) to stop with
    `sig`; past `timeout` seconds, SIGKILL its whole process group (a worker's pool)."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


class PrivateRedis:
    """A redis-server of its own (no persistence) on a free port."""

    def __init__(self, folder: Path):
        if shutil.which("redis-server") is None:
            raise ServerUnavailable("redis-server not installed")
        self.folder, self.port, self.proc = folder, free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.folder,
            stdout=(self.folder / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class PrivatePostgres:
    """A Postgres cluster of its own (initdb in a temp folder, trust auth, its own port),
    stopped with `pg_ctl stop -m fast` and started again at will."""

    def __init__(self):
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not bins:
            raise ServerUnavailable("no Postgres server binaries in /usr/lib/postgresql/*/bin")
        self.bin = bins[-1].parent
        self.port = free_port()
        # Postgres refuses to run as root: as root the cluster belongs to `postgres`, in a
        # folder it can reach (a private temp folder of root's is not).
        self.folder = Path(tempfile.mkdtemp(prefix="rlvr-private-pg-"))
        self.data = self.folder / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/rlvr"

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=timeout)

    def init(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "rlvr")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off -c max_connections=300"
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "log"), "-o", options, "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(self.folder, ignore_errors=True)
