"""Sim-to-real: for every policy that runs on an engine and each workload, the real-engine
replay (vLLM) beside the simulator's prediction from an engine profile — a profile
measured first by the calibration sweep on the same engine, never fitted to the runs it
predicts. Prints measured vs predicted rollout makespan and p90 completion with their
relative errors, the what-if speedup of each policy over sync (measured vs predicted),
and the mean of each error over the workloads (all runs, not the best).

Workloads: a shared fixture's lengths scaled (verl DAPO, Qwen2.5-32B), a generated
long-tail run (lognormal responses, sigma 1.2), and a multi-turn run (Search-R1, its
lengths scaled, its recorded tool latencies waited out between turns) under the policies
that replay multi-turn trajectories on an engine (sync).

    RLVR_ENGINE_PYTHON=DIR/bin/python python -m bench.sim_to_real [--arch tiny] \
        [--max-requests 64] [--length-scale 0.05] [--steps 2] [--json]

On a GPU: `--arch qwen2.5-7b --length-scale 1` with the engine environment built there.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from core.simulator import StepWorkload, workload_from_columns
from core.simulator.policies import POLICIES
from core.workload.polytrace_rows import multiturn_rows_to_columns, packed_rows_to_columns
from engine.client import EnginePool
from engine.policies import engine_policy
from engine.replay import engine_replay, model_config, relative_error
from engine.runs import calibrate_on, engine_env, resolve_model
from engine.workload import engine_workload

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "polytrace"


def fixture_workload(name: str, steps: int) -> list[StepWorkload]:
    rows = []
    for f in sorted((FIXTURES / name).glob("packed_lengths_step_*.jsonl"))[:steps]:
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return workload_from_columns(packed_rows_to_columns(rows))


def multiturn_workload(name: str, steps: int) -> list[StepWorkload]:
    rows = []
    for f in sorted((FIXTURES / name).glob("multiturn_workload_step_*.jsonl"))[:steps]:
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    cols = multiturn_rows_to_columns(rows)
    return workload_from_columns(cols["samples"], cols["turns"], cols["tool_calls"])


def long_tail_workload(steps: int, groups: int = 16, n: int = 4, seed: int = 0) -> list[StepWorkload]:
    rng = np.random.default_rng(seed)
    out = []
    for s in range(steps):
        prompt = rng.integers(200, 1200, groups)
        resp = [np.minimum(16384, rng.lognormal(np.log(1200), 1.2, n)).astype(np.int64) + 1 for _ in range(groups)]
        out.append(StepWorkload.from_groups(s, prompt, resp))
    return out


def workloads(steps: int) -> dict[str, list[StepWorkload] | str]:
    out: dict[str, list[StepWorkload] | str] = {}
    dapo = "verl_dapo_qwen2_5_32b"
    out[f"{dapo} (scaled)"] = fixture_workload(dapo, steps) if (FIXTURES / dapo).is_dir() else "fixture absent"
    out["long tail (generated)"] = long_tail_workload(steps)
    search = "search_r1_qwen2_5_7b"
    out["search_r1 (multi-turn)"] = (
        multiturn_workload(search, steps) if (FIXTURES / search).is_dir() else "fixture absent"
    )
    return out


def run(args: argparse.Namespace) -> dict:
    config, shape = resolve_model(args.arch, None)
    t0 = time.monotonic()
    with EnginePool(config, 1, env=engine_env()) as pool:
        start_s = pool.start_s
        profile = calibrate_on(pool, shape, print)
    print(f"engine start {start_s:.1f} s; calibration {time.monotonic() - t0:.1f} s; fit {profile['fit']}")
    print(f"coefficients {profile['coefficients']}")
    model = model_config(shape.name, shape.__dict__, shape.params)
    runnable = [k for k, s in POLICIES.items() if s.not_on_engine is None]
    wls = workloads(args.steps)
    rows = []
    for kind in runnable:
        design, _ = engine_policy(kind, {})
        k = design.engines
        with EnginePool(config, k, env=engine_env()) as pool:
            for name, wl in wls.items():
                multiturn = not isinstance(wl, str) and any(w.is_multiturn for w in wl)
                if isinstance(wl, str) or (multiturn and not design.multiturn):
                    why = wl if isinstance(wl, str) else "multi-turn trajectories run on an engine under sync only"
                    rows.append({"policy": kind, "workload": name, "skipped": why})
                    continue
                scaled = engine_workload(
                    wl,
                    max_requests=args.max_requests,
                    length_scale=args.length_scale,
                    max_len=config["max_model_len"],
                    block_size=int(pool.limits[0].get("block_size", 1)),
                )
                out = engine_replay(pool, scaled, kind, {}, profile, model, shape.vocab, print)
                rows.append({"workload": name, **out})
                print(_row_line(rows[-1]), flush=True)
    _speedups(rows)
    return {"profile": profile, "rows": rows, "means": _means(rows)}


def _speedups(rows: list[dict]) -> None:
    """Each policy's speedup over sync on the same workload, measured and predicted."""
    sync = {r["workload"]: r for r in rows if r.get("policy") == "sync" and "measured" in r}
    for r in rows:
        base = sync.get(r.get("workload"))
        if base is None or "measured" not in r or r["policy"] == "sync":
            continue
        m = base["measured"]["makespan_s"] / r["measured"]["makespan_s"]
        p = base["predicted"]["makespan_s"] / r["predicted"]["makespan_s"]
        r["speedup"] = {"measured": m, "predicted": p, "error": relative_error(p, m)}


