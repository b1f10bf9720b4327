"""Processes a command forks stop when it dies, even killed with SIGKILL (as
`subprocess.run(timeout=...)` sends): `rlvr-explorer advise`'s sweep workers, and every
process pool made with `core.forking.forked_pool` (the replay's, the advisor's and the
Kineto readers')."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlvr_explorer.cli import app
from tests.conftest import ROOT
from tests.helpers import synthetic_rows, write_packed_dir

runner = CliRunner()
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name: [state, ppid, ...]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def children(pid: int) -> dict[int, str]:
    """{child pid: its start time} of the live processes whose parent is `pid`."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields and fields[1] == str(pid) and fields[0] != "Z":
                out[int(entry)] = fields[19]
    return out


def alive(procs: dict[int, str]) -> list[int]:
    """Those of `procs` still running (a zombie, or a new process with a reused pid, is not)."""
    return [pid for pid, start in procs.items() if (f := _stat(pid)) and f[0] != "Z" and f[19] == start]


def kill_and_watch(proc: subprocess.Popen, wait_for_children_s: float = 120.0, gone_within_s: float = 15.0) -> None:
    """Wait until `proc` has forked children, SIGKILL it, and assert they end too."""
    deadline = time.monotonic() + wait_for_children_s
    forked: dict[int, str] = {}
    while not forked and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        forked = children(proc.pid)
    assert forked, f"no child process seen (exit code {proc.poll()}): {proc.stderr.read() if proc.stderr else ''}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    left = alive(forked)
    deadline = time.monotonic() + gone_within_s
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = alive(forked)
    for pid in left:  # never leave them behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} of {len(forked)} forked processes outlived their killed parent"


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_advise_killed_leaves_no_workers_behind(env, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=4, groups=64, n=8, seed=11))
    ingested = runner.invoke(app, ["ingest", str(folder), "--name", "orphans", "--json"])
    assert ingested.exit_code == 0, ingested.output
    trace_id = re.search(r'\{"id":(\d+)', ingested.output)
    assert trace_id is not None, ingested.output
    proc_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")} | env
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "advise", trace_id.group(1), "--workers", "2", "--no-calibrate"],
        env=proc_env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kill_and_watch(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


POOL_SCRIPT = """
import time
from core.forking import forked_pool

def work(_):
    time.sleep(600)  # a worker computing long after its parent is gone

with forked_pool(2) as pool:
    futures = [pool.submit(work, i) for i in range(2)]
    time.sleep(600)
"""


def test_a_forked_pool_ends_with_its_killed_parent():
    proc = subprocess.Popen(
        [sys.executable, "-c", POOL_SCRIPT],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    try:
        kill_and_watch(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_every_process_pool_is_a_forked_pool():
    """Pools are made by `forked_pool` only, so each one's workers die with its parent."""
    made_here = []
    for package in ("core", "backend", "workers", "rlvr_explorer"):
        for path in (ROOT / package).rglob("*.py"):
            if path != ROOT / "core" / "forking.py" and "ProcessPoolExecutor(" in path.read_text():
                made_here.append(str(path.relative_to(ROOT)))
    assert made_here == []
