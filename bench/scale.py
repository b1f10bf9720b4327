"""Scale benchmark: one big trace plus many small ones in one Postgres deployment.

Generates with the project's generator (core.workload.synthetic.packed_length_rows) a
trace of --samples samples (default 100M: 1,000 steps x 12,500 groups x 8 on 256 DP
ranks) and --small-traces traces of --small-samples (default 20 x 5M), ingests them with
`rlvr-explorer ingest` into a throwaway Postgres database, and reports:

- ingest of the big trace / a raw `COPY` of the same rows into an empty table of a
  second throwaway database, right after it (target <= 1.3), and the ingest process's peak RSS (target < 1 GB);
- its default analyses end to end: from the end of the ingest until every queued
  analysis job finished, run by a real `rlvr-explorer worker` (Redis broker, a queue of
  this run's own) with --worker-processes processes (target < 60 s);
- the API requests each dashboard page of it makes, first and later visit, seconds and
  bytes as sent (gzip) (targets < 1 s, < 2 MB);
- the Traces list, Compare of two and Compare-many of the small traces (target < 1.5 s);
- the database's size per million samples.

Bounded: the database is dropped and the servers stopped on the way out, whatever
happens; the generated files live in a temporary folder. Run it at a reduced scale on a
small machine (e.g. --samples 20000000 --small-traces 5 --small-samples 1000000) and
say so with the figures.

    python bench/scale.py [--samples N] [--small-traces K] [--small-samples M] [--worker-processes 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import DEFAULT_ADMIN_URL, throwaway_database  # noqa: E402
from bench._servers import free_port, wait_port  # noqa: E402
from bench.ingest import baseline_trace, generate, run_copy  # noqa: E402

REDIS_URL = os.environ.get("RLVR_BENCH_REDIS", "redis://127.0.0.1:6379/0")
TARGETS = {"ratio": 1.3, "rss_mb": 1024, "analyses_s": 60.0, "page_s": 1.0, "page_mb": 2.0, "list_s": 1.5}
# The API requests each page of a trace makes (dashboard/pages/*: its api client calls);
# "{job:KIND}" is the result of the trace's latest succeeded job of KIND, "{job:KIND?QUERY}"
# that result in a view (the long-tail and imbalance pages read their page view).
PAGES = {
    "overview": ["/traces/{t}", "/traces/{t}/steps", "/traces/{t}/summaries?field=response"],
    "distributions": ["/traces/{t}", "/traces/{t}/summaries?field=response", "/traces/{t}/analyses"],
    "long tail": ["/traces/{t}", "/traces/{t}/analyses", "{job:longtail?view=page}"],
    "imbalance": ["/traces/{t}", "/traces/{t}/analyses", "{job:imbalance?view=page&load=tokens}"],
    "samples": ["/traces/{t}", "/traces/{t}/samples?step=0&limit=50"],
}
RUN_OF_COMPARE = ["/traces/{t}", "/traces/{t}/summaries?field=response", "/traces/{t}/steps", "/traces/{t}/analyses"]


def shape(samples: int, n: int = 8, steps: int = 1000) -> tuple[int, int]:
    """(steps, groups) of a run of about `samples` samples: the issue's 1,000 steps while
    a step keeps >= 1 group, fewer steps for tiny runs."""
    steps = max(1, min(steps, samples // n))
    return steps, max(1, samples // (steps * n))


def peak_children_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


@contextlib.contextmanager
def service(cmd: list[str], env: dict, log: Path) -> Iterator[subprocess.Popen]:
    """A server process for the block, stopped (SIGTERM, then SIGKILL) after it."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cli(env: dict, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "rlvr_explorer", *args, "--json"], env=env, cwd=ROOT, capture_output=True
    )
    if out.returncode:
        raise RuntimeError(f"rlvr-explorer {args[0]} failed ({out.returncode}): {out.stderr.decode()[-2000:]}")
    return orjson.loads(out.stdout.strip().splitlines()[-1])


