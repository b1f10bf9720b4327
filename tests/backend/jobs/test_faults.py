"""Faults, for real: a worker SIGKILLed mid-job (both brokers), the broker down and back,
the database restarted during an upload. Each ends with the job done once, or failed
with a reason, and no partial rows; none leaves a job stuck.

Job leases are short here (RLVR_JOB_LEASE_S) so a lost worker is noticed in seconds.
Servers that are stopped are private ones the test starts on their own port (a
redis-server, a Postgres cluster in a temp folder); the shared ones are never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from bench._servers import PrivatePostgres, PrivateRedis, ServerUnavailable, free_port
from tests.conftest import start_worker, stop_worker, wait_for_job
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder

LEASE = {"RLVR_JOB_LEASE_S": "4", "RLVR_JOB_SWEEP_S": "1", "RLVR_JOB_REQUEUE_S": "30"}


def _sample_count(trace_id: int) -> int:
    from backend.store.db import new_session
    from backend.store.models import Sample

    with new_session() as s:
        return s.scalar(select(func.count()).select_from(Sample).where(Sample.trace_id == trace_id)) or 0


@pytest.fixture()
def fault_env(env, monkeypatch):
    """Short leases, a queue of this test's own (only workers started here take its
    jobs), every upload ingested by a worker."""
    from backend.store.db import reset_caches

    queue = f"{env.get('RLVR_QUEUE_NAME', 'rlvr')}-faults-{os.getpid()}-{time.monotonic_ns()}"
    extra = {**LEASE, "RLVR_QUEUE_NAME": queue, "RLVR_INLINE_INGEST_MAX_BYTES": "0"}
    for key, value in extra.items():
        monkeypatch.setenv(key, value)
    reset_caches()
    return {**env, **extra}


def _wait_running(api, job_id: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        if job["status"] == "running" and job["progress"] > 0:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job never got going: {job}")


# --------------------------------------------------------------------------- worker killed


def _start_workers(*specs: tuple[dict[str, str], Path]) -> list[subprocess.Popen]:
    """Start workers side by side (each takes seconds to be ready)."""
    procs: list = [None] * len(specs)
    errors: list[BaseException] = []

    def start(i: int) -> None:
        try:
            procs[i] = start_worker(specs[i][0], specs[i][1], concurrency=1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(len(specs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for p in procs:
            if p is not None:
                stop_worker(p)
        raise errors[0]
    return procs


def test_killed_worker_job_is_finished_by_another(api, fault_env, tmp_path):
    """SIGKILL the worker mid-ingestion: on Redis its message waits for the visibility
    timeout (an hour) and on the embedded transport it is gone, so it is the lease that
    brings the job back: the other worker on the queue, alive all along, sees it expire
    and sends the job again; the partial rows are removed before the retry."""
    from backend.store.db import new_session
    from backend.store.models import Job

    per_step = synthetic_rows(steps=16, groups=640, n=8)  # 81,920 samples: seconds of work
    archive = zip_folder(write_packed_dir(tmp_path / "run", per_step))
    workers = _start_workers((fault_env, tmp_path / "a.log"), (fault_env, tmp_path / "b.log"))
    try:
        r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
        assert r.status_code == 202, r.text
        job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
        _wait_running(api, job_id)
        with new_session() as s:
            holder = s.get(Job, job_id).worker  # host:pid:thread of the pool process
        group = os.getpgid(int(holder.split(":")[1]))  # its worker's (a session of its own)
        (killed,) = [w for w in workers if w.pid == group]
        os.killpg(killed.pid, signal.SIGKILL)  # the whole worker: main process and pool
        killed.wait()
        killed_at = time.monotonic()
        assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "running"
        partial = _sample_count(trace_id)
        deadline = time.monotonic() + 60
        while api.get(f"/api/v1/jobs/{job_id}").json()["attempts"] < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        retried_s = time.monotonic() - killed_at
        job = wait_for_job(api, job_id, timeout=60)
    finally:
        for w in workers:
            stop_worker(w)
    done_s = time.monotonic() - killed_at
    print(
        f"\n[{fault_env['RLVR_BROKER_URL'][:5]}] killed with {partial:,} rows in; after the kill: "
        f"job running again {retried_s:.1f} s, done {done_s:.1f} s"
    )
    assert job["status"] == "succeeded", job
    assert job["attempts"] == 2
    with new_session() as s:
        assert s.get(Job, job_id).worker != holder  # the survivor finished it
    trace = api.get(f"/api/v1/traces/{trace_id}").json()
    assert trace["status"] == "ready"
    assert trace["n_samples"] == _sample_count(trace_id) == 16 * 640 * 8


def _drop_messages(environment: dict[str, str]) -> int:
    """Lose the queue's messages, as a worker killed with them fetched does."""
    queue = environment["RLVR_QUEUE_NAME"]
    if environment["RLVR_BROKER_URL"].startswith("redis"):
        import redis

        client = redis.Redis.from_url(environment["RLVR_BROKER_URL"])
        keys = [k for k in client.scan_iter(match=f"{queue}*") if client.type(k) == b"list"]
        return client.delete(*keys) if keys else 0
    files = list((Path(environment["RLVR_DATA_DIR"]) / "queue").glob(f"*.{queue}.msg"))
    for f in files:
        f.unlink()
    return len(files)


