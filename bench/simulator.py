"""Benchmark the event-driven simulator against a token-by-token reference stepper.

1. Replays a synthetic trace (default 500 steps × 8,192 samples, built with
   core.workload.synthetic) under the synchronous policy; prints simulated
   requests per second of wall time.
2. Replays a slice of the same trace (default 2 steps) with a naive stepper written
   here: it advances every replica one iteration at a time and gives every running
   request its next token in a Python loop — the obviously-correct reference for the
   engine's semantics (FIFO admission under the running-sequence, KV and
   prefill-token limits, prefill iterations first, LIFO recompute preemption). Prints
   the speed ratio and the largest relative difference in rollout and step time.

Targets: whole trace < 60 s, >= 50x faster than the stepper, results within 0.1%.

    .venv/bin/python bench/simulator.py [--steps 500] [--groups 1024] [--slice 2]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import deque

import numpy as np

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, simulate
from core.simulator.policies.base import Env, group_replicas, rollout_batch
from core.simulator.predictor import roofline_coefficients
from core.simulator.requests import step_request_arrays
from core.workload.synthetic import packed_length_rows


def synthetic_workload(steps: int, groups: int, n: int, seed: int = 0) -> list[StepWorkload]:
    out = []
    for rows in packed_length_rows(steps, groups, n, seed=seed):
        sizes = np.full(len(rows), n)
        prompt = np.array([r["input"] for r in rows], np.int64)
        resp = np.array([r["output"] for r in rows], np.int64).ravel()
        out.append(
            StepWorkload(rows[0]["step"], np.repeat(np.arange(len(rows)), sizes), np.repeat(prompt, sizes), resp)
        )
    return out


def stepper_replica(prefill, context, left, coeffs, max_running, kv_cap, max_prefill) -> float:
    """Finish time of the last request on one replica, one iteration at a time."""
    c = coeffs
    prefill, context, left = list(prefill), list(context), list(left)
    waiting = deque(range(len(prefill)))
    running: list[int] = []  # admission order
    kv = {}  # tokens in KV per running request during its next decode iteration
    gen = {}  # tokens generated in the current admission
    t = 0.0
    last = 0.0
    while waiting or running:
        # a prefill iteration when the queue head can be admitted
        batch = []
        if waiting and len(running) < max_running:
            kv_free = kv_cap - sum(kv[r] for r in running)
            sp = need = 0
            for r in list(waiting)[: max_running - len(running)]:
                p, k = prefill[r], context[r] + 1
                if batch and (sp + p > max_prefill or need + k > kv_free):
                    break
                if not batch and k > kv_free and running:
                    break
                batch.append(r)
                sp += p
                need += k
        if batch:
            sp = sum(prefill[r] for r in batch)
            sp2 = sum(prefill[r] ** 2 for r in batch)
            t += c.prefill_a + c.prefill_b * sp + c.prefill_c * sp2
            for r in batch:
                waiting.popleft()
                if left[r] == 1:
                    last = t
                    continue
                running.append(r)
                kv[r] = context[r] + 1
                gen[r] = 1
            continue
        if not running:
            break
        total_kv = sum(kv[r] for r in running)
        if total_kv > kv_cap and len(running) > 1:
            r = running.pop()  # recompute-preempt the newest
            context[r] += gen[r]
            prefill[r] = context[r]
            left[r] -= gen[r]
            waiting.appendleft(r)
            continue
        t += c.decode_a + c.decode_b * total_kv + c.decode_c * len(running)
        still = []
        for r in running:  # one token each
            gen[r] += 1
            kv[r] += 1
            if gen[r] == left[r]:
                last = t
            else:
                still.append(r)
        running = still
    return last


def stepper_rollout(env: Env, w: StepWorkload) -> float:
    arr = step_request_arrays(w)
    replica = group_replicas(env, w)[w.group]
    worst = 0.0
    for j in range(env.cluster.rollout_replicas):
        idx = np.flatnonzero(replica == j)
        if idx.size == 0:
            continue
        worst = max(
            worst,
            stepper_replica(
                arr["prefill"][idx],
                arr["context"][idx],
                np.maximum(arr["decode"][idx], 1),
                env.coefficients,
                env.limits.max_running_seqs,
                env.kv_capacity,
                env.limits.max_prefill_tokens,
            ),
        )
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--groups", type=int, default=1024)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--slice", type=int, default=2)
    args = ap.parse_args()

    cluster = ClusterConfig(n_gpus=64, rollout_replicas=16, rollout_tp=4, train_dp=64, train_tp=1)
    model = MODEL_PRESETS["Qwen2.5-7B"]
    limits = EngineLimits(max_running_seqs=256)
    policy = Policy("sync")

    t0 = time.perf_counter()
    workload = synthetic_workload(args.steps, args.groups, args.n)
    t_gen = time.perf_counter() - t0
    n_req = sum(w.n_samples for w in workload)
    t0 = time.perf_counter()
    result = simulate(workload, cluster, model, limits, policy)
    t_sim = time.perf_counter() - t0
    print(f"trace: {args.steps} steps x {args.groups * args.n} samples = {n_req:,} requests (built in {t_gen:.1f} s)")
    print(
        f"simulate (sync): {t_sim:.2f} s wall, {n_req / t_sim:,.0f} simulated requests/s, "
        f"makespan {result.makespan / 3600:.2f} h simulated"
    )

    # the same rollouts, event-driven vs token by token (best of 3 for the short one)
    part = workload[: args.slice]
    env = Env(cluster, model, limits, policy, roofline_coefficients(cluster, model), limits.kv_capacity(cluster, model))
    gc.collect()
    t_fast = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fast = [rollout_batch(env, w).duration for w in part]
        t_fast = min(t_fast, time.perf_counter() - t0)
    t0 = time.perf_counter()
    ref = [stepper_rollout(env, w) for w in part]
    t_ref = time.perf_counter() - t0
    d_roll = max(abs(f - r) / r for f, r in zip(fast, ref))
    # step time = rollout + the other stages (identical in both)
    other = [s.end - s.start - s.stages["rollout"] for s in result.steps[: len(part)]]
    d_step = max(abs((f + o) - (r + o)) / (r + o) for f, r, o in zip(fast, ref, other))
    print(
        f"slice of {len(part)} steps: event-driven rollouts {t_fast:.3f} s, token-by-token stepper {t_ref:.2f} s, "
        f"speed ratio {t_ref / t_fast:.0f}x"
    )
    print(f"largest relative difference: rollout time {d_roll:.2e}, step time {d_step:.2e}")


if __name__ == "__main__":
    main()
