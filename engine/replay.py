"""A trace's workload replayed on real engines under a policy, and the simulator's
prediction of the same workload from an engine profile alone (never from the run it
predicts), side by side.

Figures (both sides defined alike; times from each step's rollout start):
  makespan_s         the steps' rollout windows summed (submit to the last request that
                     step waits for; partial: to its N-th finished group)
  p50/p90_completion_s  per step, the percentile of the completion times of the requests
                     that finished in its window; the mean over steps
  decoded_tokens     tokens the engines decoded (aborted requests' partial responses too)
A multi-turn trajectory completes with its last turn; `cached_prompt_tokens` then says
how many prompt tokens the prefix cache served, measured and as predicted.
`error` is relative, (predicted − measured) / measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from core.simulator import ClusterConfig, EngineLimits, ModelConfig, simulate
from core.simulator.policies import make_policy, policy_spec
from core.simulator.predictor import EngineCoefficients
from core.simulator.workload import StepWorkload
from engine.calibrate import cpu_share
from engine.client import EnginePool
from engine.policies import EngineRun, engine_policy

FIGURES = ("makespan_s", "p50_completion_s", "p90_completion_s", "decoded_tokens")


def _mean_percentiles(per_step: list[np.ndarray]) -> tuple[float, float]:
    rows = [np.percentile(c, [50, 90]) for c in per_step if c.size]
    if not rows:
        return 0.0, 0.0
    m = np.mean(rows, axis=0)
    return float(m[0]), float(m[1])


def measured_figures(pool: EnginePool, run: EngineRun) -> dict:
    done = pool.done
    per_step = [np.array([done[i].t_end - s.start for i in s.finished]) for s in run.steps]
    p50, p90 = _mean_percentiles(per_step)
    return {
        "makespan_s": float(sum(s.end - s.start for s in run.steps)),
        "p50_completion_s": p50,
        "p90_completion_s": p90,
        "decoded_tokens": int(sum(done[i].tokens for i in run.sent if i in done)),
    }


def lengths_check(pool: EnginePool, run: EngineRun) -> dict:
    """Every finished request decoded exactly its target; aborted ones fewer (counted)."""
    finished = aborted = wrong = 0
    for rid, sent in run.sent.items():
        d = pool.done.get(rid)
        if d is None:
            wrong += 1
        elif d.reason == "abort":
            aborted += 1
            wrong += d.tokens >= sent.target
        else:
            finished += 1
            wrong += d.tokens != sent.target
    return {"lengths_exact": wrong == 0, "finished": finished, "aborted": aborted, "wrong": wrong}


def model_config(name: str, shape: dict, params: float) -> ModelConfig:
    """The simulator's model of the engine's model (its KV size and parameters)."""
    heads = int(shape.get("heads") or 1)
    return ModelConfig(
        name=name,
        params=params,
        layers=int(shape["layers"]),
        hidden=int(shape["hidden"]),
        kv_heads=int(shape.get("kv_heads") or heads),
        head_dim=int(shape["hidden"]) // heads,
        dtype_bytes=2,
    )


def predict(
    workload: list[StepWorkload],
    kind: str,
    params: dict,
    coefficients: dict,
    limits: dict,
    engines: int,
    model: ModelConfig,
) -> dict:
    """The simulator's figures for the same workload on `engines` replicas of the
    profiled engine (rollout only: reward and training stages left out of the sums)."""
    spec = policy_spec(kind)
    cluster = ClusterConfig(
        n_gpus=engines + (1 if spec.disaggregated else 0), rollout_replicas=engines, rollout_tp=1, train_dp=1
    )
    lim = EngineLimits(
        max_running_seqs=int(limits["max_num_seqs"]),
        kv_cache_tokens=int(limits["kv_cache_tokens"]),
        max_prefill_tokens=int(limits["max_num_batched_tokens"]),
    )
    policy = make_policy(
        {"kind": kind, "params": params, "use_recorded_reward": False, "old_log_prob_pass": False, "ref_pass": False}
    )
    coeffs = EngineCoefficients.from_dict(coefficients)
    res = simulate(workload, cluster, model, lim, policy, coefficients=coeffs, workers=1)
    # the steps' own percentiles (rollout stats), averaged as the measured side's are
    rows = [(s.rollout["p50_traj_s"], s.rollout["p90_traj_s"]) for s in res.steps if "p50_traj_s" in s.rollout]
    p50, p90 = (float(v) for v in np.mean(rows, axis=0)) if rows else (0.0, 0.0)
    return {
        "makespan_s": float(sum(s.stages["rollout"] for s in res.steps)),
        "p50_completion_s": p50,
        "p90_completion_s": p90,
        "decoded_tokens": int(sum(s.rollout.get("decoded_tokens", 0) for s in res.steps)),
    }


def relative_error(predicted: float, measured: float) -> float | None:
    return (predicted - measured) / measured if measured else None


def engine_replay(
    pool: EnginePool,
    workload: list[StepWorkload],
    kind: str,
    params: dict,
    profile: dict,
    model: ModelConfig,
    vocab: int,
    progress: Callable[[str], None] = lambda m: None,
) -> dict:
    """Replay on `pool`, predict from `profile`, compare."""
    design, prm = engine_policy(kind, params)
    multiturn = any(w.is_multiturn for w in workload)
    progress(
        f"replaying {sum(w.n_samples for w in workload)} recorded samples under {kind} on {len(pool.children)} engine(s)"
    )
    t0 = time.monotonic()
    run = design.run(pool, workload, prm, vocab)
    wall = time.monotonic() - t0
    steps = [[it for it in log if it[0] >= t0] for log in pool.iterations()]
    measured = measured_figures(pool, run)
    progress("predicting the same workload from the profile")
    predicted = predict(workload, kind, params, profile["coefficients"], pool.limits[0], len(pool.children), model)
    return {
        "policy": kind,
        "params": params,
        "engines": len(pool.children),
        "steps": len(workload),
        "requests": len(run.sent),
        **lengths_check(pool, run),
        "measured": measured,
        "predicted": predicted,
        "error": {
            "makespan": relative_error(predicted["makespan_s"], measured["makespan_s"]),
            "p90_completion": relative_error(predicted["p90_completion_s"], measured["p90_completion_s"]),
        },
        "replay_wall_s": wall,
        # per engine, CPU over wall seconds of its steps (the profile's fit has the sweep's)
        "cpu_share": [cpu_share(log) for log in steps],
        "profile_id": profile.get("id"),
        **({"cached_prompt_tokens": cached_tokens(pool, run, workload)} if multiturn else {}),
    }


def cached_tokens(pool: EnginePool, run: EngineRun, workload: list[StepWorkload]) -> dict:
    """Prompt tokens the prefix cache served: as the engines reported, and as the
    predicted workload counts them (engine.workload: whole blocks of the context)."""
    measured = sum(pool.done[i].cached for i in run.sent if i in pool.done)
    predicted = sum(int(w.turn_cached_tokens.sum()) for w in workload if w.turn_cached_tokens is not None)
    return {"measured": int(measured), "predicted": predicted}