def test_lost_message_is_sent_again(api, fault_env, tmp_path):
    """A queued job whose message is gone (the embedded transport deletes a message when
    a worker fetches it, so one killed with a prefetched job loses it) is sent again by
    a worker's sweeper, which looks into the queue for the job's message (so long before
    `job_requeue_s`, and without resending jobs that still have one). Both brokers are
    looked into; the resend is run end to end on the embedded one."""
    from backend.jobs.broker import queued_job_ids

    r = api.post("/api/v1/traces", files=[("files", ("run.zip", _small_zip(4), "application/zip"))])
    assert r.status_code == 202, r.text
    job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
    assert job_id in queued_job_ids()
    assert _drop_messages(fault_env) >= 1
    assert job_id not in queued_job_ids()
    if fault_env["RLVR_BROKER_URL"].startswith("redis"):
        return  # (Redis keeps a fetched message until it is acknowledged)
    # Leases and the age rule far longer than the test: only looking finds the loss.
    slow = {**fault_env, "RLVR_JOB_LEASE_S": "300", "RLVR_JOB_REQUEUE_S": "600"}
    worker = start_worker(slow, tmp_path / "worker.log", concurrency=1)
    try:
        job = wait_for_job(api, job_id, timeout=60)
    finally:
        stop_worker(worker)
    assert job["status"] == "succeeded" and job["attempts"] == 1, job
    assert api.get(f"/api/v1/traces/{trace_id}").json()["status"] == "ready"


@pytest.mark.parametrize("backend_env", ["postgres"], indirect=True)
def test_message_fetched_by_a_killed_worker_counts_as_lost(api, fault_env):
    """Redis keeps a fetched message as unacknowledged until the visibility timeout (an
    hour). A queued job's message fetched longer than a lease ago went with a worker
    killed before it started the job: the sweeper must count it lost and send it again
    (bench/chaos.py found jobs queued for an hour this way)."""
    import json

    import redis

    from backend.jobs.broker import queued_job_ids

    r = api.post("/api/v1/traces", files=[("files", ("run.zip", _small_zip(9), "application/zip"))])
    assert r.status_code == 202, r.text
    job_id = r.json()["job"]["id"]
    client = redis.Redis.from_url(fault_env["RLVR_BROKER_URL"])
    queue = fault_env["RLVR_QUEUE_NAME"]
    payload = json.loads(client.rpop(queue))  # fetched, as a worker does
    tag = payload["properties"]["delivery_tag"]
    client.hset("unacked", tag, json.dumps([payload, queue, queue]))
    try:
        client.zadd("unacked_index", {tag: time.time()})
        assert job_id in queued_job_ids()  # just fetched: its worker is about to claim it
        client.zadd("unacked_index", {tag: time.time() - float(LEASE["RLVR_JOB_LEASE_S"]) - 1})
        assert job_id not in queued_job_ids()  # fetched a lease ago, still queued: lost
    finally:
        client.hdel("unacked", tag)
        client.zrem("unacked_index", tag)