def _means(rows: list[dict]) -> dict:
    out = {}
    for kind in dict.fromkeys(r["policy"] for r in rows):
        done = [r for r in rows if r["policy"] == kind and "measured" in r]
        if not done:
            continue
        out[kind] = {
            "runs": len(done),
            "lengths_exact": all(r["lengths_exact"] for r in done),
            "makespan_abs_error": float(np.mean([abs(r["error"]["makespan"]) for r in done])),
            "p90_completion_abs_error": float(np.mean([abs(r["error"]["p90_completion"]) for r in done])),
        }
        sp = [abs(r["speedup"]["error"]) for r in done if "speedup" in r]
        if sp:
            out[kind]["speedup_abs_error"] = float(np.mean(sp))
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}%"


def _row_line(r: dict) -> str:
    if "skipped" in r:
        return f"{r['policy']:14} {r['workload']:30} {r['skipped']}"
    m, p, e = r["measured"], r["predicted"], r["error"]
    sp = r.get("speedup")
    speed = f" speedup {sp['measured']:.2f}x/{sp['predicted']:.2f}x ({_pct(sp['error'])})" if sp else ""
    return (
        f"{r['policy']:14} {r['workload']:30} n={r['requests']:4} exact={r['lengths_exact']!s:5} "
        f"makespan {m['makespan_s']:7.2f}/{p['makespan_s']:7.2f} s ({_pct(e['makespan'])}) "
        f"p90 {m['p90_completion_s']:6.2f}/{p['p90_completion_s']:6.2f} s ({_pct(e['p90_completion'])}){speed} "
        f"cpu {'/'.join(f'{c:.0%}' for c in r['cpu_share'] if c is not None)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="tiny")
    ap.add_argument("--max-requests", type=int, default=64)
    ap.add_argument("--length-scale", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = run(args)
    print("\nmeasured/predicted per run:")
    for r in result["rows"]:
        print(_row_line(r))
    print("\nmean |error| over the workloads, per policy:")
    for kind, m in result["means"].items():
        sp = f", speedup {m['speedup_abs_error'] * 100:.1f}%" if "speedup_abs_error" in m else ""
        print(
            f"  {kind:14} runs {m['runs']}, lengths exact {m['lengths_exact']}: makespan "
            f"{m['makespan_abs_error'] * 100:.1f}%, p90 completion {m['p90_completion_abs_error'] * 100:.1f}%{sp}"
        )
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
