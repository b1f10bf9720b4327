"""A throwaway, migrated Postgres database for a benchmark run, dropped afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextmanager
def throwaway_database(admin_url: str = DEFAULT_ADMIN_URL) -> Iterator[str]:
    """Yields the URL of a new database at the schema's head; drops it on the way out."""
    from backend.store.migrate import upgrade

    name = f"rlvr_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = admin_url.rsplit("/", 1)[0] + "/" + name
        upgrade(url)
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def cli_ingest(url: str, run: Path, data_dir: Path, *, quiet: bool = False) -> float:
    """Wall seconds of `rlvr-explorer ingest` of `run` into `url`, in a fresh process."""
    env = {**os.environ, "RLVR_DATABASE_URL": url, "RLVR_DATA_DIR": str(data_dir)}
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "rlvr_explorer", "ingest", str(run), "--name", "bench"],
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if quiet else None,
    )
    return time.perf_counter() - t0
