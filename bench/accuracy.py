"""Rolling-origin accuracy of the default replay on the real multi-turn fixtures.

Every multi-turn PolyTrace run in ../shared/fixtures/polytrace (folders holding
`multiturn_workload_step_*.jsonl`): calibrate on the measured, non-partial steps before
each step, predict it (Monte-Carlo mean and P10-P90), and print per step and the mean
over all eligible steps: accuracy of the rollout time, the naive predictors', and how
often the 80 % interval covers the measured value. The cluster is the CLI's default
(8 H100, sync on 8 replicas TP1, training DP8, Qwen2.5-7B).

    .venv/bin/python -m bench.accuracy [--window 4]

With `--per-request`, every request of each held-out step instead (each turn's latency
and each trajectory's completion time, `core.simulator.request_accuracy`): once rolling
(calibrated on the steps before it) and once with each non-partial step in turn the
calibration and the others held out; one line per held-out step and level, then the
mean over every eligible step, with bootstrap 90 % intervals over requests.

    .venv/bin/python -m bench.accuracy --per-request [--window 4] [--boot 1000] [--deterministic]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import orjson

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, workload_from_columns
from core.simulator.evaluation import DEFAULT_WINDOW, held_out_requests, rolling_origin
from core.simulator.request_accuracy import LEVELS, NAIVE
from core.simulator.request_scores import DEFAULT_BOOT, NO_INTERVAL

FIXTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "polytrace"


def runs() -> dict[str, list]:
    from core.workload.polytrace_rows import multiturn_rows_to_columns

    out = {}
    for folder in sorted(p for p in FIXTURES.glob("*") if p.is_dir()):
        files = sorted(folder.glob("multiturn_workload_step_*.jsonl"))
        if not files:
            continue
        rows = [orjson.loads(line) for f in files for line in f.read_bytes().splitlines()]
        cols = multiturn_rows_to_columns(rows)
        out[folder.name] = workload_from_columns(cols["samples"], cols["turns"], cols["tool_calls"])
    return out


PLURAL = {"turn": "turns", "trajectory": "trajectories"}
MODEL = MODEL_PRESETS["Qwen2.5-7B"]
CLUSTER = ClusterConfig(n_gpus=8, rollout_replicas=8, rollout_tp=1, train_dp=8)


def _ci(f: dict | None, pct: bool = True) -> str:
    if f is None:
        return "n/a"
    v, (lo, hi) = f["value"], f["ci90"]
    return f"{100 * v:.1f}% [{100 * lo:.1f}-{100 * hi:.1f}]" if pct else f"{v:.3f} [{lo:.3f}-{hi:.3f}]"


def _request_line(s: dict) -> str:
    """One level of one held-out step (or of the mean, whose figures have no interval)."""

    def show(f: dict | float | str | None, pct: bool = True) -> str:
        if isinstance(f, float):
            return f"{100 * f:.1f}%" if pct else f"{f:.3f}"
        return f if isinstance(f, str) else _ci(f, pct)

    skills = ", ".join(f"{k} {show(s['naive'][k]['skill'], False)}" for k in NAIVE)
    cover = s["coverage"] if s["coverage"] == NO_INTERVAL else show(s["coverage"])
    return (
        f"error median {show(s['median_abs_rel_error'])}, p90 {show(s['p90_abs_rel_error'])}, "
        f"bias {show(s['median_rel_error'])}; W1/mean {show(s['w1_over_mean'])}, KS {show(s['ks'], False)}; "
        f"P10-P90 covers {cover}; skill vs {skills}"
    )


def per_request(name: str, steps: list, args: argparse.Namespace) -> None:
    for scheme in ("rolling", "each"):
        t = time.perf_counter()
        r = held_out_requests(
            steps,
            CLUSTER,
            MODEL,
            EngineLimits(),
            scheme=scheme,
            window=args.window,
            monte_carlo=not args.deterministic,
            n_boot=args.boot,
        )
        print(f"{name}, {scheme}: {len(r['steps'])} held-out step(s), partial {r['partial_steps']}, "
              f"{time.perf_counter() - t:.0f} s")  # fmt: skip
        for row in r["steps"]:
            flag = " PARTIAL (kept out of the mean)" if row["partial"] else ""
            for level in LEVELS:
                if row[level] is not None:
                    print(f"  step {row['step']} (fit on {row['calibrated_on']}) {PLURAL[level]} "
                          f"n={row[level]['n']}{flag}: {_request_line(row[level])}")  # fmt: skip
        mean = r["mean"]
        for level in LEVELS:
            if mean[level] is not None:
                print(f"  mean over {len(mean['steps'])} eligible held-out step(s) {mean['steps']}, {PLURAL[level]}: "
                      f"{_request_line(mean[level])}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    ap.add_argument("--per-request", action="store_true", help="score every request of the held-out steps")
    ap.add_argument("--boot", type=int, default=DEFAULT_BOOT, help="bootstrap resamples (--per-request)")
    ap.add_argument("--deterministic", action="store_true", help="--per-request: no Monte-Carlo, no intervals")
    args = ap.parse_args()
    if not FIXTURES.is_dir():
        print(f"no fixtures at {FIXTURES}: nothing to measure")
        return
    if args.per_request:
        for name, steps in runs().items():
            per_request(name, steps, args)
        return
    model, cluster = MODEL, CLUSTER
    acc, naive, prev, det, cover = [], [], [], [], []
    for name, steps in runs().items():
        t = time.perf_counter()
        ro = rolling_origin(steps, cluster, model, EngineLimits(), window=args.window)
        print(f"{name}: {len(ro['steps'])} predicted step(s), partial {ro['partial_steps']}, "
              f"{time.perf_counter() - t:.0f} s")  # fmt: skip
        for r in ro["steps"]:
            f = r["rollout_s"]
            print(
                f"  step {r['step']} (fit on {r['calibrated_on']}){' partial' if r['partial'] else ''}: "
                f"measured {f['measured']:.1f} s, predicted {f['predicted']:.1f} s "
                f"{[round(x, 1) for x in f.get('interval') or []]}, accuracy {f['accuracy']}, "
                f"deterministic {f.get('deterministic_accuracy')}, naive {f.get('naive_accuracy')}, "
                f"repeat previous {f.get('naive_previous_accuracy')}"
            )
            if r["partial"]:
                continue
            acc.append(f["accuracy"] or 0.0)
            det.append(f.get("deterministic_accuracy") or 0.0)
            naive.append(f.get("naive_accuracy") or 0.0)
            prev.append(f.get("naive_previous_accuracy") or 0.0)
            if f.get("covered") is not None:
                cover.append(f["covered"])
    if not acc:
        print("no eligible step")
        return
    print(
        f"mean over {len(acc)} eligible step(s): accuracy {100 * np.mean(acc):.1f} %, deterministic "
        f"{100 * np.mean(det):.1f} %, naive (mean of fit steps) {100 * np.mean(naive):.1f} %, repeat previous "
        f"{100 * np.mean(prev):.1f} %; P10-P90 covers {sum(cover)} of {len(cover)}"
    )


if __name__ == "__main__":
    main()