def test_job_of_a_worker_lost_too_often_fails_with_reason(api, fault_env):
    """The sweeper gives up after job_max_attempts: failed, with the reason, no rows."""
    from backend.jobs.sweeper import sweep
    from backend.settings import get_settings
    from backend.store.db import get_engine, new_session
    from backend.store.models import Job, Trace, utcnow

    r = api.post("/api/v1/traces", files=[("files", ("run.zip", _small_zip(1), "application/zip"))])
    assert r.status_code == 202, r.text
    job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
    with new_session() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                status="running",
                worker="gone:1",
                attempts=get_settings().job_max_attempts,
                lease_until=utcnow() - timedelta(seconds=1),
            )
        )
        s.execute(update(Trace).where(Trace.id == trace_id).values(status="ingesting"))
        s.commit()
    sweep(get_engine())  # (a worker's sweeper running beside this test may get there first)
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["status"] == "failed" and "gone:1" in job["error"] and "attempts" in job["error"]
    assert not (get_settings().upload_dir / job["params"]["upload"]).exists()  # the stored upload goes too
    trace = api.get(f"/api/v1/traces/{trace_id}").json()
    assert trace["status"] == "failed" and trace["error"]
    assert _sample_count(trace_id) == 0


def test_ingestion_taken_over_commits_nothing(api, fault_env):
    """A worker that lost its job's lease (paused past it; another worker owns the job
    now) finishes its load but its fence stops the commit: the trace is neither made
    ready nor failed by it, and the job is left to the new owner."""
    from backend.ingest.service import ingest_stored
    from backend.jobs import leases
    from backend.jobs.fence import Abandoned
    from backend.settings import get_settings
    from backend.store.db import new_session
    from backend.store.models import Job, utcnow

    r = api.post("/api/v1/traces", files=[("files", ("run.zip", _small_zip(8), "application/zip"))])
    assert r.status_code == 202, r.text
    job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
    with new_session() as s:
        folder = get_settings().upload_dir / s.get(Job, job_id).params["upload"]
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(status="running", worker="other:1:1", attempts=2, lease_until=utcnow() + timedelta(minutes=1))
        )
        s.commit()
    with pytest.raises(Abandoned):
        ingest_stored(trace_id, sorted(folder.iterdir()), get_settings(), None, None, fence=leases.fence(job_id))
    trace = api.get(f"/api/v1/traces/{trace_id}").json()
    assert trace["status"] not in ("ready", "failed") and trace["n_samples"] == 0, trace
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["status"] == "running" and job["attempts"] == 2
    with new_session() as s:
        assert s.get(Job, job_id).worker == "other:1:1"
        s.execute(update(Job).where(Job.id == job_id).values(status="failed", error="test over"))
        s.commit()


def test_sweeper_drops_an_abandoned_inline_ingestion(api, env):
    """An inline ingestion whose process died (nobody touches its trace any more) is
    removed with its rows; a live one (touched within two leases) is left alone."""
    from backend.jobs.sweeper import sweep
    from backend.settings import get_settings
    from backend.store.db import get_engine, new_session
    from backend.store.models import Trace, utcnow

    ids = []
    for seed in (5, 6):
        r = api.post("/api/v1/traces", files=[("files", ("run.zip", _small_zip(seed), "application/zip"))])
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    dead, live = ids
    with new_session() as s:
        s.execute(update(Trace).where(Trace.id.in_(ids)).values(status="ingesting"))
        s.execute(update(Trace).where(Trace.id == dead).values(updated_at=utcnow() - timedelta(seconds=9)))
        s.commit()
    sweep(get_engine(), get_settings().model_copy(update={"job_lease_s": 4.0}))
    assert api.get(f"/api/v1/traces/{dead}").status_code == 404
    assert _sample_count(dead) == 0
    assert api.get(f"/api/v1/traces/{live}").json()["status"] == "ingesting"
    with new_session() as s:  # not to be swept by a later test's worker
        s.execute(update(Trace).where(Trace.id == live).values(status="ready"))
        s.commit()


def test_reupload_of_a_stuck_trace_starts_it_again(api, fault_env):
    """A trace whose ingest job lost its worker is not handed back: it starts again."""
    from backend.store.db import new_session
    from backend.store.models import Job, utcnow

    archive = _small_zip(2)
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert r.status_code == 202, r.text
    job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
    again = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert again.status_code == 200 and again.json()["id"] == trace_id  # queued: alive
    with new_session() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(status="running", worker="gone:2", attempts=1, lease_until=utcnow() - timedelta(seconds=1))
        )
        s.commit()
    restarted = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert restarted.status_code == 202, restarted.text
    body = restarted.json()
    # A fresh trace and job (SQLite may reuse the ids of the stuck ones, deleted with them).
    assert body["job"]["status"] == "queued" and body["job"]["attempts"] == 0
    assert body["trace"]["status"] == "pending"
    with new_session() as s:
        assert s.scalar(select(func.count()).select_from(Job).where(Job.worker == "gone:2")) == 0


