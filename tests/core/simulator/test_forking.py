"""`core.forking.fork_workers`: more than one process only where forking is safe."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = """
import os, threading
from core.forking import fork_workers
cpus = len(os.sched_getaffinity(0))
print(fork_workers(2) == min(2, cpus))            # no other thread
stop = threading.Event()
safe = threading.Thread(target=stop.wait, daemon=True)
safe.fork_safe = True
safe.start()
print(fork_workers(2) == min(2, cpus))            # a thread vouched for
other = threading.Thread(target=stop.wait, daemon=True)
other.start()
print(fork_workers(2) == 1)                       # any other thread: one process
print(fork_workers(1) == 1)
"""


def test_fork_workers_counts_cpus_and_refuses_beside_unvouched_threads():
    # a fresh interpreter: the test process may have threads other tests left running
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 4, out.stdout
