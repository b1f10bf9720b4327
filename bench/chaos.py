"""Chaos run: a deployment shared by several teams, broken at random moments.

    python bench/chaos.py [--minutes 10] [--teams 3] [--seed 1]

On 127.0.0.1 only, with a private Postgres and a private Redis on ports of their own
(bench/_servers.py; the shared servers are never touched): `rlvr-explorer api --workers
2` and two workers of two pool processes each, as docker-compose runs them. Each
team's clients upload run folders (some ingested inline, most by a worker), read their
traces, run analyses and replays, and try to read other teams' traces and jobs, at a
pace two workers keep up with; meanwhile a chaos thread SIGKILLs a
worker (its whole process group), restarts Postgres (`pg_ctl stop -m fast`) and stops
Redis for a few seconds, at random moments. Clients retry a 503 after its Retry-After,
as the API asks.

Then the chaos stops, every server is up again, the jobs drain, and the run reports:
requests by outcome; jobs created, finished, failed with their reason, failed without
one and stuck (still queued or running after the drain: must be 0); rows lost or
duplicated (every acknowledged upload's trace, ready, holds exactly the samples
uploaded: must be 0); cross-team reads answered with data (must be 0); and the longest
time a job waited before a worker started it, and until it finished. Exit status 0
when stuck, failed without reason, lost, duplicated and cross-team are all 0.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._servers import PrivatePostgres, PrivateRedis, free_port  # noqa: E402
from core.workload.synthetic import packed_length_rows  # noqa: E402

# Short leases, so a killed worker's job is noticed in seconds; uploads above 64 KiB go
# to a worker (most of them), smaller ones are ingested inline by the API.
SERVICE_ENV = {
    "RLVR_JOB_LEASE_S": "6",
    "RLVR_JOB_SWEEP_S": "1",
    "RLVR_JOB_REQUEUE_S": "30",
    "RLVR_JOB_MAX_ATTEMPTS": "5",
    "RLVR_INLINE_INGEST_MAX_BYTES": str(64 * 1024),
    "RLVR_QUEUE_NAME": "chaos",
}
# After the chaos the jobs drain: those still queued or running once none has finished
# for DRAIN_STALL_S (or after DRAIN_LIMIT_S) are stuck.
DRAIN_STALL_S, DRAIN_LIMIT_S = 90, 1200
CLUSTER = {"gpu": "H100", "n_gpus": 8, "rollout_replicas": 2, "rollout_tp": 2, "train_dp": 4}
# A client's pause between two actions: the jobs the clients make stay within what two
# workers run (faults, not a backlog, are what this run is about).
THINK_S = (0.3, 1.5)


# --------------------------------------------------------------------------- the record


@dataclass
class Upload:
    team: int
    seed: int
    samples: int
    trace_id: int | None = None  # once acknowledged (201, 202, 200)


@dataclass
class Record:
    """What the clients saw, shared by their threads (appends and Counter updates
    under the lock)."""

    outcomes: Counter = field(default_factory=Counter)
    uploads: list[Upload] = field(default_factory=list)
    traces: dict[int, int] = field(default_factory=dict)  # trace id -> team
    jobs: dict[int, int] = field(default_factory=dict)  # job id -> team
    cross_team_reads: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def outcome(self, kind: str, status: int | str) -> None:
        with self.lock:
            self.outcomes[(kind, status)] += 1


# --------------------------------------------------------------------------- processes


class Deployment:
    """The private servers, the API (two processes) and the workers of the run."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.pg = PrivatePostgres()
        self.redis = PrivateRedis(folder)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RLVR_") and k not in ("DATABASE_URL",)},
            **SERVICE_ENV,
            "RLVR_DATABASE_URL": self.pg.url,
            "RLVR_BROKER_URL": self.redis.url,
            "RLVR_DATA_DIR": str(folder / "data"),
        }
        self.api: subprocess.Popen | None = None
        self.keep_logs: Path | None = None
        self.workers: list[subprocess.Popen | None] = [None, None]

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "rlvr_explorer", *args],
            env=self.env,
            cwd=ROOT,
            stdout=(self.folder / log).open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own: killed whole
        )

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "rlvr_explorer", *args], env=self.env, cwd=ROOT, capture_output=True, text=True
        )
        if out.returncode != 0:
            raise RuntimeError(f"rlvr-explorer {' '.join(args)}: {out.stderr[-2000:]}")
        return out.stdout

    def start(self, teams: int) -> list[str]:
        """Servers up, schema migrated, one key per team; the API and the workers started."""
        self.pg.init()
        self.redis.start()
        self.cli("migrate")
        keys = [orjson.loads(self.cli("create-team", f"team-{i}", "--json"))["api_key"] for i in range(teams)]
        self.api = self._spawn(["api", "--workers", "2", "--no-dashboard", "--port", str(self.port)], "api.log")
        for i in range(len(self.workers)):
            self.start_worker(i)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/api/v1/health", timeout=2).status_code == 200:
                    return keys
            except httpx.TransportError:
                time.sleep(0.3)
        raise RuntimeError("the API did not start: " + (self.folder / "api.log").read_text()[-2000:])

    def start_worker(self, i: int) -> None:
        # as docker-compose runs them: two pool processes each
        self.workers[i] = self._spawn(["worker", "--concurrency", "2"], f"worker-{i}.log")

    def kill_worker(self, i: int) -> None:
        proc = self.workers[i]
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop(self) -> None:
        for proc in [self.api, *self.workers]:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in [self.api, *self.workers]:
            if proc is not None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self.redis.stop()
        if self.keep_logs is not None:  # the services' logs, for a look after the run
            self.keep_logs.mkdir(parents=True, exist_ok=True)
            for log in self.folder.glob("*.log"):
                shutil.copy(log, self.keep_logs / log.name)
            shutil.copy(self.pg.folder / "log", self.keep_logs / "postgres.log")
        self.pg.destroy()