@pytest.mark.own_deployment  # its sweep must see no other test's ingestion
def test_sweeper_keeps_a_slow_inline_ingestion(team_key, env, tmp_path, monkeypatch):
    """An inline ingestion whose batch holds the database past two leases (on SQLite its
    write lock keeps the heartbeat's touch out all that while) is alive: a sweep right
    after that batch's commit leaves it, and it ends ready with every row."""
    from backend.auth import team_for_key
    from backend.ingest import pipeline
    from backend.ingest.service import accept_upload
    from backend.ingest.uploads import local_files
    from backend.jobs.sweeper import sweep
    from backend.settings import get_settings
    from backend.store.db import get_engine, reset_caches, session_scope

    lease = 1.0
    monkeypatch.setenv("RLVR_JOB_LEASE_S", str(lease))
    reset_caches()
    insert, held = pipeline.bulk_insert, []

    def slow_insert(conn, table, columns):
        n = insert(conn, table, columns)
        if not held:  # the first batch keeps its transaction open for three leases
            held.append(table)
            time.sleep(3 * lease)
        return n

    monkeypatch.setattr(pipeline, "bulk_insert", slow_insert)
    sweeps: list[dict] = []

    def progress(_fraction: float, message: str) -> None:
        if message.startswith("loaded") and not sweeps:  # that batch is committed
            sweeps.append(sweep(get_engine(), get_settings()))

    groups, n = 4, 2
    rows = synthetic_rows(steps=1, groups=groups, n=n, seed=31)
    path = write_packed_dir(tmp_path / "run", rows) / f"packed_lengths_step_{rows[0][0]['step']}.jsonl"
    with session_scope() as s:
        team_id = team_for_key(s, team_key).id
        trace = accept_upload(
            s,
            get_settings(),
            team_id=team_id,
            stored=local_files([path]),
            name="slow",
            forced_format=None,
            max_response_len=None,
            inline=True,
            progress=progress,
        ).trace
        assert held and sweeps and sweeps[0]["dropped"] == 0, sweeps
        assert trace.status == "ready" and trace.n_samples == groups * n, (trace.status, trace.n_samples)
    assert _sample_count(trace.id) == groups * n


def _small_zip(seed: int) -> bytes:
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        return zip_folder(write_packed_dir(Path(tmp) / "run", synthetic_rows(steps=2, groups=4, n=2, seed=seed)))


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
@pytest.mark.own_deployment
def test_requests_while_the_queue_is_unreachable(api, env, monkeypatch):
    """Nothing listens at the broker's address: an inline upload is still ingested (its
    default analyses wait in the outbox), an analysis request is a 503 whose retry hands
    back the one job it kept, and a workload (never reused) is a 503 that keeps nothing.
    (A database of its own: the session's worker would send that outbox through its own
    broker and run it.)"""
    from backend.store.db import new_session, reset_caches
    from backend.store.models import Job

    monkeypatch.setenv("RLVR_BROKER_URL", f"redis://127.0.0.1:{free_port()}/0")
    reset_caches()
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", _small_zip(7), "application/zip"))])
    assert r.status_code == 201, r.text
    trace_id = r.json()["id"]
    with new_session() as s:
        waiting = s.execute(select(Job.status, Job.dispatched_at).where(Job.trace_id == trace_id)).all()
    assert waiting and all(status == "queued" and sent is None for status, sent in waiting)

    body = {"kind": "lengths", "params": {"infer_cap_min_hits": 4}}
    down = api.post(f"/api/v1/traces/{trace_id}/analyses", json=body)
    assert down.status_code == 503 and int(down.headers["Retry-After"]) > 0, down.text
    again = api.post(f"/api/v1/traces/{trace_id}/analyses", json=body)
    assert again.status_code == 200 and again.json()["status"] == "queued", again.text

    with new_session() as s:
        before = s.scalar(select(func.count()).select_from(Job).where(Job.kind == "workload"))
    w = api.post("/api/v1/workloads", json={"trace_id": trace_id, "steps": 0})
    assert w.status_code == 503, w.text
    with new_session() as s:
        assert s.scalar(select(func.count()).select_from(Job).where(Job.kind == "workload")) == before


