"""Load benchmark: reads never starve behind uploads.

On Postgres + Redis, with the API (`rlvr-explorer api`, uvicorn) and a worker
(`rlvr-explorer worker`) run as subprocesses against a throwaway database, a Redis
database of its own and a queue name of its own, everything on loopback:

  phase 1  50 readers (aiohttp on one event loop, a keep-alive connection each) for 30 s over list /
           get / steps / summaries / analyses of an ingested trace
           (target: p99 < 500 ms, 0 errors);
  phase 2  the same readers while 5 clients each upload a 50 MB PolyTrace packed-lengths
           run (the project's own generator, core/workload/synthetic.py), until every
           upload is answered and ready (at least 30 s, at most --max-wait)
           (target: reads p99 < 1 s, 0 errors; every upload 201, or 202 and then ready).

Prints one table; exits 1 when a target is missed. Bounded: every request has a
timeout, each phase a deadline, and the subprocesses are stopped on the way out.

    python bench/load.py [--readers 50 --seconds 30 --uploads 5 --upload-mb 50]
                         [--pg postgresql://postgres@127.0.0.1:5432/postgres]
                         [--redis redis://127.0.0.1:6379/13]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import DEFAULT_ADMIN_URL, throwaway_database  # noqa: E402
from bench._servers import stop_process  # noqa: E402
from core.workload.synthetic import packed_length_rows  # noqa: E402

CLI = [sys.executable, "-m", "rlvr_explorer"]
KINDS = ("list", "get", "steps", "summaries", "analyses")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_run(folder: Path, *, megabytes: float, groups: int, seed: int, max_steps: int = 10_000) -> list[Path]:
    """A packed-lengths run of about `megabytes`, one file per step."""
    folder.mkdir(parents=True, exist_ok=True)
    files, total = [], 0
    for rows in packed_length_rows(max_steps, groups, 8, seed=seed):
        path = folder / f"packed_lengths_step_{rows[0]['step']}.jsonl"
        data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
        path.write_bytes(data)
        files.append(path)
        total += len(data)
        if total >= megabytes * 1024**2:
            break
    return files


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    client_cpu_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, seconds: float, error: str | None) -> None:
        with self.lock:
            self.latencies.append(seconds)
            self.by_kind.setdefault(kind, []).append(seconds)
            if error:
                self.errors.append(error)


def reader_paths(trace_id: int) -> list[tuple[str, str]]:
    suffixes = ("/traces", "", "/steps", "/summaries", "/analyses")
    return [(k, p if k == "list" else f"/traces/{trace_id}{p}") for k, p in zip(KINDS, suffixes)]


async def reader(
    session: aiohttp.ClientSession, base: str, trace_id: int, stop: threading.Event, tally: Tally, offset: int
) -> None:
    """One reader: its own keep-alive connection, one request at a time, no think time."""
    paths = reader_paths(trace_id)
    i = offset
    while not stop.is_set():
        kind, path = paths[i % len(paths)]
        i += 1
        t = time.perf_counter()
        try:
            async with session.get(base + "/api/v1" + path) as r:
                body = await r.read()  # the whole (gzip-compressed) body, as sent
                error = None if r.status == 200 else f"{r.status} {path}: {body[:120]!r}"
        except (TimeoutError, aiohttp.ClientError) as exc:
            error = f"{type(exc).__name__} {path}"
        tally.add(kind, time.perf_counter() - t, error)


async def readers_main(base: str, key: str, trace_id: int, readers: int, stop: threading.Event, tally: Tally) -> None:
    # One event loop drives every reader: a thread per reader (as with httpx before) spent
    # the machine's CPU and the GIL on the client, and its queueing was counted as latency.
    connector = aiohttp.TCPConnector(limit=readers, force_close=False)
    headers = {"X-API-Key": key, "Accept-Encoding": "gzip"}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=connector, headers=headers, timeout=timeout, auto_decompress=False
    ) as session:
        await asyncio.gather(*(reader(session, base, trace_id, stop, tally, n) for n in range(readers)))


def read_phase(base, key, trace_id, readers: int, until) -> tuple[Tally, float]:
    """Run `readers` readers until `until()` returns; (tally, seconds). The tally also
    records the CPU seconds this process (the load generator) spent meanwhile."""
    tally, stop = Tally(), threading.Event()
    loop = threading.Thread(target=lambda: asyncio.run(readers_main(base, key, trace_id, readers, stop, tally)))
    c0, t0 = time.process_time(), time.perf_counter()
    loop.start()
    until()
    stop.set()
    loop.join(40)
    tally.client_cpu_s = time.process_time() - c0
    return tally, time.perf_counter() - t0


@dataclass
class Upload:
    status: int | None = None
    answered_s: float | None = None
    ready_s: float | None = None
    final: str | None = None
    error: str | None = None


def upload(base: str, key: str, files: list[Path], name: str, result: Upload, deadline: float) -> None:
    t0 = time.perf_counter()
    try:
        with httpx.Client(base_url=base + "/api/v1", headers={"X-API-Key": key}, timeout=300) as client:
            handles = [p.open("rb") for p in files]
            try:
                r = client.post(
                    "/traces", files=[("files", (p.name, h)) for p, h in zip(files, handles)], data={"name": name}
                )
            finally:
                for h in handles:
                    h.close()
            result.status, result.answered_s = r.status_code, time.perf_counter() - t0
            if r.status_code not in (200, 201, 202):
                result.error = r.text[:200]
                return
            body = r.json()
            trace = body["trace"] if r.status_code == 202 else body
            while trace["status"] not in ("ready", "failed") and time.monotonic() < deadline:
                time.sleep(1)
                trace = client.get(f"/traces/{trace['id']}").json()
            result.final = trace["status"]
            if trace["status"] == "ready":
                result.ready_s = time.perf_counter() - t0
            elif trace["status"] == "failed":
                result.error = trace.get("error")
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"


def wait_for(predicate, what: str, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = predicate()
            if value:
                return value
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def row(name: str, tally: Tally, seconds: float) -> str:
    lat = np.array(tally.latencies) * 1000 if tally.latencies else np.zeros(1)
    return (
        f"{name:<28} {len(tally.latencies):>8} {len(tally.latencies) / seconds:>8.1f} "
        f"{np.percentile(lat, 50):>8.0f} {np.percentile(lat, 99):>8.0f} {lat.max():>8.0f} {len(tally.errors):>7} "
        f"{1000 * tally.client_cpu_s / max(1, len(tally.latencies)):>13.2f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readers", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--uploads", type=int, default=5)
    ap.add_argument("--upload-mb", type=float, default=50.0)
    ap.add_argument("--max-wait", type=float, default=600.0, help="phase 2 ends by then, uploads ready or not")
    ap.add_argument("--worker-concurrency", type=int, default=2)
    ap.add_argument("--worker-nice", type=int, default=0, help="lower the worker's CPU priority by this much")
    ap.add_argument("--api-workers", type=int, default=2, help="uvicorn processes of `rlvr-explorer api`")
    ap.add_argument("--pg", default=DEFAULT_ADMIN_URL)
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rlvr-load-"))
    print(f"generating {args.uploads} uploads of {args.upload_mb:.0f} MB in {tmp} ...", flush=True)
    runs = [write_run(tmp / f"up{i}", megabytes=args.upload_mb, groups=2048, seed=100 + i) for i in range(args.uploads)]
    base_files = write_run(tmp / "base", megabytes=2, groups=256, seed=7)
    queue = f"rlvr-load-{uuid.uuid4().hex[:8]}"
    procs: list[subprocess.Popen] = []
    with throwaway_database(args.pg) as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
        env.update(
            DATABASE_URL=url,
            CELERY_BROKER_URL=args.redis,
            RLVR_QUEUE_NAME=queue,
            RLVR_DATA_DIR=str(tmp / "data"),
            PYTHONUNBUFFERED="1",
        )
        try:
            key = subprocess.run(
                [*CLI, "create-team", "load"], env=env, capture_output=True, text=True, check=True, timeout=120
            ).stdout.split()[-1]
            wlog = (tmp / "worker.log").open("wb")
            procs.append(
                subprocess.Popen(
                    [*CLI, "worker", f"--concurrency={args.worker_concurrency}", f"--nice={args.worker_nice}"],
                    env=env,
                    stdout=wlog,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            port = free_port()
            alog = (tmp / "api.log").open("wb")
            procs.append(
                subprocess.Popen(
                    [*CLI, "api", "--port", str(port), "--no-dashboard", "--workers", str(args.api_workers)],
                    env=env,
                    stdout=alog,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            base = f"http://127.0.0.1:{port}"
            wait_for(lambda: httpx.get(base + "/api/v1/health", timeout=2).status_code == 200, "the API", 90)
            wait_for(lambda: b"ready." in (tmp / "worker.log").read_bytes(), "the worker", 90)
            api = httpx.Client(base_url=base + "/api/v1", headers={"X-API-Key": key}, timeout=120)
            handles = [p.open("rb") for p in base_files]
            r = api.post("/traces", files=[("files", (p.name, h)) for p, h in zip(base_files, handles)])
            for h in handles:
                h.close()
            assert r.status_code in (201, 202), r.text
            trace_id = (r.json().get("trace") or r.json())["id"]

            def settled():
                jobs = api.get("/jobs", params={"trace_id": trace_id}).json()["items"]
                trace = api.get(f"/traces/{trace_id}").json()
                return trace["status"] == "ready" and all(j["status"] in ("succeeded", "failed") for j in jobs)

            wait_for(settled, "the base trace and its analyses", 180)
            n_samples = api.get(f"/traces/{trace_id}").json()["n_samples"]
            print(f"base trace {trace_id}: {len(base_files)} steps, {n_samples:,} samples", flush=True)

            read_phase(base, key, trace_id, args.readers, lambda: time.sleep(5))  # warm-up, not counted
            print(f"phase 1: {args.readers} readers for {args.seconds:.0f} s ...", flush=True)
            t1, s1 = read_phase(base, key, trace_id, args.readers, lambda: time.sleep(args.seconds))

            print(
                f"phase 2: {args.readers} readers + {args.uploads} uploads of {args.upload_mb:.0f} MB ...", flush=True
            )
            results = [Upload() for _ in runs]
            deadline = time.monotonic() + args.max_wait
            uploaders = [
                threading.Thread(target=upload, args=(base, key, files, f"load {i}", results[i], deadline), daemon=True)
                for i, files in enumerate(runs)
            ]
            start = time.monotonic()

            def until_uploads_done():
                for t in uploaders:
                    t.start()
                for t in uploaders:  # (+ a last status poll's time: none is cut by the teardown)
                    t.join(max(0.0, deadline - time.monotonic()) + 35)
                time.sleep(max(0.0, args.seconds - (time.monotonic() - start)))

            t2, s2 = read_phase(base, key, trace_id, args.readers, until_uploads_done)
        finally:
            for p in reversed(procs):
                stop_process(p)
            with contextlib.suppress(Exception):
                import redis

                r = redis.Redis.from_url(args.redis)
                for k in r.scan_iter(f"*{queue}*"):
                    r.delete(k)

    print()
    print(
        f"{'phase':<28} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>7} {'client ms/req':>13}"
    )
    print(row("1: reads alone", t1, s1))
    print(row(f"2: reads + {args.uploads} uploads", t2, s2))
    print()
    print("p50 / p99 ms per request kind:  " + "  ".join(f"{k:>19}" for k in KINDS))
    for name, t in (("1", t1), ("2", t2)):
        cells = []
        for k in KINDS:
            lat = np.array(t.by_kind.get(k) or [0.0]) * 1000
            cells.append(f"{np.percentile(lat, 50):>9.0f} / {np.percentile(lat, 99):<7.0f}")
        print(f"  phase {name:<24}" + "  ".join(cells))
    print()
    print(f"{'upload':<8} {'MB':>6} {'files':>6} {'status':>7} {'answered s':>11} {'ready s':>8}  final")
    for i, (files, u) in enumerate(zip(runs, results)):
        mb = sum(p.stat().st_size for p in files) / 1024**2
        answered = f"{u.answered_s:.1f}" if u.answered_s is not None else "-"
        ready = f"{u.ready_s:.1f}" if u.ready_s is not None else "-"
        print(f"{i:<8} {mb:>6.1f} {len(files):>6} {u.status or '-':>7} {answered:>11} {ready:>8}  {u.final or u.error}")
    for name, t in (("phase 1", t1), ("phase 2", t2)):
        for e in sorted(set(t.errors))[:5]:
            print(f"  {name} error: {e}")
    p99_1 = np.percentile(t1.latencies, 99) if t1.latencies else float("inf")
    p99_2 = np.percentile(t2.latencies, 99) if t2.latencies else float("inf")
    ok = (
        p99_1 < 0.5
        and not t1.errors
        and p99_2 < 1.0
        and not t2.errors
        and all(u.status in (201, 202) and u.final == "ready" for u in results)
    )
    print(
        f"\ntargets: phase 1 p99 < 500 ms, 0 errors; phase 2 p99 < 1 s, 0 errors, uploads ready: {'met' if ok else 'MISSED'}"
    )
    print(
        f"(api: {args.api_workers} uvicorn process(es); worker: concurrency {args.worker_concurrency}, "
        f"nice {args.worker_nice}; load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs;"
        f" logs in {tmp})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
