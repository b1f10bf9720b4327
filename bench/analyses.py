"""Analysis benchmark: the default analysis set end to end versus just reading its columns.

Generates a PolyTrace packed-lengths run (default 500 steps x 2,560 groups x 8 =
10.24M samples, 64 DP ranks; `--quick`: 50 x 2,560 x 8 = 1.02M), ingests it into a
throwaway Postgres database with `rlvr-explorer ingest` (the product's ingestion), then
in this process, on the stored trace:

- read: `load_trace_data(conn, trace, union_tables(kinds))` -- the union of the columns
  the default set (`default_analyses(available_columns(trace))`) needs, read once, as
  the worker does (`backend.store.columns.read_columns`: one COPY row per step with each
  column packed server-side, decoded by numpy);
- compute: each analysis of the set on the loaded data, `json_safe(run_analysis(...))`;
- end to end: `workers.runners.analyses._run_here(jobs, trace, ...)` on fresh job rows --
  what the set costs in one worker process: read (step-range chunks in a background
  thread, overlapped with the analysis of the previous chunk) + every analysis + merging
  + progress updates + storing the results.

The target ("analysis at most 1.5x the read time") is read as: a job costs at most 1.5x
the time it takes merely to read its input, i.e. ``end_to_end / read <= 1.5`` (so compute
plus storing results <= half the read). ``compute / read`` is printed too. The first
read after ingestion is timed and reported apart (ingestion leaves no planner
statistics, and without them Postgres sorts instead of walking the primary key); then
the bench runs ANALYZE (as autovacuum soon would) and a warm-up read, so every timed
read sees the same statistics and warm cache. Each figure is the best of `--repeat`
runs (a 2-core machine shared with other work: the minimum is the least noisy). Peak
RSS is this process's (reads and analyses) and the ingest subprocess's.

    python bench/analyses.py [--steps 500 --groups 2560 --n 8 --dp-size 64 --repeat 3] [--quick]
                             [--pg postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import DEFAULT_ADMIN_URL, cli_ingest, throwaway_database  # noqa: E402
from core.workload.synthetic import packed_length_rows  # noqa: E402

TARGET = 1.5


def generate(folder: Path, steps: int, groups: int, n: int, dp_size: int) -> int:
    """Write the run as per-step packed-lengths JSONL files; returns the sample count."""
    total = 0
    for rows in packed_length_rows(steps, groups, n, dp_size=dp_size):
        step = rows[0]["step"]
        (folder / f"packed_lengths_step_{step}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
        total += sum(len(r["output"]) for r in rows)
    return total


def ingest(url: str, run: Path, data_dir: Path) -> tuple[float, float]:
    """`rlvr-explorer ingest` in a subprocess; (seconds, the subprocess's peak RSS in MB)."""
    seconds = cli_ingest(url, run, data_dir, quiet=True)
    return seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def measure(repeat: int) -> dict:
    """Time read, per-analysis compute and end to end on the (only) trace of the database
    named by RLVR_DATABASE_URL."""
    from sqlalchemy import select, text

    from backend.jobs.state import create_job
    from backend.store.db import get_engine, new_session
    from backend.store.models import Job, JobStatus, Trace
    from backend.store.trace_tables import available_columns, load_trace_data
    from core.analysis.registry import default_analyses, resolve_params, run_analysis
    from core.jsonable import json_safe
    from workers.runners.analyses import _run_here, _steps_and_shared_params, union_tables

    engine = get_engine()
    with new_session() as session:
        trace = session.scalars(select(Trace).where(Trace.name == "bench")).one()
        session.expunge(trace)
    kinds = default_analyses(available_columns(trace))
    tables = union_tables(kinds)
    params = {k: resolve_params(k, {}) for k in kinds}

    def read():
        with engine.connect() as conn:
            return load_trace_data(conn, trace, tables)

    # The first read right after ingestion, with the planner statistics ingestion left
    # (none, unless autovacuum got there first); then ANALYZE, as autovacuum would do soon.
    with engine.connect() as conn:
        analyzed = conn.execute(
            text(
                "SELECT coalesce(last_analyze, last_autoanalyze) IS NOT NULL FROM pg_stat_user_tables"
                " WHERE relname = 'samples'"
            )
        ).scalar()
    t0 = time.perf_counter()
    data = read()
    first_read = time.perf_counter() - t0
    columns = {name: table.columns() for name, table in data.tables().items()}
    del data
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE samples"))
        conn.execute(text("ANALYZE steps"))
    read()  # warm-up: the same Postgres/OS cache state for every timed read below
    reads, computes, ends = [], {k: [] for k in kinds}, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        data = read()
        reads.append(time.perf_counter() - t0)
        for kind in kinds:
            t0 = time.perf_counter()
            json_safe(run_analysis(kind, data, params[kind]))
            computes[kind].append(time.perf_counter() - t0)
        del data

        with new_session() as session:
            jobs = [
                create_job(session, team_id=trace.team_id, trace_id=trace.id, kind=k, params=params[k]) for k in kinds
            ]
            session.commit()
        t0 = time.perf_counter()
        _run_here(jobs, trace, *_steps_and_shared_params(jobs, trace))
        ends.append(time.perf_counter() - t0)
        with new_session() as session:
            states = session.scalars(select(Job.status).where(Job.id.in_([j.id for j in jobs]))).all()
        if any(s != JobStatus.SUCCEEDED for s in states):
            raise RuntimeError(f"analysis jobs did not all succeed: {states}")
    return {
        "samples": trace.n_samples,
        "kinds": kinds,
        "columns": columns,
        "first_read": (first_read, analyzed),
        "read": reads,
        "compute": computes,
        "end_to_end": ends,
    }


def report(m: dict) -> None:
    read = min(m["read"])
    per = {k: min(v) for k, v in m["compute"].items()}
    compute = min(sum(ts) for ts in zip(*m["compute"].values()))
    e2e = min(m["end_to_end"])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n = m["samples"]
    print(f"samples: {n:,}   default set: {', '.join(m['kinds'])}")
    print("columns read: " + "; ".join(f"{t}({', '.join(c)})" for t, c in m["columns"].items()))
    first, analyzed = m["first_read"]
    print(
        f"first read after ingestion: {first:.2f} s (planner statistics: "
        f"{'auto-analyzed already' if analyzed else 'none yet -- ingestion does not ANALYZE'}); ANALYZE, then:"
    )
    print(f"runs: {len(m['read'])} (best of each figure shown; all runs below)")
    print(f"read (load_trace_data, union of columns):  {read:7.2f} s  {n / read:12,.0f} samples/s")
    for kind, t in per.items():
        print(f"  compute {kind:<10}                      {t:7.2f} s")
    print(f"analysis compute (sum of the set):         {compute:7.2f} s")
    print(f"end to end (_run_here: read+compute+store): {e2e:5.2f} s  {n / e2e:12,.0f} samples/s")
    print(
        f"ratio end_to_end / read: {e2e / read:.2f}  (the target: <= {TARGET})"
        f"  {'MET' if e2e / read <= TARGET else 'NOT MET'}"
    )
    print(f"ratio compute / read:    {compute / read:.2f}")
    print(f"peak RSS (this process, analyses): {rss:.0f} MB")
    print(
        "all runs (s): read "
        + " ".join(f"{t:.2f}" for t in m["read"])
        + " | end to end "
        + " ".join(f"{t:.2f}" for t in m["end_to_end"])
        + " | "
        + " | ".join(f"{k} " + " ".join(f"{t:.2f}" for t in v) for k, v in m["compute"].items())
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--groups", type=int, default=2560)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--dp-size", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="50 steps (~1M samples)")
    ap.add_argument("--pg", default=DEFAULT_ADMIN_URL, help="admin URL")
    args = ap.parse_args()
    if args.quick:
        args.steps = 50

    with throwaway_database(args.pg) as url:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            run = tmp / "run"
            run.mkdir()
            t0 = time.perf_counter()
            n_samples = generate(run, args.steps, args.groups, args.n, args.dp_size)
            size_mb = sum(f.stat().st_size for f in run.iterdir()) / 1e6
            print(
                f"trace: {args.steps} steps x {args.groups} groups x {args.n} = {n_samples:,} samples,"
                f" dp_size {args.dp_size}, {size_mb:.0f} MB JSONL (generated in {time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
            ingest_s, ingest_rss = ingest(url, run, tmp / "data")
            print(f"ingested with rlvr-explorer ingest in {ingest_s:.0f} s (peak RSS {ingest_rss:.0f} MB)", flush=True)
            # the worker's settings: this database, a scratch data folder
            os.environ["RLVR_DATABASE_URL"] = url
            os.environ["RLVR_DATA_DIR"] = str(tmp / "data")
            from backend.store.db import reset_caches

            reset_caches()  # the settings were read before (the throwaway database's migration)
            m = measure(args.repeat)
            try:
                from backend.store.db import get_engine

                get_engine().dispose()  # let DROP DATABASE go through without forcing
            except Exception:
                pass
        assert m["samples"] == n_samples, (m["samples"], n_samples)
    report(m)


if __name__ == "__main__":
    main()
