"""The front door, as a user meets it: `ingest` on a fresh data folder, `serve` stopped
by SIGTERM (no worker left behind), `serve` on a busy port (fails at once), the API docs
page (no asset from another host). Real processes, each bounded in time."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import ROOT
from tests.helpers import health, kill_session, live_session_pids, synthetic_rows, wait_session_gone, write_packed_dir


def embedded_env(tmp_path: Path) -> dict[str, str]:
    """The embedded default (SQLite + filesystem transport) in a fresh data folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_") and "DATABASE_URL" not in k}
    env.pop("CELERY_BROKER_URL", None)
    return {**env, "RLVR_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path)}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlvr_explorer", *args]


def start_serve(log, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    """`serve` with one worker process on a free port, in a session of its own."""
    return subprocess.Popen(
        cli("serve", "--no-demo", "--port", str(free_port()), "--concurrency", "1"),
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_ready(proc: subprocess.Popen, log_path: Path, workers: int, timeout: float) -> None:
    """Until `workers` Celery workers have said they are ready."""
    deadline = time.monotonic() + timeout
    while log_path.read_bytes().count(b"ready.") < workers:
        assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ingest_on_a_fresh_data_folder_migrates_first(tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2))
    result = subprocess.run(
        cli("ingest", str(folder), "--name", "first", "--json"),
        env=embedded_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"status":"ready"' in result.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_to_serve_stops_its_worker(tmp_path, sig):
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        cli("serve", "--no-demo", "--port", str(port), "--concurrency", "1"),
        env=embedded_env(tmp_path),
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        health(port, proc, "serve did not answer within 90 s", timeout=90, log=tmp_path / "serve.log")
        # the worker is up too (it is the process to stop with serve)
        deadline = time.monotonic() + 60
        while b"ready." not in (tmp_path / "serve.log").read_bytes():
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.5)
        pids = live_session_pids(proc.pid)
        assert len(pids) >= 2
        # the worker runs at a lower CPU priority than the server
        assert sorted(os.getpriority(os.PRIO_PROCESS, pid) for pid in pids)[-1] == 10
        proc.send_signal(sig)
        proc.wait(30)
        wait_session_gone(proc.pid, 30)
        left = subprocess.run(
            ["ps", "-o", "pid,ppid,stat,cmd", "-s", str(proc.pid)], capture_output=True, text=True
        ).stdout
        assert not live_session_pids(proc.pid), f"left running after {sig.name} to serve:\n{left}"
    finally:
        kill_session(proc.pid)
        log.close()


def test_serve_on_a_busy_port_fails_fast_before_migrating(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.Popen(
            cli("serve", "--no-demo", "--port", str(port)),
            env=embedded_env(tmp_path),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)
            proc.communicate()
            pytest.fail("serve on a busy port still running after 20 s")
        time.sleep(1)
        left = live_session_pids(proc.pid)
        kill_session(proc.pid)
    assert proc.returncode != 0
    assert f"port {port}" in err and "already in use" in err, err[-2000:]
    assert not left, "a process of serve outlived it"
    assert "RLVR Explorer: http" not in out  # no banner
    assert not (tmp_path / "data" / "rlvr.sqlite3").exists()  # no migrations ran


def test_api_docs_page_loads_nothing_from_another_host(env):
    from backend.api import create_app

    with TestClient(create_app()) as client:
        page = client.get("/api/v1/docs")
        assert page.status_code == 200
        assets = re.findall(r"""(?:src|href)=["']([^"']+)""", page.text)
        assert assets and not [a for a in assets if re.match(r"(https?:)?//", a)], assets
        for asset in assets:
            assert client.get(asset).status_code == 200, asset
        assert "/api/v1/openapi.json" in page.text


def test_worker_started_by_serve_stops_when_its_parent_is_gone(tmp_path):
    """SIGKILL to serve (no cleanup can run): the worker still stops by itself."""
    log = (tmp_path / "serve.log").open("wb")
    proc = start_serve(log, embedded_env(tmp_path), ROOT)
    try:
        wait_ready(proc, tmp_path / "serve.log", 1, 90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        wait_session_gone(proc.pid, 30)
        assert not live_session_pids(proc.pid), "the worker outlived a killed serve"
    finally:
        kill_session(proc.pid)
        log.close()


def _server_pids(supervisor: int) -> set[int]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines() if line.strip()]
    return {int(r[0]) for r in rows if int(r[1]) == supervisor and "spawn_main" in r[2]}


def test_api_with_several_server_processes(tmp_path):
    """`api --workers 2`: two server processes, each with its own socket on the port (the
    kernel spreads connections over them); one that dies is replaced; SIGTERM stops all."""
    port = free_port()
    proc = subprocess.Popen(
        cli("api", "--no-dashboard", "--workers", "2", "--port", str(port)),
        env=embedded_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert b"ok" in health(port, proc, "api --workers 2 did not answer")
        servers = _server_pids(proc.pid)
        assert len(servers) == 2, servers
        os.kill(min(servers), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while len(now := _server_pids(proc.pid)) < 2 or not now - servers:
            assert time.monotonic() < deadline, "the killed server process was not replaced"
            time.sleep(0.5)
        assert b"ok" in health(port, proc, "api answered no more after a server process died")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        wait_session_gone(proc.pid, 15)
        assert not live_session_pids(proc.pid), "a server process outlived the supervisor"
    finally:
        kill_session(proc.pid)


def test_api_workers_on_a_busy_port_fail_fast(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = subprocess.run(
            cli("api", "--no-dashboard", "--workers", "2", "--port", str(port)),
            env=embedded_env(tmp_path),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1 and "already in use" in out.stderr, out.stderr[-2000:]


def test_serve_starts_an_engine_worker_when_an_engine_is_installed(tmp_path):
    """RLVR_ENGINE_PYTHON names the engine environment's python (here this one, standing in
    for it: the queue is what is checked): serve runs a second worker reading only the
    engine queue, and stops it with itself."""
    log_path = tmp_path / "serve.log"
    env = {**embedded_env(tmp_path), "RLVR_ENGINE_PYTHON": sys.executable}
    with log_path.open("wb") as log:
        proc = start_serve(log, env, tmp_path)
        try:
            wait_ready(proc, log_path, 2, 120)
            queues = re.findall(r"\.> (\w+)\s+exchange=", log_path.read_text())
            assert sorted(queues) == ["engine", "rlvr"], queues
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            wait_session_gone(proc.pid, 30)
            assert not live_session_pids(proc.pid), "the engine worker outlived serve"
        finally:
            kill_session(proc.pid)
