"""Ingestion benchmark: our end-to-end path versus a raw COPY of the same rows.

Generates a PolyTrace packed-lengths run (default 500 steps x 1,280 groups x 8 = 5.12M
samples), then alternates, --runs times, in a fresh database each time: ingest it into
Postgres with `rlvr-explorer ingest` (parse, validate, binary COPY, per-step summaries),
then load the same sample rows with a plain `COPY samples FROM STDIN (FORMAT csv)` from
a CSV file. Alternating puts the machine's noise on both sides; the ratio reported is
the median of the pairs' ratios (target <= 1.3), with the ingest process's peak memory
(target < 500 MB).

    python bench/ingest.py [--steps 500 --groups 1280 --n 8] [--runs 3] [--pg postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import psycopg
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import DEFAULT_ADMIN_URL, cli_ingest, throwaway_database  # noqa: E402
from core.workload.synthetic import packed_length_rows  # noqa: E402

COLUMNS = (
    "trace_id",
    "step",
    "group_idx",
    "sample_idx",
    "rank",
    "dp_rank",
    "tp_rank",
    "prompt_len",
    "response_len",
    "validate",
)
# The raw COPY's trace id, fixed so one CSV serves every fresh database (ours get small
# ids from the sequence).
RAW_TRACE_ID = 1_000_000
TARGET_RATIO, TARGET_RSS_MB = 1.3, 500


def generate(
    folder: Path,
    steps: int,
    groups: int,
    n: int,
    csv_path: Path,
    trace_id: int = RAW_TRACE_ID,
    dp_size: int = 8,
    seed: int = 0,
) -> int:
    """Write the run (on `dp_size` DP ranks) as JSONL files and the same sample rows as CSV
    for `trace_id`."""
    total = 0
    with csv_path.open("w") as csv:
        for rows in tqdm(
            packed_length_rows(steps, groups, n, dp_size=dp_size, seed=seed), total=steps, desc="generate", unit="step"
        ):
            step = rows[0]["step"]
            (folder / f"packed_lengths_step_{step}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
            out = np.array([r["output"] for r in rows])
            g = np.repeat(np.arange(groups), n)
            i = np.tile(np.arange(n), groups)
            prompt = np.repeat([r["input"] for r in rows], n)
            dp = np.repeat([r["dp_rank"] for r in rows], n)
            block = np.column_stack([np.full(g.size, step), g, i, dp, dp, np.zeros(g.size, int), prompt, out.ravel()])
            lines = "\n".join(f"{trace_id}," + ",".join(map(str, row)) + ",f" for row in block.tolist())
            csv.write(lines + "\n")
            total += g.size
    return total


def baseline_trace(url: str, trace_id: int = RAW_TRACE_ID) -> int:
    """A trace row (of its own team) for the raw COPY to load into."""
    with psycopg.connect(url, autocommit=True) as conn:
        team = conn.execute("INSERT INTO teams (name, created_at) VALUES ('baseline', now()) RETURNING id").fetchone()[
            0
        ]
        conn.execute(
            "INSERT INTO traces (id, team_id, name, status, content_hash, size_bytes, n_steps, n_samples, n_turns,"
            " n_tool_calls, n_rank_timings, n_gpu_events, tasks, meta, created_at, updated_at)"
            " VALUES (%s, %s, 'raw-copy', 'ready', 'raw', 0, 0, 0, 0, 0, 0, 0, '[]', '{}', now(), now())",
            (trace_id, team),
        )
    return trace_id


def run_copy(url: str, csv_path: Path, trace_id: int = RAW_TRACE_ID) -> tuple[float, int]:
    """Wall seconds of a raw CSV COPY of the rows, and how many samples ours stored."""
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        with (
            conn.transaction(),
            conn.cursor().copy(f"COPY samples ({', '.join(COLUMNS)}) FROM STDIN (FORMAT csv)") as cp,
            csv_path.open("rb") as f,
        ):
            while chunk := f.read(8 << 20):
                cp.write(chunk)
        raw = time.perf_counter() - t0
        stored = conn.execute("SELECT count(*) FROM samples WHERE trace_id <> %s", (trace_id,)).fetchone()[0]
    return raw, stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--groups", type=int, default=1280)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3, help="alternating pairs (ours, COPY), each in a fresh database")
    ap.add_argument("--pg", default=DEFAULT_ADMIN_URL, help="admin URL")
    args = ap.parse_args()

    ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        run = tmp / "run"
        run.mkdir()
        csv_path = tmp / "samples.csv"
        n_samples = generate(run, args.steps, args.groups, args.n, csv_path)
        size_mb = sum(f.stat().st_size for f in run.iterdir()) / 1e6
        print(
            f"trace: {args.steps} steps x {args.groups} groups x {args.n} = {n_samples:,} samples, {size_mb:.0f} MB JSONL"
        )
        for i in range(args.runs):
            with throwaway_database(args.pg) as url:
                baseline_trace(url)
                ours = cli_ingest(url, run, tmp / f"data{i}")
                raw, stored = run_copy(url, csv_path)
            assert stored == n_samples, (stored, n_samples)
            ratios.append(ours / raw)
            print(
                f"pair {i + 1}: ours {ours:7.2f} s ({n_samples / ours:11,.0f} samples/s)"
                f"  raw COPY {raw:7.2f} s ({n_samples / raw:11,.0f} samples/s)  ratio {ours / raw:.2f}",
                flush=True,
            )
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    median = statistics.median(ratios)
    print(
        f"ratio ours / raw COPY: median {median:.2f} of {len(ratios)} alternating pairs, mean {statistics.mean(ratios):.2f}"
        f"  (target <= {TARGET_RATIO}: {'met' if median <= TARGET_RATIO else 'missed'})"
    )
    print(
        f"ingest peak RSS {peak_mb:.0f} MB (target < {TARGET_RSS_MB} MB: {'met' if peak_mb < TARGET_RSS_MB else 'missed'})"
    )


if __name__ == "__main__":
    main()