# --------------------------------------------------------------------------- private servers


def _private(server, *args):
    """A private server (bench/_servers.py), or a skip naming what is not installed."""
    try:
        return server(*args)
    except ServerUnavailable as exc:
        pytest.skip(str(exc))


# --------------------------------------------------------------------------- broker down


@pytest.mark.parametrize("backend_env", ["postgres"], indirect=True)
def test_broker_down_and_back(api, fault_env, tmp_path, monkeypatch):
    """Redis down at upload time: 503 with Retry-After; the job row waits in the outbox
    (the same upload meanwhile hands back its trace), and once Redis is back the workers'
    sweeper sends it: the trace is ingested once and its analyses run."""
    from backend.store.db import new_session, reset_caches
    from backend.store.models import Job

    redis = _private(PrivateRedis, tmp_path)
    redis.start()
    monkeypatch.setenv("RLVR_BROKER_URL", redis.url)
    reset_caches()
    worker_env = {**fault_env, "RLVR_BROKER_URL": redis.url}
    worker = start_worker(worker_env, tmp_path / "worker.log", concurrency=1)
    try:
        redis.stop()
        archive = _small_zip(3)
        t0 = time.monotonic()
        r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
        answered_s = time.monotonic() - t0
        assert r.status_code == 503, r.text
        assert int(r.headers["Retry-After"]) > 0
        again = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
        assert again.status_code == 200, again.text
        trace_id = again.json()["id"]
        assert again.json()["status"] == "pending" and again.json()["job_id"] is not None
        job_id = again.json()["job_id"]
        with new_session() as s:
            job = s.get(Job, job_id)
            assert job.status == "queued" and job.dispatched_at is None  # in the outbox
        time.sleep(2)
        redis.start()
        back = time.monotonic()
        job = wait_for_job(api, job_id, timeout=45)
        done_s = time.monotonic() - back
        assert job["status"] == "succeeded", job
        assert job["attempts"] == 1
        trace = api.get(f"/api/v1/traces/{trace_id}").json()
        assert trace["status"] == "ready" and trace["n_samples"] == _sample_count(trace_id) == 2 * 4 * 2
        # Nothing stuck: the default analyses queued after ingestion run too.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with new_session() as s:
                statuses = set(s.scalars(select(Job.status).where(Job.trace_id == trace_id)))
            if statuses <= {"succeeded", "failed"}:
                break
            time.sleep(0.2)
        assert statuses == {"succeeded"}, statuses

        # An analysis requested while Redis is down: 503, the same request then hands
        # back the one job it made (no duplicate), which runs once Redis is back.
        redis.stop()
        body = {"kind": "lengths", "params": {"infer_cap_min_hits": 3}}
        down = api.post(f"/api/v1/traces/{trace_id}/analyses", json=body)
        assert down.status_code == 503 and "Retry-After" in down.headers, down.text
        again = api.post(f"/api/v1/traces/{trace_id}/analyses", json=body)
        assert again.status_code == 200 and again.json()["status"] == "queued", again.text
        redis.start()
        analysis = wait_for_job(api, again.json()["id"], timeout=30)
        assert analysis["status"] == "succeeded" and analysis["attempts"] == 1, analysis
        print(f"\n[broker down] 503 in {answered_s:.2f} s; ingested {done_s:.1f} s after Redis was back")
    finally:
        stop_worker(worker)
        redis.stop()


@pytest.fixture()
def private_pg(tmp_path, monkeypatch):
    """A deployment on a private Postgres (embedded filesystem broker in tmp_path) and an
    API client with a team's key."""
    from fastapi.testclient import TestClient

    from backend.api import create_app
    from backend.auth import create_team
    from backend.store.db import reset_caches, session_scope
    from backend.store.migrate import upgrade

    pg = _private(PrivatePostgres)
    try:
        pg.init()
        upgrade(pg.url)
        environment = {
            **LEASE,
            "RLVR_DATABASE_URL": pg.url,
            "RLVR_DATA_DIR": str(tmp_path / "data"),
            "RLVR_BROKER_URL": "filesystem://",
        }
        for key, value in environment.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("DATABASE_URL", raising=False)
        monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
        reset_caches()
        with session_scope() as session:
            _team, key = create_team(session, "faults")
        with TestClient(create_app()) as client:
            client.headers["X-API-Key"] = key
            yield pg, client
    finally:
        reset_caches()
        pg.destroy()


