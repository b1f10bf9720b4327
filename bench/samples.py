"""Sample-table benchmark: the drill-down's first page on a 10 M-sample trace, and the
new readers' scalar throughput.

1. Readers: writes a TensorBoard event file with TensorBoard's own writer (one scalar
   per event, as PyTorch's ``SummaryWriter.add_scalar`` does -- the worst case) and a
   W&B history CSV, and times `read_tensorboard` / `read_wandb_csv` on them
   (points/s; the target is >= 100k scalar points/s).
2. Samples: generates a native Parquet trace (default 1,000 steps x 10,000 samples =
   10 M; dp_rank, num_turns, truncated, reward, latency_s filled), ingests it into a
   throwaway Postgres database with ``rlvr-explorer ingest`` (the product's
   ingestion), runs ANALYZE (as autovacuum soon would), then times
   ``GET /api/v1/traces/{id}/samples`` through the FastAPI app (routing, SQL,
   serialisation) for each drill-down the dashboard makes: one step; one step by
   response length desc; a length bin (all steps); a DP rank; a turn count; truncated
   in a step range. Each is timed `--repeat` times; best and median shown (a 2-core
   machine shared with other work). The target: the filtered first page < 300 ms.

    python bench/samples.py [--steps 1000 --per-step 10000 --repeat 5] [--quick]
                            [--pg postgresql://postgres@127.0.0.1:5432/postgres] [--readers-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import DEFAULT_ADMIN_URL, cli_ingest, throwaway_database  # noqa: E402

TARGET_MS = 300.0
TARGET_POINTS = 100_000


def bench_readers(folder: Path, events: int) -> None:
    from tensorboardX.event_file_writer import EventFileWriter
    from tensorboardX.proto import event_pb2, summary_pb2

    from backend.formats.base import ReadResult, Source
    from backend.formats.tensorboard import read_tensorboard
    from backend.formats.wandb_history import read_wandb_csv

    tb = folder / "tb"
    writer = EventFileWriter(str(tb), max_queue_size=10_000)
    tags = [f"metric/{k}" for k in range(10)]
    for i in range(events):
        value = summary_pb2.Summary.Value(tag=tags[i % 10], simple_value=float(i))
        writer.add_event(event_pb2.Event(step=i // 10, wall_time=1.0, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    (path,) = tb.iterdir()
    csv_path = folder / "history.csv"
    with csv_path.open("w") as f:
        f.write("_step,_runtime," + ",".join(tags) + "\n")
        for s in range(events // 10):
            f.write(f"{s},{s * 0.5}," + ",".join(str(s + k * 0.1) for k in range(10)) + "\n")
    for label, reader, p, points in (
        ("tensorboard (1 scalar/event)", read_tensorboard, path, events),
        ("wandb-csv (11 columns/row)", read_wandb_csv, csv_path, events // 10 * 11),
    ):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _batch in reader(Source(p.name, lambda p=p: p.open("rb"), p.stat().st_size), ReadResult()):
                pass
            best = min(best, time.perf_counter() - t0)
        rate = points / best
        print(
            f"reader {label:<30} {points:>10,} points {best:6.2f} s  {rate:>10,.0f} points/s"
            f"  {'MET' if rate >= TARGET_POINTS else 'NOT MET'} (>= {TARGET_POINTS:,})"
        )


def generate(path: Path, steps: int, per_step: int) -> int:
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(0)
    group = 8
    with _Writer(path) as w:
        for lo in range(0, steps, 10):
            hi = min(steps, lo + 10)
            n = (hi - lo) * per_step
            idx = np.arange(n) % per_step
            response = np.minimum(rng.lognormal(6.5, 1.0, n).astype(np.int32) + 1, 16384)
            w.write(
                pa.table(
                    {
                        "step": np.repeat(np.arange(lo, hi, dtype=np.int32), per_step),
                        "group_idx": (idx // group).astype(np.int32),
                        "sample_idx": (idx % group).astype(np.int32),
                        "prompt_len": rng.integers(50, 1000, n, dtype=np.int32),
                        "response_len": response,
                        "dp_rank": ((idx // group) % 64).astype(np.int32),
                        "num_turns": rng.integers(1, 9, n, dtype=np.int32),
                        "truncated": response >= 16384,
                        "reward": rng.random(n),
                        "latency_s": rng.random(n) * 30,
                    }
                )
            )
    return steps * per_step


class _Writer:
    def __init__(self, path: Path):
        self.path, self.writer = path, None

    def __enter__(self):
        return self

    def write(self, table) -> None:
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema)
        self.writer.write_table(table, row_group_size=1_000_000)

    def __exit__(self, *exc) -> None:
        if self.writer is not None:
            self.writer.close()


QUERIES = [
    ("one step (a step's mark)", lambda s: {"step": s // 2, "limit": 50}),
    ("one step, longest first", lambda s: {"step": s // 2, "sort": "response_len", "order": "desc", "limit": 50}),
    ("length bin 4096-8192, all steps", lambda s: {"response_len_min": 4096, "response_len_max": 8192, "limit": 50}),
    (
        "length bin, longest first",
        lambda s: {
            "response_len_min": 4096,
            "response_len_max": 8192,
            "sort": "response_len",
            "order": "desc",
            "limit": 50,
        },
    ),
    (
        "dp_rank 7 of step",
        lambda s: {"step": s // 3, "dp_rank": 7, "sort": "response_len", "order": "desc", "limit": 50},
    ),
    ("dp_rank 7, all steps", lambda s: {"dp_rank": 7, "limit": 50}),
    ("num_turns 8, all steps", lambda s: {"num_turns": 8, "limit": 50}),
    ("truncated, steps 100-200", lambda s: {"truncated": "true", "step_min": 100, "step_max": 200, "limit": 50}),
]


def bench_samples(url: str, steps: int, per_step: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-samples-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        run = Path(tmp) / "run"
        run.mkdir()
        t0 = time.perf_counter()
        n = generate(run / "samples.parquet", steps, per_step)
        print(f"generated {n:,} samples in {time.perf_counter() - t0:.1f} s")
        print(f"ingested in {cli_ingest(url, run, data_dir):.1f} s")
        os.environ.update({"RLVR_DATABASE_URL": url, "RLVR_DATA_DIR": str(data_dir)})
        from fastapi.testclient import TestClient
        from sqlalchemy import select, text

        from backend.api import create_app
        from backend.store.db import get_engine, new_session, reset_caches
        from backend.store.models import Trace
        from rlvr_explorer.cli.main import local_team_key

        reset_caches()
        with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE samples"))
        with new_session() as s:
            trace_id = s.scalars(select(Trace.id).where(Trace.name == "bench")).one()
        _, key = local_team_key()
        with TestClient(create_app()) as client:
            client.headers["X-API-Key"] = key
            for label, params in QUERIES:
                p = params(steps)
                times = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    r = client.get(f"/api/v1/traces/{trace_id}/samples", params=p)
                    times.append((time.perf_counter() - t0) * 1000)
                    r.raise_for_status()
                body = r.json()
                best, med = min(times), statistics.median(times)
                print(
                    f"{label:<34} rows {len(body['items']):>3}  total {body['total']:>7,}"
                    f"{'+' if body['total_is_lower_bound'] else ' '}  best {best:7.1f} ms  median {med:7.1f} ms"
                    f"  {'MET' if med < TARGET_MS else 'NOT MET'} (< {TARGET_MS:.0f} ms)"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--per-step", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--events", type=int, default=500_000, help="scalar points for the reader bench")
    ap.add_argument("--quick", action="store_true", help="100 steps (1 M samples), 100k points")
    ap.add_argument("--readers-only", action="store_true")
    ap.add_argument("--pg", default=DEFAULT_ADMIN_URL)
    args = ap.parse_args()
    if args.quick:
        args.steps, args.events = 100, 100_000
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-readers-") as tmp:
        bench_readers(Path(tmp), args.events)
    if args.readers_only:
        return
    with throwaway_database(args.pg) as url:
        bench_samples(url, args.steps, args.per_step, args.repeat)


if __name__ == "__main__":
    main()