# --------------------------------------------------------------------------- chaos


def chaos(dep: Deployment, record: Record, stop: threading.Event, rng: random.Random) -> None:
    """At random moments: SIGKILL a worker, restart Postgres, stop Redis for a while."""
    t0 = time.monotonic()
    while not stop.wait(rng.uniform(6, 16)):
        action = rng.choice(("kill worker", "restart postgres", "stop redis"))
        at = f"{time.monotonic() - t0:5.0f} s"
        if action == "kill worker":
            i = rng.randrange(len(dep.workers))
            dep.kill_worker(i)
            time.sleep(rng.uniform(0.5, 3))
            dep.start_worker(i)
        elif action == "restart postgres":
            dep.pg.stop("fast")
            time.sleep(rng.uniform(1, 4))
            dep.pg.start()
        else:
            dep.redis.stop()
            time.sleep(rng.uniform(2, 8))
            dep.redis.start()
        with record.lock:
            record.events.append(f"{at} {action}")


# --------------------------------------------------------------------------- clients


def run_zip(seed: int, rng: random.Random) -> tuple[bytes, int]:
    """A run folder as a zip of per-step packed-length files (distinct content per seed)."""
    steps, groups, n = rng.randint(1, 5), rng.choice((8, 32, 128, 400)), rng.choice((4, 8))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for rows in packed_length_rows(steps, groups, n, dp_size=4, seed=seed, max_response_len=4096):
            body = b"".join(orjson.dumps(r) + b"\n" for r in rows)
            zf.writestr(f"run-{seed}/packed_lengths_step_{rows[0]['step']}.jsonl", body)
    return buf.getvalue(), steps * groups * n


