"""Whether a worker is running, for messages such as "analyses queued: they start now".

Each worker's sweeper (backend.jobs.sweeper.Sweeper) touches a file named after it under
``DATA_DIR/workers/`` every `job_sweep_s`; a file touched within three periods is a live
worker. Workers on other machines without the shared data folder are not seen (the
messages then say "none seen here").
"""

from __future__ import annotations

import time
from pathlib import Path

from backend.settings import Settings

STALE_PERIODS = 3


def _folder(settings: Settings) -> Path:
    return settings.data_dir / "workers"


def mark_alive(settings: Settings, worker: str) -> None:
    folder = _folder(settings)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / worker.replace("/", "_")).touch()


def mark_gone(settings: Settings, worker: str) -> None:
    (_folder(settings) / worker.replace("/", "_")).unlink(missing_ok=True)


def live_workers(settings: Settings) -> int:
    """Workers that reported within STALE_PERIODS sweeps."""
    folder = _folder(settings)
    if not folder.is_dir():
        return 0
    horizon = time.time() - STALE_PERIODS * settings.job_sweep_s - 1.0
    return sum(1 for p in folder.iterdir() if p.is_file() and p.stat().st_mtime >= horizon)
