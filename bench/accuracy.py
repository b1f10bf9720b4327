"""Rolling-origin accuracy of the default replay on the real multi-turn fixtures.

Every multi-turn PolyTrace run in ../shared/fixtures/polytrace (folders holding
`multiturn_workload_step_*.jsonl`): calibrate on the measured, non-partial steps before
each step, predict it (Monte-Carlo mean and P10-P90), and print per step and the mean
over all eligible steps: accuracy of the rollout time, the naive predictors', and how
often the 80 % interval covers the measured value. The cluster is the CLI's default
(8 H100, sync on 8 replicas TP1, training DP8, Qwen2.5-7B).

    .venv/bin/python -m bench.accuracy [--window 4]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import orjson

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, workload_from_columns
from core.simulator.evaluation import DEFAULT_WINDOW, rolling_origin

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    args = ap.parse_args()
    if not FIXTURES.is_dir():
        print(f"no fixtures at {FIXTURES}: nothing to measure")
        return
    model = MODEL_PRESETS["Qwen2.5-7B"]
    cluster = ClusterConfig(n_gpus=8, rollout_replicas=8, rollout_tp=1, train_dp=8)
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