class Client:
    """One team's client: a mix of uploads, reads, analyses, replays and attempts to
    read other teams' objects; 503s are retried after their Retry-After."""

    def __init__(self, base: str, team: int, key: str, record: Record, rng: random.Random):
        self.http = httpx.Client(base_url=base + "/api/v1", headers={"X-API-Key": key}, timeout=60)
        self.team, self.record, self.rng = team, record, rng
        self.ready: list[int] = []

    def call(self, kind: str, method: str, path: str, retries: int = 20, **kw) -> httpx.Response | None:
        """The request, retried after a 503 (Retry-After) or a dropped connection."""
        for _ in range(retries):
            try:
                r = self.http.request(method, path, **kw)
            except httpx.TransportError as exc:
                self.record.outcome(kind, f"no answer ({type(exc).__name__})")
                time.sleep(1)
                continue
            self.record.outcome(kind, r.status_code)
            if r.status_code != 503:
                return r
            time.sleep(float(r.headers.get("Retry-After", "1")))
        return None

    def upload(self) -> None:
        seed = self.rng.randrange(10**9)
        body, samples = run_zip(seed, self.rng)
        item = Upload(self.team, seed, samples)
        with self.record.lock:
            self.record.uploads.append(item)
        r = self.call("upload", "POST", "/traces", files=[("files", (f"run-{seed}.zip", body, "application/zip"))])
        if r is not None and r.status_code in (200, 201, 202):
            payload = r.json()
            trace = payload.get("trace", payload)
            item.trace_id = trace["id"]
            with self.record.lock:
                self.record.traces[trace["id"]] = self.team
                if payload.get("job"):
                    self.record.jobs[payload["job"]["id"]] = self.team

    def read(self) -> None:
        listed = self.call("read", "GET", "/traces", params={"limit": 50})
        if listed is None or listed.status_code != 200:
            return
        self.ready = [t["id"] for t in listed.json()["items"] if t["status"] == "ready"]
        if self.ready:
            trace_id = self.rng.choice(self.ready)
            for path in ("", "/steps", "/summaries", "/samples?limit=50"):
                self.call("read", "GET", f"/traces/{trace_id}{path}")

    def request_job(self) -> None:
        if not self.ready:
            return
        trace_id = self.rng.choice(self.ready)
        if self.rng.random() < 0.5:
            body = {"kind": "lengths", "params": {"infer_cap_min_hits": self.rng.randint(2, 50)}}
            r = self.call("analysis", "POST", f"/traces/{trace_id}/analyses", json=body)
        else:
            policy = self.rng.choice(("sync", "one_step_off", "partial"))
            body = {"trace_id": trace_id, "cluster": CLUSTER, "policy": policy}
            r = self.call("replay", "POST", "/simulations", json=body)
        if r is not None and r.status_code in (200, 202):
            with self.record.lock:
                self.record.jobs[r.json()["id"]] = self.team

    def probe_other_teams(self) -> None:
        with self.record.lock:
            traces = [t for t, team in self.record.traces.items() if team != self.team]
            jobs = [j for j, team in self.record.jobs.items() if team != self.team]
        for path in [f"/traces/{t}" for t in self.rng.sample(traces, min(3, len(traces)))] + [
            f"/jobs/{j}" for j in self.rng.sample(jobs, min(3, len(jobs)))
        ]:
            r = self.call("other team's", "GET", path)
            if r is not None and r.status_code != 404:
                with self.record.lock:
                    self.record.cross_team_reads.append(f"team {self.team}: GET {path} -> {r.status_code}")

    def run(self, stop: threading.Event) -> None:
        actions = (self.upload, self.read, self.read, self.request_job, self.probe_other_teams)
        while not stop.is_set():
            self.rng.choice(actions)()
            stop.wait(self.rng.uniform(*THINK_S))
        self.http.close()


# --------------------------------------------------------------------------- the tally


def drain(url: str, stall_s: float, limit_s: float) -> float:
    """Wait until no job is queued or running, or none has finished for `stall_s` (the
    rest are stuck, not just waiting their turn), or `limit_s` passed; the seconds waited."""
    import psycopg

    started = time.monotonic()
    last_done, last_progress = -1, started
    while time.monotonic() - started < limit_s:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                left, done = conn.execute(
                    "SELECT count(*) FILTER (WHERE status IN ('queued', 'running')),"
                    " count(*) FILTER (WHERE status IN ('succeeded', 'failed')) FROM jobs"
                ).fetchone()
        except psycopg.OperationalError:
            left, done = 1, last_done
        if not left:
            break
        if done != last_done:
            last_done, last_progress = done, time.monotonic()
        elif time.monotonic() - last_progress > stall_s:
            break
        time.sleep(1)
    return time.monotonic() - started


def tally(url: str, record: Record) -> dict:
    """Jobs, rows and waits from the database after the drain."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        jobs = conn.execute(
            "SELECT status, error, attempts, EXTRACT(EPOCH FROM started_at - created_at),"
            " EXTRACT(EPOCH FROM finished_at - created_at) FROM jobs"
        ).fetchall()
        stuck = Counter(
            f"{kind} {status}, attempts {attempts}, {'sent' if sent else 'never sent'}"
            + (", lease expired" if expired else "")
            for kind, status, attempts, sent, expired in conn.execute(
                "SELECT kind, status, attempts, dispatched_at IS NOT NULL, lease_until < now() FROM jobs"
                " WHERE status IN ('queued', 'running')"
            ).fetchall()
        )
        traces = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT t.id, t.status, t.n_samples, (SELECT count(*) FROM samples s WHERE s.trace_id = t.id),"
                " t.error FROM traces t"
            ).fetchall()
        }
        twins = conn.execute(
            "SELECT count(*) FROM (SELECT team_id, content_hash FROM traces GROUP BY 1, 2 HAVING count(*) > 1) d"
        ).fetchone()[0]
    lost = duplicated = failed_uploads = 0
    reasons = Counter(_reason(e) for s, e, *_ in jobs if s == "failed" and e)
    for up in record.uploads:
        if up.trace_id is None:
            continue  # never acknowledged (retries ran out): the client knows it was not taken
        status, n_samples, rows, error = traces.get(up.trace_id, (None, 0, 0, None))
        if status == "failed":
            failed_uploads += 1
            reasons[f"upload: {_reason(error or '?')}"] += 1
        elif status != "ready" or rows < up.samples or n_samples != rows:
            lost += 1
        elif rows > up.samples:
            duplicated += 1
    return {
        "failure reasons": dict(reasons.most_common(5)),
        "stuck": dict(stuck.most_common(8)),
        "jobs created": len(jobs),
        "jobs finished": sum(s == "succeeded" for s, *_ in jobs),
        "jobs failed with a reason": sum(s == "failed" and bool(e) for s, e, *_ in jobs),
        "jobs failed without one": sum(s == "failed" and not e for s, e, *_ in jobs),
        "jobs stuck": sum(s in ("queued", "running") for s, *_ in jobs),
        "jobs run again after a fault": sum((a or 0) > 1 for _s, _e, a, *_ in jobs),
        "uploads acknowledged": sum(u.trace_id is not None for u in record.uploads),
        "uploads failed with a reason": failed_uploads,
        "rows lost": lost,
        "rows duplicated": duplicated + twins,
        "cross-team reads": len(record.cross_team_reads),
        "median wait for a worker (s)": round(_median([w or 0 for *_, w, _f in jobs]), 1),
        "longest wait for a worker (s)": round(max((w or 0 for *_, w, _f in jobs), default=0), 1),
        "longest time to finish (s)": round(max((f or 0 for *_, f in jobs), default=0), 1),
    }


def _median(values: list[float]) -> float:
    ordered = sorted(float(v) for v in values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def _reason(error: str) -> str:
    """A failed job's error without its ids and numbers, to group like failures."""
    return re.sub(r"\d+", "N", error.splitlines()[0])[:120]


