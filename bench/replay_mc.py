"""Monte-Carlo replay of every registered policy on the Search-R1 fixture
(../shared/fixtures), calibrated on step 0 (coefficients and noise): per policy the
deterministic makespan, the Monte-Carlo mean and P10-P90 of the makespan over
`--runs` seeded runs, and the time the Monte-Carlo took as a ratio to the deterministic
replay timed in the same run (the machine is shared: ratios, not absolute times).

    .venv/bin/python -m bench.replay_mc [--runs 16] [--policy KIND]...
"""

from __future__ import annotations

import argparse
import time

from bench.replay import FIXTURE, search_r1_steps
from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, calibrate, simulate
from core.simulator.evaluation import noise_for
from core.simulator.policies import POLICIES
from core.simulator.replay_mc import DEFAULT_RUNS, monte_carlo_replay


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    ap.add_argument("--policy", action="append", choices=list(POLICIES), help="only these (default: every one)")
    args = ap.parse_args()
    if not FIXTURE.is_dir():
        print(f"no fixture at {FIXTURE}: nothing to measure")
        return
    steps = search_r1_steps()
    model = MODEL_PRESETS["Qwen2.5-7B"]
    cal = calibrate(steps, ClusterConfig(n_gpus=8), model, EngineLimits(), fit_steps=[0])
    noise = noise_for(steps, cal, model)
    assert noise is not None, "the fixture records per-request engine latencies"
    print(f"Search-R1, {len(steps)} steps, 8 H100, calibrated on step 0; {args.runs} runs per policy")
    for kind in args.policy or list(POLICIES):
        spec = POLICIES[kind]
        split = spec.disaggregated
        cluster = ClusterConfig(n_gpus=8, rollout_replicas=4 if split else 8, rollout_tp=1, train_dp=4 if split else 8)
        kw = {"coefficients": cal.coefficients}
        t = time.perf_counter()
        det = simulate(steps, cluster, model, cal.limits, Policy(kind=kind), workers=1, **kw)
        t_det = time.perf_counter() - t
        t = time.perf_counter()
        mc = monte_carlo_replay(steps, cluster, model, cal.limits, Policy(kind=kind), noise, n_runs=args.runs, **kw)
        t_mc = time.perf_counter() - t
        q = mc["makespan"]
        print(
            f"  {kind:<14} makespan {det.makespan:8.1f} s deterministic, MC {q['mean']:8.1f} s "
            f"[{q['p10']:.1f}-{q['p90']:.1f}]; MC time {t_mc / max(t_det, 1e-9):5.1f}x the deterministic replay"
        )


if __name__ == "__main__":
    main()