def write_run(folder: Path, samples: int, args: argparse.Namespace, csv_path: Path, seed: int = 0) -> int:
    folder.mkdir(parents=True)
    n, dp_size = args.n, args.dp_size
    steps, groups = shape(samples, n, args.steps)
    return generate(folder, steps, groups, n, csv_path, dp_size=min(dp_size, groups), seed=seed)


def wait_analyses(url: str, timeout: float) -> tuple[float, dict]:
    """Seconds until no analysis job of the deployment is queued or running; jobs by status."""
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            rows = dict(
                conn.execute("SELECT status, count(*) FROM jobs WHERE kind <> 'ingest' GROUP BY status").fetchall()
            )
            if not rows.get("queued") and not rows.get("running"):
                return time.perf_counter() - t0, rows
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"analyses not done after {timeout:.0f} s: {rows}")
            time.sleep(0.5)


def fetch(client: httpx.Client, trace_id: int, paths: list[str]) -> tuple[float, int]:
    """Seconds and bytes (as sent) of a page's requests, made one after the other."""
    t0, size = time.perf_counter(), 0
    jobs: list[dict] | None = None
    for path in paths:
        if path.startswith("{job:"):
            kind, _, query = path[5:-1].partition("?")
            if jobs is None:
                jobs = client.get(f"/traces/{trace_id}/analyses").raise_for_status().json()["items"]
            ids = [j["id"] for j in jobs if j["kind"] == kind and j["status"] == "succeeded"]
            if not ids:
                continue
            path = f"/jobs/{ids[0]}" + (f"?{query}" if query else "")
        r = client.get(path.format(t=trace_id)).raise_for_status()
        size += r.num_bytes_downloaded
    return time.perf_counter() - t0, size


def measure_pages(client: httpx.Client, big: int, small: list[int]) -> list[tuple[str, float, float, int]]:
    """(what, first visit s, later visit s, later bytes) per page and list."""
    rows = []
    for page, paths in PAGES.items():
        first, _ = fetch(client, big, paths)
        later, size = fetch(client, big, paths)
        rows.append((f"page {page}", first, later, size))
    for label, ids in (("Traces list", None), ("Compare of two", small[:2]), ("Compare-many", small)):
        visits = []
        for _ in range(2):
            t0, size = time.perf_counter(), 0
            if ids is None:
                size += client.get("/traces?limit=50").raise_for_status().num_bytes_downloaded
            else:
                for t in ids:
                    size += fetch(client, t, RUN_OF_COMPARE)[1]
            visits.append((time.perf_counter() - t0, size))
        rows.append((label, visits[0][0], visits[1][0], visits[1][1]))
    return rows


