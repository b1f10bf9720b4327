"""Bounds for a deployment shared for months (both databases): the team storage quota
(413 naming quota and usage, nothing kept), what one file may expand to (bytes, samples
per file and per step, one JSON record), the memory an ingestion takes on the worst
cases those bounds allow (measured in a fresh process), ingest progress that moves
through a long load, and worker pool processes recycled after their tasks."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import zipfile

import pytest
from sqlalchemy import func, select, update

from tests.conftest import ROOT, start_worker, stop_worker, wait_for_job
from tests.helpers import jsonl, synthetic_rows, zip_folder


def upload(api, name: str, content: bytes, path: str = "/api/v1/traces"):
    return api.post(path, files=[("files", (name, content, "application/octet-stream"))])


def packed(seed: int, groups: int = 8, steps: int = 1) -> bytes:
    return jsonl([r for step in synthetic_rows(steps=steps, groups=groups, n=4, seed=seed) for r in step])


def _set_quota(api, quota: int | None) -> None:
    from backend.store.db import session_scope
    from backend.store.models import Team

    team_id = api.get("/api/v1/me").json()["team"]["id"]
    with session_scope() as s:
        s.execute(update(Team).where(Team.id == team_id).values(quota_bytes=quota))


def _stored_uploads(env) -> list:
    return [p for p in (ROOT / env["RLVR_DATA_DIR"] / "uploads").glob("*")]


# --------------------------------------------------------------------------- quota


def test_quota_refuses_an_upload_past_it_and_keeps_nothing(api, env):
    first = packed(1)
    _set_quota(api, len(first) + 100)
    r = upload(api, "packed_lengths_step_0.jsonl", first)
    assert r.status_code == 201, r.text
    storage = api.get("/api/v1/storage").json()
    assert storage == {
        "used_bytes": len(first),
        "quota_bytes": len(first) + 100,
        "remaining_bytes": 100,
        "traces": 1,
    }
    before = set(_stored_uploads(env))  # (other tests' queued uploads share the folder)
    refused = upload(api, "packed_lengths_step_1.jsonl", packed(2))
    assert refused.status_code == 413, refused.text
    message = refused.json()["detail"]["message"]
    assert "quota" in message and "used" in message and "this upload needs" in message, message
    assert api.get("/api/v1/traces").json()["total"] == 1 and set(_stored_uploads(env)) == before
    trace_id = r.json()["id"]
    attach = upload(api, "packed_lengths_step_1.jsonl", packed(3), f"/api/v1/traces/{trace_id}/files")
    assert attach.status_code == 413, attach.text
    assert api.get(f"/api/v1/traces/{trace_id}").json()["n_steps"] == 1
    _set_quota(api, len(first))  # exactly full: refused before anything is read
    full = upload(api, "packed_lengths_step_1.jsonl", b"x")
    assert full.status_code == 413 and "reached" in full.json()["detail"]["message"], full.text
    assert api.delete(f"/api/v1/traces/{trace_id}").status_code == 204  # deleting frees it
    assert api.get("/api/v1/storage").json()["used_bytes"] == 0
    assert upload(api, "packed_lengths_step_1.jsonl", first).status_code == 201


def test_team_quota_overrides_the_deployment_default(api, env, monkeypatch):
    from backend.store.db import reset_caches

    monkeypatch.setenv("RLVR_TEAM_QUOTA_BYTES", "10")
    reset_caches()
    assert api.get("/api/v1/storage").json()["quota_bytes"] == 10
    assert upload(api, "packed_lengths_step_0.jsonl", packed(4)).status_code == 413
    _set_quota(api, 0)  # the team's own: no limit
    assert api.get("/api/v1/storage").json()["quota_bytes"] is None
    assert upload(api, "packed_lengths_step_0.jsonl", packed(4)).status_code == 201


def test_stored_bytes_count_what_an_archive_expanded_to(api):
    body = packed(5, groups=64, steps=4)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("run/packed_lengths_step_0.jsonl", body)
    r = upload(api, "run.zip", buf.getvalue())
    assert r.status_code == 201, r.text
    assert len(buf.getvalue()) < len(body)
    assert api.get("/api/v1/storage").json()["used_bytes"] == len(body)


def test_cli_quota_shows_and_sets(env, team_key):
    import orjson
    from typer.testing import CliRunner

    from backend.auth import team_for_key
    from backend.store.db import session_scope
    from rlvr_explorer.cli import app

    with session_scope() as s:
        team = team_for_key(s, team_key).name
    runner = CliRunner()
    set_ = runner.invoke(app, ["quota", team, "--set", str(5 * 1024**3), "--json"])
    assert set_.exit_code == 0, set_.output
    assert orjson.loads(set_.output) == {
        "team": team,
        "used_bytes": 0,
        "quota_bytes": 5 * 1024**3,
        "own_quota": True,
        "traces": 0,
    }
    shown = runner.invoke(app, ["quota", team])
    assert "quota 5.0 GiB (its own)" in shown.output, shown.output
    back = runner.invoke(app, ["quota", team, "--default"])
    assert "the deployment's default" in back.output, back.output


# --------------------------------------------------------------------------- bounds


def test_a_file_expanding_past_max_file_bytes_is_refused(api, env, monkeypatch):
    from backend.store.db import reset_caches

    body = packed(6, groups=64)
    monkeypatch.setenv("RLVR_MAX_FILE_BYTES", str(len(body) - 1))
    reset_caches()
    r = upload(api, "packed_lengths_step_0.jsonl.gz", gzip.compress(body))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["file"] == "packed_lengths_step_0.jsonl.gz" and "RLVR_MAX_FILE_BYTES" in detail["message"]
    assert api.get("/api/v1/traces").json()["total"] == 0
    monkeypatch.setenv("RLVR_MAX_FILE_BYTES", str(len(body)))
    reset_caches()
    assert upload(api, "packed_lengths_step_0.jsonl.gz", gzip.compress(body)).status_code == 201


def test_samples_past_their_bound_are_refused(api, env, monkeypatch, tmp_path):
    from backend.store.db import reset_caches

    monkeypatch.setenv("RLVR_MAX_SAMPLES_PER_FILE", "100")
    reset_caches()
    r = upload(api, "packed_lengths_step_0.jsonl", packed(7, groups=8, steps=4))  # 128 samples
    assert r.status_code == 422, r.text
    assert "more than 100 samples in one file (RLVR_MAX_SAMPLES_PER_FILE)" in r.json()["detail"]["message"]

    monkeypatch.setenv("RLVR_MAX_SAMPLES_PER_STEP", "40")
    reset_caches()
    folder = tmp_path / "run"  # two files of 32 samples each, all of step 0
    folder.mkdir()
    rows = synthetic_rows(steps=1, groups=8, n=4, seed=8)[0]
    (folder / "packed_lengths_step_0.jsonl").write_bytes(jsonl(rows))
    (folder / "packed_lengths_step_0b.jsonl").write_bytes(
        jsonl([{**r, "local_index": r["local_index"] + 1000} for r in rows])
    )
    r = upload(api, "run.zip", zip_folder(folder))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["field"] == "step" and "step 0 has more than 40 samples" in detail["message"], detail
    assert detail["file"].endswith("packed_lengths_step_0b.jsonl"), detail
    assert api.get("/api/v1/traces").json()["total"] == 0


def test_one_json_record_past_its_bound_is_refused_while_read(api, monkeypatch):
    from backend.formats import jsonl as toolkit

    monkeypatch.setattr(toolkit, "MAX_RECORD_BYTES", 4096)
    monkeypatch.setattr(toolkit, "BLOCK_BYTES", 1024)  # (lines within one block are shorter than it)
    line = b'{"step": 0, "rank": 9, "local_index": 0, "input": 5, "output": [' + b",".join([b"7"] * 3000) + b"]}\n"
    r = upload(api, "packed_lengths_step_0.jsonl", packed(9) + line)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["line"] == 9 and "longer than 4,096 bytes" in detail["message"], detail
    compact = b'{"0": {"input": [5], "output": [[' + b",".join([b"7"] * 3000) + b"]]}}"
    r = upload(api, "run.json", compact)
    assert r.status_code == 422 and "JSON document longer" in r.json()["detail"]["message"], r.text


# --------------------------------------------------------------------------- memory

PEAK = r"""
import os, sys
from pathlib import Path
from backend.auth import create_team
from backend.ingest.service import accept_upload
from backend.ingest.uploads import local_files
from backend.settings import get_settings
from backend.store.db import session_scope
with session_scope() as s:
    team_id = create_team(s, "peak-" + os.urandom(4).hex())[0].id