def test_database_restart_during_inline_upload(private_pg, tmp_path):
    """Postgres stopped (`pg_ctl stop -m fast`) mid-ingestion of an inline upload: 503
    with Retry-After, the load rolled back (no rows); while it is down every request is
    a 503; once it is back, the same upload (after the dead attempt's lease) starts again
    instead of handing back a trace stuck in "ingesting", and is ingested once."""
    import psycopg

    pg, api = private_pg
    per_step = synthetic_rows(steps=40, groups=640, n=8)  # 204,800 samples
    archive = zip_folder(write_packed_dir(tmp_path / "run", per_step))
    result: dict = {}

    def upload() -> None:
        result["response"] = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])

    thread = threading.Thread(target=upload)
    thread.start()
    deadline = time.monotonic() + 30
    status = None
    while time.monotonic() < deadline and status != "ingesting":
        with psycopg.connect(pg.url, autocommit=True) as conn:
            row = conn.execute("SELECT status FROM traces").fetchone()
        status = row[0] if row else None
        time.sleep(0.05)
    assert status == "ingesting", status
    time.sleep(0.3)  # inside the COPY
    pg.stop("fast")
    stopped = time.monotonic()
    thread.join(timeout=30)
    r = result["response"]
    assert r.status_code == 503, r.text
    assert int(r.headers["Retry-After"]) > 0
    down = api.get("/api/v1/traces")
    assert down.status_code == 503 and "Retry-After" in down.headers

    pg.start()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        left = conn.execute("SELECT id, status FROM traces").fetchall()
        assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 0  # rolled back
    # The trace may be left "ingesting" (the database was gone when the request tried to
    # remove it); once its lease has run out nobody touches it and a re-upload restarts it.
    assert all(s == "ingesting" for _id, s in left), left
    time.sleep(max(0.0, float(LEASE["RLVR_JOB_LEASE_S"]) + 0.5 - (time.monotonic() - stopped)))
    again = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert again.status_code == 201, again.text
    trace = again.json()
    assert trace["status"] == "ready" and trace["n_samples"] == 40 * 640 * 8
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM traces").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 40 * 640 * 8
    print(f"\n[db restart] stuck traces after restart: {len(left)}; re-upload restarted and ingested")


def test_database_restart_during_worker_ingestion(private_pg, tmp_path, monkeypatch):
    """Postgres restarted while a worker ingests: the attempt's transaction is rolled
    back by the server, the worker lets its lease go, and the job is retried and done
    once (its worker's heartbeat and sweeper outlive the outage)."""
    from backend.store.db import reset_caches

    pg, api = private_pg
    monkeypatch.setenv("RLVR_INLINE_INGEST_MAX_BYTES", "0")
    reset_caches()
    worker_env = {k: os.environ[k] for k in ("RLVR_DATABASE_URL", "RLVR_DATA_DIR", "RLVR_BROKER_URL", *LEASE)}
    per_step = synthetic_rows(steps=24, groups=640, n=8)
    archive = zip_folder(write_packed_dir(tmp_path / "run", per_step))
    worker = start_worker(worker_env, tmp_path / "worker.log", concurrency=1)
    try:
        r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
        assert r.status_code == 202, r.text
        job_id, trace_id = r.json()["job"]["id"], r.json()["trace"]["id"]
        _wait_running(api, job_id)
        pg.stop("fast")
        time.sleep(2)
        pg.start()
        back = time.monotonic()
        job = wait_for_job(api, job_id, timeout=50)
        done_s = time.monotonic() - back
    finally:
        stop_worker(worker)
    assert job["status"] == "succeeded", job
    assert job["attempts"] >= 2
    trace = api.get(f"/api/v1/traces/{trace_id}").json()
    assert trace["status"] == "ready"
    assert trace["n_samples"] == _sample_count(trace_id) == 24 * 640 * 8
    print(f"\n[db restart, worker] done {done_s:.1f} s after Postgres was back, {job['attempts']} attempts")
