"""Compile the replay's event loop ahead of use: numba keeps the machine code beside the
source (`cache=True`), so the image build, CI and each worker's start run this once and
no replay a user asks for pays the compilation (8-15 CPU s).

    python -m core.simulator.warm
"""

from __future__ import annotations

import time

import numpy as np

from core.simulator.config import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy
from core.simulator.dispatch import longest_first
from core.simulator.simulate import simulate
from core.simulator.workload import StepWorkload

# each reaches the loop another way: at a time / groups done, at watched replicas' stops, per finish
_POLICIES = ("partial", "laminar", "tail_batching")


def warm() -> float:
    """Replay a tiny workload through every entry point of the loop; seconds taken."""
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    steps = [
        StepWorkload.from_groups(step, rng.integers(50, 200, 8).tolist(), rng.integers(1, 512, (8, 4)).tolist())
        for step in range(2)
    ]
    cluster = ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=2, train_dp=4)
    for kind in _POLICIES:
        simulate(steps, cluster, MODEL_PRESETS["Qwen2.5-7B"], EngineLimits(), Policy(kind=kind), workers=1)
    longest_first(np.ones(3), 2)  # the compiled LPT dispatch
    return time.perf_counter() - start


if __name__ == "__main__":
    print(f"replay loop compiled and cached in {warm():.1f} s")