def ingest_all(env: dict, url: str, runs: list[Path]) -> tuple[list[int], float, float]:
    """Ingest every run (the first is the big one): trace ids, the big one's seconds and
    the peak RSS of the ingest processes."""
    ids, big_s = [], 0.0
    for i, run in enumerate(runs):
        t0 = time.perf_counter()
        ids.append(cli(env, "ingest", str(run), "--name", run.name)["id"])
        if i == 0:
            big_s = time.perf_counter() - t0
    return ids, big_s, peak_children_mb()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=100_000_000)
    ap.add_argument("--small-traces", type=int, default=20)
    ap.add_argument("--small-samples", type=int, default=5_000_000)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt group")
    ap.add_argument("--steps", type=int, default=1000, help="steps per run (fewer when a step would hold no group)")
    ap.add_argument("--dp-size", type=int, default=256, help="DP ranks of the generated runs")
    ap.add_argument("--worker-processes", type=int, default=2)
    ap.add_argument("--analyses-timeout", type=float, default=1800)
    ap.add_argument("--pg", default=DEFAULT_ADMIN_URL, help="admin URL")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="rlvr-scale-") as tmp_name, throwaway_database(args.pg) as url:
        tmp = Path(tmp_name)
        csv_path = tmp / "big.csv"
        big_n = write_run(tmp / "big", args.samples, args, csv_path)
        runs = [tmp / "big"]
        for k in range(args.small_traces):
            write_run(tmp / f"small-{k}", args.small_samples, args, tmp / "small.csv", seed=k + 1)
            runs.append(tmp / f"small-{k}")
        env = {
            **os.environ,
            "RLVR_DATABASE_URL": url,
            "RLVR_BROKER_URL": REDIS_URL,
            "RLVR_QUEUE_NAME": f"scale-{uuid.uuid4().hex[:8]}",
            "RLVR_DATA_DIR": str(tmp / "data"),
        }
        key = cli(env, "create-team", "scale")["api_key"]
        env["RLVR_API_KEY"] = key
        port = free_port()
        with (
            service(
                [
                    sys.executable,
                    "-m",
                    "rlvr_explorer",
                    "worker",
                    "--concurrency",
                    str(args.worker_processes),
                    "--loglevel",
                    "WARNING",
                ],
                env,
                tmp / "worker.log",
            ),
            service(
                [sys.executable, "-m", "rlvr_explorer", "api", "--port", str(port), "--no-dashboard"],
                env,
                tmp / "api.log",
            ),
        ):
            ids, ours, peak = ingest_all(env, url, runs[:1])
            analyses_s, statuses = wait_analyses(url, args.analyses_timeout)
            # the raw COPY right after, into an empty table as ours was: the same conditions
            with throwaway_database(args.pg) as raw_url:
                baseline_trace(raw_url)
                raw, _ = run_copy(raw_url, csv_path)
            more, _, _ = ingest_all(env, url, runs[1:]) if len(runs) > 1 else ([], 0.0, 0.0)
            wait_analyses(url, args.analyses_timeout)
            wait_port(port, 60)
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}/api/v1", headers={"X-API-Key": key}, timeout=120
            ) as client:
                pages = measure_pages(client, ids[0], more)
        with psycopg.connect(url, autocommit=True) as conn:
            db_bytes = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            stored = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
    report(args, big_n, ours, raw, peak, analyses_s, statuses, pages, db_bytes, stored)


def report(args, big_n, ours, raw, peak, analyses_s, statuses, pages, db_bytes, stored) -> None:
    t = TARGETS
    ok = {True: "met", False: "missed"}
    print(f"\n== scale: {big_n:,}-sample trace + {args.small_traces} x {args.small_samples:,}")
    print(
        f"ingest {ours:.1f} s vs raw COPY {raw:.1f} s: ratio {ours / raw:.2f} (target <= {t['ratio']}: "
        f"{ok[ours / raw <= t['ratio']]}); ingest peak RSS {peak:.0f} MB (target < {t['rss_mb']}: "
        f"{ok[peak < t['rss_mb']]})"
    )
    print(
        f"default analyses end to end ({args.worker_processes} worker processes): {analyses_s:.1f} s "
        f"(target < {t['analyses_s']:.0f} s: {ok[analyses_s < t['analyses_s']]}); jobs {statuses}"
    )
    print(f"  {'page / request set':<24}{'first s':>9}{'later s':>9}{'later KB':>10}  target")
    for what, first, later, size in pages:
        limit = t["page_s"] if what.startswith("page") else t["list_s"]
        met = max(first, later) < limit and (size < t["page_mb"] * 1e6 or not what.startswith("page"))
        print(f"  {what:<24}{first:>9.3f}{later:>9.3f}{size / 1e3:>10.0f}  < {limit} s: {ok[met]}")
    print(
        f"database {db_bytes / 1e6:.0f} MB for {stored:,} samples: {db_bytes / 1e6 / (stored / 1e6):.1f} MB "
        "per million samples (indexes included)"
    )


if __name__ == "__main__":
    main()
