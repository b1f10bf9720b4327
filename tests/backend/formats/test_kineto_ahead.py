"""Kineto files read ahead in a forked process (backend/formats/kineto_ahead.py) give
the same trace as reading them in turn: rows, kernel names, metadata and kept events; a
bad file fails the upload with the same error and leaves nothing behind; which uploads
are read ahead.

Each ingest runs `rlvr-explorer ingest` in a fresh interpreter (a process with no other
threads, where the read-ahead may fork), with the size threshold lowered or raised so
that these small files are read ahead or in turn (or left as it is)."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.format_writers import kineto_rank_trace

INGEST = """
import json, runpy, sys
import backend.formats.kineto_ahead as ahead
if sys.argv[1] != "default":
    ahead.MIN_BYTES = 0 if sys.argv[1] == "ahead" else 1 << 62
pools = []
original = ahead.KinetoReadAhead.__init__
def counted(self, *args, **kwargs):
    pools.append(1)
    original(self, *args, **kwargs)
ahead.KinetoReadAhead.__init__ = counted
sys.argv = ["rlvr-explorer", "ingest", *sys.argv[2:], "--name", "gpu", "--json"]
try:
    runpy.run_module("rlvr_explorer", run_name="__main__")
finally:
    print("POOLS", len(pools), file=sys.stderr)
"""


def ingest(
    tmp: Path, mode: str, files: list[Path], pools: int | None = None
) -> tuple[subprocess.CompletedProcess, Path]:
    data = tmp / mode
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_") and k != "DATABASE_URL"}
    env.update(RLVR_DATA_DIR=str(data), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", INGEST, mode, *map(str, files)],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=180,
    )
    expected = int(mode == "ahead") if pools is None else pools
    assert f"POOLS {expected}" in proc.stderr, proc.stderr[-3000:]
    return proc, data


def stored(data: Path) -> dict:
    """Everything the ingest stored for the trace: its rows, names, metadata, kept events."""
    from backend.formats.kineto_events import load_events

    db = sqlite3.connect(data / "rlvr.sqlite3")
    try:
        (trace_id, meta, status, n_events), *_ = db.execute("SELECT id, meta, status, n_gpu_events FROM traces")
        events = db.execute(
            "SELECT event_idx, rank, stream, step, kind, name_id, start_us, dur_us, launch_us FROM gpu_events"
            " WHERE trace_id = ? ORDER BY event_idx",
            (trace_id,),
        ).fetchall()
        names = db.execute(
            "SELECT name_id, name FROM gpu_kernel_names WHERE trace_id = ? ORDER BY name_id", (trace_id,)
        )
        kept = load_events(data / "kineto" / str(trace_id))
        return {
            "status": status,
            "n_events": n_events,
            "meta": json.loads(meta)["kineto"],
            "events": events,
            "names": names.fetchall(),
            "kept": kept,
        }
    finally:
        db.close()


def write_job(folder: Path, ranks: int, bad_rank: int | None = None, gz: bool = False) -> list[Path]:
    folder.mkdir()
    files = []
    for rank in range(ranks):
        data = kineto_rank_trace(rank, seed=rank, bad_event=rank == bad_rank)
        path = folder / (f"rank-{rank}.json" + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(data) if gz else data)
        files.append(path)
    return files


def test_small_files_are_read_in_turn_compressed_or_not(tmp_path):
    """The size rule: files below MIN_BYTES in all are not worth a fork; an uploaded .gz
    counts by the decompressed size its gzip trailer records (backend/ingest/uploads.py)."""
    plain, _ = ingest(tmp_path, "default", write_job(tmp_path / "plain", ranks=2), pools=0)
    assert plain.returncode == 0, plain.stderr
    (tmp_path / "gz-data").mkdir()
    compressed, data = ingest(tmp_path / "gz-data", "default", write_job(tmp_path / "gz", ranks=2, gz=True), pools=0)
    assert compressed.returncode == 0, compressed.stderr
    assert stored(data)["n_events"] == 2 * 3 * 40


def test_read_ahead_stores_the_same_trace_as_reading_in_turn(tmp_path):
    files = write_job(tmp_path / "job", ranks=4)
    (ahead_proc, ahead_data), (turn_proc, turn_data) = (ingest(tmp_path, m, files) for m in ("ahead", "in-turn"))
    assert ahead_proc.returncode == 0 and turn_proc.returncode == 0, (ahead_proc.stderr, turn_proc.stderr)
    ahead, turn = stored(ahead_data), stored(turn_data)
    assert ahead["status"] == "ready" and ahead["n_events"] == 4 * 3 * 40
    assert ahead["meta"]["ranks"] == [0, 1, 2, 3] and ahead["meta"]["gpu_events"] == {str(r): 120 for r in range(4)}
    for key in ("status", "n_events", "meta", "events", "names"):
        assert ahead[key] == turn[key], key
    a, t = ahead["kept"], turn["kept"]
    assert a is not None and t is not None and len(a) == len(t) == 4 * (2 + 3 * (40 * 5 + 2))
    for column in ("rank", "ph", "cat", "name", "ts", "dur", "pid", "tid", "correlation", "flow_id", "bytes"):
        np.testing.assert_array_equal(getattr(a, column), getattr(t, column), err_msg=column)
    assert (a.names, a.cats, a.meta) == (t.names, t.cats, t.meta)


@pytest.mark.parametrize("bad_rank", [0, 2])
def test_a_bad_file_read_ahead_fails_like_in_turn_and_leaves_nothing(tmp_path, bad_rank):
    files = write_job(tmp_path / "job", ranks=3, bad_rank=bad_rank)
    (ahead_proc, ahead_data), (turn_proc, turn_data) = (ingest(tmp_path, m, files) for m in ("ahead", "in-turn"))
    assert ahead_proc.returncode != 0 and turn_proc.returncode != 0
    message = f"rank-{bad_rank}.json, line"
    assert message in ahead_proc.stderr + ahead_proc.stdout and "field 'dur'" in ahead_proc.stderr + ahead_proc.stdout
    ahead_error = [line for line in (ahead_proc.stderr + ahead_proc.stdout).splitlines() if message in line]
    turn_error = [line for line in (turn_proc.stderr + turn_proc.stdout).splitlines() if message in line]
    assert ahead_error == turn_error, (ahead_error, turn_error)
    for data in (ahead_data, turn_data):
        db = sqlite3.connect(data / "rlvr.sqlite3")
        try:
            assert db.execute("SELECT count(*) FROM gpu_events").fetchone() == (0,)
            assert db.execute("SELECT count(*) FROM gpu_kernel_names").fetchone() == (0,)
        finally:
            db.close()
        kept = data / "kineto"
        assert not kept.exists() or not any(kept.rglob("events-*")), sorted(kept.rglob("*"))
