"""Batch rollouts computed ahead in forked processes give the replay it gives in order."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, parallel_rollouts, simulate
from core.simulator import forked as forked_module
from core.simulator.policies import base as policy_base
from core.workload.synthetic import packed_length_rows

# the module (the package's `simulate` is the function)
simulate_module = importlib.import_module("core.simulator.simulate")
MODEL = MODEL_PRESETS["Qwen2.5-7B"]
CLUSTER = ClusterConfig(n_gpus=16, rollout_replicas=4, rollout_tp=2, train_dp=8)


def workload(steps=6, groups=48, n=8):
    return [
        StepWorkload.from_groups(rows[0]["step"], [r["input"] for r in rows], [r["output"] for r in rows])
        for rows in packed_length_rows(steps, groups, n, seed=11, max_response_len=8192)
    ]


def replay(kind: str, workers: int, seen: list | None = None):
    return simulate(
        workload(),
        CLUSTER,
        MODEL,
        EngineLimits(),
        Policy(kind=kind),
        progress=seen.append if seen is not None else None,
        workers=workers,
    )


@pytest.mark.parametrize("kind", ["sync", "one_step_off"])
def test_forked_rollouts_give_the_same_replay(monkeypatch, kind):
    monkeypatch.setattr(forked_module, "MIN_SAMPLES", 0)
    forked_ahead = []
    real = simulate_module.prefill_rollouts
    monkeypatch.setattr(
        simulate_module, "prefill_rollouts", lambda *a: forked_ahead.append(real(*a)) or forked_ahead[-1]
    )
    # rollouts computed in this process (the forked children's calls are not counted)
    in_process: list[int] = []
    compute = policy_base.uncached_rollout_batch
    monkeypatch.setattr(policy_base, "uncached_rollout_batch", lambda *a: in_process.append(1) or compute(*a))
    serial = replay(kind, workers=1)
    assert len(in_process) == len(serial.steps)
    seen: list[float] = []
    forked = replay(kind, workers=2, seen=seen)
    assert forked_ahead == [False, True]
    assert len(in_process) == len(serial.steps)  # the policy's loop found every rollout computed ahead
    assert forked.makespan == serial.makespan
    assert [s.step_time for s in forked.steps] == [s.step_time for s in serial.steps]
    for a, b in zip(forked.steps, serial.steps):
        assert np.array_equal(a.trajectory_s, b.trajectory_s)
        assert a.rollout == b.rollout
    assert forked.idle_gpu_s == serial.idle_gpu_s
    assert seen == sorted(seen) and seen[-1] == 1.0


def test_small_workloads_and_threaded_processes_stay_in_one_process():
    small = workload(steps=2, groups=4)
    assert not parallel_rollouts.prefill_rollouts(None, small, lambda f: None, workers=2)  # type: ignore[arg-type]
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert parallel_rollouts.rollout_workers() == 1  # forking beside a thread can deadlock the child
    finally:
        stop.set()
        t.join()
