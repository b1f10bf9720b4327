"""The advisor sweep over the fleet: one worker process against two.

Generates a packed-lengths run (default 6 steps x 256 groups x 8 = 12,288 samples),
ingests it into a throwaway embedded deployment (SQLite and the filesystem queue in a
temporary folder, nothing shared with anything else on the machine) and starts real
workers on it (`rlvr-explorer worker`), each setup on a queue of its own: one worker of
one process, two workers of one process, one worker of two processes. An advice job
over the whole trace (8 H100s, Qwen2.5-7B, every policy, DP balancing none / kk, at
most 128 and 512 running sequences: 228 configurations in 20 rollout layouts, so 20
`advice_part` tasks) is sent to each in turn: a first round warms the workers up
(imports, compiled code), then `--pairs` alternating rounds are timed, from dispatch to
the job's success. Prints each wall time, the speed-up per round over one process and
their mean (target >= 1.7), the results compared (each must equal one process's), and
the machine's load before and after (`os.getloadavg`: it is shared, and the speed-up is
only as good as the second core is free).

Bounded: every job has `--timeout` seconds; the workers are stopped (SIGTERM, then
SIGKILL of their process group) and the folder removed whatever happens.

Each sweep's CPU seconds over the worker's processes are printed beside its wall time
(what the machine's other load cannot inflate as much).

    python bench/advise_fleet.py [--steps 6 --groups 256 --n 8 --pairs 3 --timeout 600] [--logs DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import cli_ingest  # noqa: E402
from bench._servers import stop_process  # noqa: E402
from core.workload.synthetic import packed_length_rows  # noqa: E402

TARGET = 1.7
BODY = {"gpu": "h100", "n_gpus": 8, "model": "qwen2.5-7b", "concurrency": [128, 512]}


def generate(folder: Path, steps: int, groups: int, n: int) -> None:
    folder.mkdir(parents=True)
    for rows in packed_length_rows(steps, groups, n, dp_size=8):
        (folder / f"packed_lengths_step_{rows[0]['step']}.jsonl").write_bytes(
            b"".join(orjson.dumps(r) + b"\n" for r in rows)
        )


def start_worker(env: dict[str, str], log: Path, concurrency: int) -> subprocess.Popen:
    out = log.open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_explorer", "worker", f"--concurrency={concurrency}", "--loglevel=INFO"],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while b"ready." not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise RuntimeError(f"worker did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    return proc


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of a process group (a worker:
    its main process and its pool), from /proc."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def sweep(team_id: int, trace_id: int, queue: str, timeout: float) -> tuple[float, dict]:
    """Wall seconds of one advice job on `queue`, and its result."""
    from backend.jobs.advice import advice_request
    from backend.jobs.dispatch import dispatch
    from backend.jobs.state import create_job
    from backend.store.db import new_session, session_scope
    from backend.store.models import Job, JobStatus

    params = advice_request({**BODY, "trace_id": trace_id}).to_json()
    with session_scope() as session:
        job = create_job(session, team_id=team_id, trace_id=trace_id, kind="advice", params=params)
        job.queue = queue
        job_id = job.id
    t0 = time.perf_counter()
    dispatch(job_id, "advice", queue=queue)
    deadline = time.monotonic() + timeout
    while True:
        with new_session() as session:
            job = session.get_one(Job, job_id)
            if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                break
        if time.monotonic() > deadline:
            raise RuntimeError(f"advice job {job_id} did not finish in {timeout:.0f} s")
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    if job.status != JobStatus.SUCCEEDED:
        raise RuntimeError(f"advice job {job_id} failed: {job.error}")
    return wall, dict(job.result)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--logs", type=Path, help="copy the workers' logs to this folder")
    args = ap.parse_args()
    load_before = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="rlvr-advise-fleet-"))
    workers: list[subprocess.Popen] = []
    try:
        data = folder / "data"
        url = f"sqlite:///{data / 'bench.sqlite3'}"
        from backend.store.migrate import upgrade

        data.mkdir()
        upgrade(url)
        generate(folder / "run", args.steps, args.groups, args.n)
        cli_ingest(url, folder / "run", data, quiet=True)
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
        env.update({"RLVR_DATABASE_URL": url, "RLVR_DATA_DIR": str(data), "RLVR_BROKER_URL": "filesystem://"})
        os.environ.update({k: env[k] for k in ("RLVR_DATABASE_URL", "RLVR_DATA_DIR", "RLVR_BROKER_URL")})
        from backend.store.db import new_session, reset_caches
        from backend.store.models import Trace

        reset_caches()
        with new_session() as session:
            trace = session.query(Trace).one()
            team_id, trace_id, samples = trace.team_id, trace.id, trace.n_samples
        # name: (workers, processes each); each setup on a queue of its own
        setups = {"1 process": (1, 1), "2 workers x 1 process": (2, 1), "1 worker x 2 processes": (1, 2)}
        groups: dict[str, list[int]] = {}
        for name, (n_workers, procs) in setups.items():
            queue = "advise-" + name.replace(" ", "")
            for i in range(n_workers):
                w = start_worker({**env, "RLVR_QUEUE_NAME": queue}, folder / f"{queue}-{i}.log", procs)
                workers.append(w)
                groups.setdefault(name, []).append(w.pid)
        print(f"trace: {args.steps} steps, {samples:,} samples; load before {load_before[0]:.2f}", flush=True)
        walls: dict[str, list[float]] = {name: [] for name in setups}
        results: dict[str, dict] = {}
        names = list(setups)
        for rnd in range(args.pairs + 1):
            for name in names if rnd % 2 == 0 else names[::-1]:
                cpu = sum(group_cpu_s(g) for g in groups[name])
                queue = "advise-" + name.replace(" ", "")
                wall, results[name] = sweep(team_id, trace_id, queue, args.timeout)
                cpu = sum(group_cpu_s(g) for g in groups[name]) - cpu
                print(
                    f"{'warm-up' if rnd == 0 else f'round {rnd}'}: {name}: {wall:.1f} s, {cpu:.1f} CPU s "
                    f"({results[name]['parts']} parts, {results[name]['n_swept_settings']} configurations)",
                    flush=True,
                )
                if rnd:
                    walls[name].append(wall)
        one = names[0]
        strip = ("part_workers",)
        for name in names[1:]:
            ratios = [a / b for a, b in zip(walls[one], walls[name], strict=True)]
            same = {k: v for k, v in results[name].items() if k not in strip} == {
                k: v for k, v in results[one].items() if k not in strip
            }
            print(
                f"advisor sweep of {results[one]['n_swept_settings']} configurations in {results[one]['parts']} "
                f"parts: {one} {statistics.mean(walls[one]):.1f} s, {name} {statistics.mean(walls[name]):.1f} s "
                f"(means); speed-up per round {', '.join(f'{r:.2f}' for r in ratios)}, mean "
                f"{statistics.mean(ratios):.2f} (target >= {TARGET}); results identical to one process: {same}"
            )
        load_after = os.getloadavg()
        print(f"load average (1 min): {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    finally:
        for proc in workers:
            stop_process(proc)
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            for log in folder.glob("*.log"):
                shutil.copy(log, args.logs / log.name)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
