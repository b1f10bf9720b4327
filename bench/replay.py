"""Benchmark the replays and the advisor; print figures against targets.

1. Deterministic replay of a synthetic 500 steps × 8,192 samples trace (64 H100s, as
   bench/simulator.py) under every registered policy — target < 10 s each — with the
   work a policy can compute ahead forked on `--workers` processes (what `simulate`
   does on this machine); colocated policies on 16 replicas TP4 and DP64, disaggregated
   ones on 8 replicas TP4 and DP32. Each time is also given as a ratio to sync's in the
   same run, with the CPU seconds it took over all processes (less sensitive than wall time
to what else runs on the machine), and sync is timed in one process as well.
2. Monte-Carlo replay of the Search-R1 fixture (../shared/fixtures), calibrated on
   step 0, default number of runs (convergence check) over every step — target < 10 s
   (calibration reported apart).
3. Advisor sweep over the Search-R1 fixture (`--advisor`; >= 50 configurations over
   processes) — target < 60 s.

    .venv/bin/python -m bench.replay [--steps 500] [--skip-det] [--policy KIND]... [--advisor] [--workers 2]

The machine is shared (2 cores): figures are wall times of one run, not minima.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import orjson

from core.simulator import (
    MODEL_PRESETS,
    ClusterConfig,
    EngineLimits,
    Policy,
    calibrate,
    simulate,
    workload_from_columns,
)
from core.simulator.policies import POLICIES
from core.simulator.policies.base import reference_engine

REFERENCE_STEPS = 30  # the Python engine's share of the run: what it costs in the same run

FIXTURE = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "polytrace" / "search_r1_qwen2_5_7b"


def search_r1_steps():
    from core.workload.polytrace_rows import multiturn_rows_to_columns

    rows = []
    for f in sorted(FIXTURE.glob("multiturn_workload_step_*.jsonl")):
        rows += [orjson.loads(line) for line in f.read_bytes().splitlines()]
    cols = multiturn_rows_to_columns(rows)
    return workload_from_columns(cols["samples"], cols["turns"], cols["tool_calls"])


def bench_deterministic(steps: int, groups: int, n: int, workers: int, kinds: list[str]) -> None:
    from bench.simulator import synthetic_workload

    work = synthetic_workload(steps, groups, n)
    model = MODEL_PRESETS["Qwen2.5-7B"]
    colocated = ClusterConfig(n_gpus=64, rollout_replicas=16, rollout_tp=4, train_dp=64)
    split = ClusterConfig(n_gpus=64, rollout_replicas=8, rollout_tp=4, train_dp=32)

    def timed(kind: str, w: int, steps_in: list | None = None) -> tuple[float, float, float]:
        """Wall seconds, CPU seconds of this process and its (forked) children, makespan."""
        cluster = split if POLICIES[kind].disaggregated else colocated
        t, c = time.perf_counter(), cpu_seconds()
        r = simulate(steps_in or work, cluster, model, EngineLimits(), Policy(kind=kind), workers=w)
        return time.perf_counter() - t, cpu_seconds() - c, r.makespan

    base, base_cpu, _ = timed("sync", workers)  # the baseline of this run
    alone, _, _ = timed("sync", 1)
    print(
        f"deterministic replay {steps} x {groups * n:,} samples, sync: {base:.1f} s on {workers} processes, "
        f"{alone:.1f} s in one ({alone / base:.2f}x)"
    )
    for kind in kinds:
        dt, cpu, makespan = (base, base_cpu, None) if kind == "sync" else timed(kind, workers)
        spent = f"{dt:.1f} s (target < 10 s: {dt / 10:.2f} of it), {dt / base:.2f}x sync; CPU {cpu:.1f} s"
        print(
            f"  {kind:<14} {spent}, {cpu / base_cpu:.2f}x sync" + (f"; makespan {makespan:.0f} s" if makespan else "")
        )
    head = work[:REFERENCE_STEPS]
    print(f"compiled loop against the Python engine (reference_engine()), first {len(head)} steps, one process:")
    for kind in kinds:
        _, fast, m_fast = timed(kind, 1, head)
        with reference_engine():
            _, slow, m_slow = timed(kind, 1, head)
        same = "same makespan" if m_fast == m_slow else f"makespans differ: {m_fast} vs {m_slow}"
        print(f"  {kind:<14} CPU {fast:.2f} s vs {slow:.2f} s: {slow / fast:.2f}x ({same})")


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the forked ones)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def bench_monte_carlo() -> None:
    from core.simulator.evaluation import noise_for
    from core.simulator.policies.base import Env
    from core.simulator.uncertainty import monte_carlo_step

    steps = search_r1_steps()
    model = MODEL_PRESETS["Qwen2.5-7B"]
    t = time.perf_counter()
    cal = calibrate(steps, ClusterConfig(), model, EngineLimits(), fit_steps=[0])
    t_cal = time.perf_counter() - t
    t = time.perf_counter()
    noise = noise_for(steps, cal, model)
    env = Env(cal.cluster, model, cal.limits, Policy(), cal.coefficients, cal.limits.kv_capacity(cal.cluster, model))
    runs = [monte_carlo_step(env, w, noise)["n_runs"] for w in steps]
    dt = time.perf_counter() - t
    print(
        f"Monte-Carlo replay of Search-R1 ({len(steps)} steps, runs {runs}): {dt:.1f} s "
        f"(target < 10 s: {dt / 10:.2f} of it); calibration apart: {t_cal:.1f} s"
    )


def bench_advisor(workers: int) -> None:
    from core.simulator.advisor import advise, default_grid

    steps = search_r1_steps()
    grid = default_grid(16, MODEL_PRESETS["Qwen2.5-7B"])
    t = time.perf_counter()
    out = advise(steps, "H100", 16, MODEL_PRESETS["Qwen2.5-7B"], grid=grid, workers=workers, n_runs=200)
    dt = time.perf_counter() - t
    best = out["ranking"][0]
    print(
        f"advisor sweep: {out['n_configurations']} configurations on {workers} processes in {dt:.1f} s "
        f"(target < 60 s: {dt / 60:.2f} of it); best {best['label']} {best['step_s']['mean']:.1f} s/step"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--groups", type=int, default=1024)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--skip-det", action="store_true")
    ap.add_argument("--advisor", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--policy", action="append", choices=list(POLICIES), help="only these (default: every one)")
    args = ap.parse_args()
    if not args.skip_det:
        bench_deterministic(args.steps, args.groups, args.n, args.workers, args.policy or list(POLICIES))
    if FIXTURE.is_dir():
        bench_monte_carlo()
        if args.advisor:
            bench_advisor(args.workers)
    else:
        print(f"skipped the Search-R1 benchmarks: {FIXTURE} is missing")


if __name__ == "__main__":
    main()