MUST_BE_ZERO = ("jobs failed without one", "jobs stuck", "rows lost", "rows duplicated", "cross-team reads")


def run(
    minutes: float = 10,
    teams: int = 3,
    clients_per_team: int = 2,
    seed: int = 1,
    out=print,
    keep_logs: Path | None = None,
) -> dict:
    """One chaos run; its figures (also printed as a table through `out`)."""
    rng = random.Random(seed)
    record = Record()
    with tempfile.TemporaryDirectory(prefix="rlvr-chaos-") as tmp:
        dep = Deployment(Path(tmp))
        dep.keep_logs = keep_logs
        try:
            keys = dep.start(teams)
            stop, chaos_stop = threading.Event(), threading.Event()
            clients = [
                Client(dep.base, t, key, record, random.Random(rng.random()))
                for t, key in enumerate(keys)
                for _ in range(clients_per_team)
            ]
            threads = [threading.Thread(target=c.run, args=(stop,)) for c in clients]
            breaker = threading.Thread(target=chaos, args=(dep, record, chaos_stop, random.Random(rng.random())))
            started = time.monotonic()
            for t in [*threads, breaker]:
                t.start()
            time.sleep(minutes * 60)
            chaos_stop.set()
            breaker.join()
            stop.set()
            for t in threads:
                t.join()
            load_s = time.monotonic() - started
            for i, proc in enumerate(dep.workers):  # every server up for the drain
                if proc is None or proc.poll() is not None:
                    dep.start_worker(i)
            drained_s = drain(dep.pg.url, DRAIN_STALL_S, DRAIN_LIMIT_S)
            figures = tally(dep.pg.url, record)
            figures["drain after the load (s)"] = round(drained_s)
        finally:
            dep.stop()
    figures["requests"] = {
        kind: {str(status): n for (k, status), n in sorted(record.outcomes.items(), key=str) if k == kind}
        for kind in dict.fromkeys(k for k, _ in sorted(record.outcomes, key=str))
    }
    figures["faults"] = Counter(e.split(" s ", 1)[1] for e in record.events)
    report(figures, record, load_s, out)
    return figures


def report(figures: dict, record: Record, load_s: float, out) -> None:
    out(
        f"chaos run: {load_s / 60:.1f} min of load and faults ({', '.join(f'{n} x {a}' for a, n in figures['faults'].items())})"
    )
    out("requests by outcome (status: count; 503s were retried after Retry-After)")
    for kind, statuses in figures["requests"].items():
        out(f"  {kind:<32}" + ", ".join(f"{status}: {n:,}" for status, n in statuses.items()))
    for name, value in figures.items():
        if name not in ("requests", "faults", "failure reasons", "stuck"):
            flag = "  <- must be 0" if name in MUST_BE_ZERO and value else ""
            out(f"{name:<34}{value:>10}{flag}")
    for reason, n in figures["failure reasons"].items():
        out(f"  failed {n} x: {reason}")
    for state, n in figures["stuck"].items():
        out(f"  stuck {n} x: {state}")
    for line in record.cross_team_reads[:10]:
        out(f"  cross-team: {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--teams", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy the services' logs here")
    args = parser.parse_args()
    figures = run(args.minutes, args.teams, seed=args.seed, keep_logs=args.keep_logs)
    return 1 if any(figures[k] for k in MUST_BE_ZERO) else 0


if __name__ == "__main__":
    sys.exit(main())