with session_scope() as s:
    trace = accept_upload(s, get_settings(), team_id=team_id, stored=local_files([Path(sys.argv[1])]),
                          name="peak", forced_format=None, max_response_len=None, inline=True).trace
    counts = (trace.n_samples, trace.n_gpu_events)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(counts[0], counts[1], hwm // 1024)
"""


def _peak_mb(env: dict, path) -> tuple[int, int, int]:
    """(samples, GPU events, peak resident MiB) of a fresh process ingesting `path`."""
    run_env = {**os.environ, **env}
    out = subprocess.run(
        [sys.executable, "-c", PEAK, str(path)], env=run_env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    samples, events, peak = map(int, out.stdout.split()[-3:])
    return samples, events, peak


@pytest.mark.own_deployment  # minutes of ingestion under load: alone on its database
def test_worst_one_line_file_stays_under_the_memory_ceiling(env, tmp_path):
    """The most samples one JSON line may hold (MAX_RECORD_BYTES of one-digit lengths),
    all in one step (max_samples_per_step): one batch and one step's summaries."""
    from backend.formats.jsonl import MAX_RECORD_BYTES
    from backend.ingest.bounds import INGEST_MEMORY_CEILING_MB
    from backend.settings import get_settings

    n = min(get_settings().max_samples_per_step, (MAX_RECORD_BYTES - 200) // 2)
    path = tmp_path / "packed_lengths_step_0.jsonl"
    with path.open("wb") as f:
        f.write(b'{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 5, "output": [7')
        f.write(b",7" * (n - 1) + b"]}\n")
    assert path.stat().st_size <= MAX_RECORD_BYTES
    samples, _events, peak = _peak_mb(env, path)
    print(f"\n[{env['RLVR_DATABASE_URL'][:8]}] one line of {samples:,} samples: peak {peak} MiB")
    assert samples == n
    assert peak < INGEST_MEMORY_CEILING_MB


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
@pytest.mark.own_deployment
def test_worst_kineto_file_stays_under_the_memory_ceiling(env, tmp_path):
    """A Kineto trace just under max_file_bytes (Kineto files are decoded whole)."""
    from backend.ingest.bounds import INGEST_MEMORY_CEILING_MB
    from backend.settings import get_settings
    from bench.kineto import generate_rank_trace

    path = tmp_path / "rank-0.json"
    limit = get_settings().max_file_bytes
    generate_rank_trace(path, 0, 1, steps=10, n_gpu=int(limit / 1060), seed=0)  # ~1,048 bytes per GPU event
    size = path.stat().st_size
    assert 0.9 * limit < size <= limit, (size, limit)
    _samples, events, peak = _peak_mb(env, path)
    print(f"\n[kineto] {size / 2**20:.0f} MiB, {events:,} GPU events: peak {peak} MiB")
    assert events > 0 and peak < INGEST_MEMORY_CEILING_MB


# --------------------------------------------------------------------------- progress


def test_progress_moves_through_a_gz_upload(env, team_key, tmp_path):
    """A .gz file's size comes from its trailer, so the load shows its share (no 0.99
    from the first batch on), then the per-step summaries, then ready."""
    from backend.auth import team_for_key
    from backend.ingest.service import accept_upload
    from backend.ingest.uploads import local_files
    from backend.settings import get_settings
    from backend.store.db import session_scope

    body = packed(10, groups=2000, steps=8)
    path = tmp_path / "packed_lengths_run.jsonl.gz"
    path.write_bytes(gzip.compress(body))
    seen: list[tuple[float, str]] = []
    with session_scope() as s:
        team_id = team_for_key(s, team_key).id
        accept_upload(
            s,
            get_settings(),
            team_id=team_id,
            stored=local_files([path]),
            name="gz",
            forced_format="polytrace-packed",
            max_response_len=None,
            inline=True,
            progress=lambda f, m: seen.append((f, m)),
        )
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions), seen
    assert fractions[-1] == 1.0 and seen[-1][1] == "ready"
    assert any(m == "per-step summaries" and 0.85 <= f < 1.0 for f, m in seen), seen
    loading = [f for f, m in seen if m.startswith("loaded")]
    assert all(f <= 0.85 for f in loading), seen


# --------------------------------------------------------------------------- workers


def test_worker_pool_processes_are_recycled(api, env, tmp_path, monkeypatch):
    """worker_max_tasks_per_child=1: each ingestion runs in a fresh pool process."""
    from backend.store.db import new_session, reset_caches
    from backend.store.models import Job

    queue = f"{env.get('RLVR_QUEUE_NAME', 'rlvr')}-recycle-{os.getpid()}"
    extra = {"RLVR_QUEUE_NAME": queue, "RLVR_INLINE_INGEST_MAX_BYTES": "0", "RLVR_WORKER_MAX_TASKS_PER_CHILD": "1"}
    for k, v in extra.items():
        monkeypatch.setenv(k, v)
    reset_caches()
    worker = start_worker({**env, **extra}, tmp_path / "worker.log", concurrency=1)
    try:
        jobs = []
        for seed in (11, 12, 13):
            r = upload(api, f"packed_lengths_step_{seed}.jsonl", packed(seed))
            assert r.status_code == 202, r.text
            jobs.append(wait_for_job(api, r.json()["job"]["id"]))
    finally:
        stop_worker(worker)
    assert all(j["status"] == "succeeded" for j in jobs), jobs
    with new_session() as s:
        holders = s.scalars(select(Job.worker).where(Job.id.in_([j["id"] for j in jobs]))).all()
        assert s.scalar(select(func.count()).select_from(Job).where(Job.kind == "ingest")) >= 3
    pids = {h.split(":")[1] for h in holders}
    assert len(pids) == 3, holders  # one pool process per task
