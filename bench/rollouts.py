"""Rollout-dump ingestion benchmark: 100k dumped samples with ~200 MB of text against the
same rows without text, measured in the same run.

Generates a verl rollout_data_dir (default 100 steps x 125 prompts x 8 samples; prompts
~300 characters, responses lognormal around ~1,900 characters with a long tail, written
as verl writes them) and the same dump with every `input` / `output` empty (the
same lines, keys, scores, extras and `uid`s, so the same groups and rows), ingests each
with `rlvr-explorer ingest` into a fresh database, and prints the wall time of each, the
ratio text / no text (target <= 2.0) and each ingest process's peak RSS (target
< 500 MB). Then the text-search index the worker builds after ingest
(workers/runners/text_index.py) is built in this process and timed: it is not part of
the ingest (searches read the texts until it is done).

    python bench/rollouts.py [--steps 100 --groups 125 --n 8] [--db postgres|sqlite] [--pg ADMIN_URL]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import DEFAULT_ADMIN_URL, throwaway_database  # noqa: E402

WORDS = (
    "the of and to a in is that for it as with was on be by this are we so then let us check answer "
    "compute value equation therefore since because first second next step sum product integer prime "
    "divide multiply x y z n k = + - * / ( ) 0 1 2 3 4 5 6 7 8 9 wait hmm actually correct"
).split()


def _text(rng: np.random.Generator, n_chars: int) -> str:
    words = rng.integers(0, len(WORDS), max(1, n_chars // 5))
    return " ".join(WORDS[i] for i in words.tolist())[:n_chars]


def generate(folder: Path, bare: Path, steps: int, groups: int, n: int, seed: int = 0) -> tuple[int, int]:
    """Write the dump with text into `folder` and the same lines without text into `bare`;
    returns (samples, characters of text)."""
    rng = np.random.default_rng(seed)
    chars = 0
    for step in range(1, steps + 1):
        with (folder / f"{step}.jsonl").open("w") as full, (bare / f"{step}.jsonl").open("w") as empty:
            for g in range(groups):
                prompt = _text(rng, int(rng.integers(150, 450)))
                for _s in range(n):
                    length = int(min(rng.lognormal(7.35, 0.6), 30_000))
                    output = _text(rng, length)
                    score = float(rng.random() < 0.5)
                    row = {"input": prompt, "output": output, "gts": str(g), "score": score, "step": step}
                    row.update(uid=f"{step}-{g}", acc=bool(score), pred=str(g))
                    full.write(json.dumps(row, ensure_ascii=False) + "\n")
                    empty.write(json.dumps({**row, "input": "", "output": ""}) + "\n")
                    chars += len(prompt) + len(output)
    return steps * groups * n, chars


def ingest(folder: Path, env: dict) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of `rlvr-explorer ingest` in a process of its own."""
    code = (
        "import resource, runpy, sys; sys.argv = ['rlvr-explorer', 'ingest', sys.argv[1], '--json'];"
        "\ntry:\n    runpy.run_module('rlvr_explorer', run_name='__main__')\nexcept SystemExit:\n    pass"
        "\nprint('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)"
    )
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder)], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    summary = json.loads(out.stdout[out.stdout.rindex('{"id"') :].splitlines()[0])
    assert summary["status"] == "ready", summary
    peak = float(next(line.split()[1] for line in out.stderr.splitlines() if line.startswith("PEAK")))
    return wall, peak


def index_time(env: dict) -> tuple[float, int]:
    os.environ.update(env)
    from backend.store.db import get_engine, reset_caches
    from workers.runners.text_index import build_text_index

    reset_caches()  # the settings were read before (the throwaway database's migration)
    engine = get_engine()
    with engine.connect() as conn:
        trace_id = conn.exec_driver_sql("SELECT max(trace_id) FROM sample_texts").scalar()
    t0 = time.perf_counter()
    n = build_text_index(engine, trace_id)
    return time.perf_counter() - t0, n


def run(args, url: str | None, tmp: Path) -> None:
    full, bare = tmp / "dump", tmp / "bare"
    full.mkdir()
    bare.mkdir()
    n, chars = generate(full, bare, args.steps, args.groups, args.n)
    mb = sum(p.stat().st_size for p in full.iterdir()) / 1e6
    print(f"dump: {n:,} samples, {chars / 1e6:.0f} M characters of text, {mb:.0f} MB of JSONL ({args.db})")
    results = {}
    for name, folder in (("without text", bare), ("with text", full)):
        data = tmp / f"data-{name.replace(' ', '-')}"
        env = {**os.environ, "RLVR_DATA_DIR": str(data)}
        env["RLVR_DATABASE_URL"] = url if url else f"sqlite:///{data / 'bench.sqlite3'}"
        results[name] = (*ingest(folder, env), env)
        print(
            f"ingest {name:<13} {results[name][0]:7.2f} s  {n / results[name][0]:10,.0f} samples/s  peak RSS {results[name][1]:.0f} MB"
        )
    ratio = results["with text"][0] / results["without text"][0]
    print(f"ratio with / without text: {ratio:.2f}  (target <= 2.0; peak memory target < 500 MB)")
    seconds, indexed = index_time(results["with text"][2])
    print(
        f"text-search index (the worker's job after ingest): {indexed:,} samples in {seconds:.2f} s ({chars / 1e6 / seconds:.1f} M characters/s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--groups", type=int, default=125)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    ap.add_argument("--pg", default=DEFAULT_ADMIN_URL, help="admin URL (postgres)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.db == "sqlite":
            run(args, None, Path(tmp))
            return
        with throwaway_database(args.pg) as url:
            run(args, url, Path(tmp))


if __name__ == "__main__":
    main()
