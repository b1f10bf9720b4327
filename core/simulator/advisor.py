"""Configuration advisor: sweep layouts and policies on one GPU budget, rank them by
predicted step time (with intervals), and say which wins on which steps.

Swept (`default_grid`): rollout TP (powers of two whose GPUs hold the weights), the
rollout share of the budget for disaggregated policies (1/4, 1/2, 3/4; colocated ones
use the whole cluster for both), policy (every registered kind), DP balancing (none,
kk; the streaming policies with none only) and engine concurrency (the calibrated or
configured limit, and 256 running sequences with the KV cache from memory).

Engine coefficients: calibrated ones (per replica, at the calibrated TP) are carried
to another TP by the roofline's ratio of the two TPs, field by field; without a
calibration, the roofline's. Intervals: the Monte-Carlo runs of the calibrated noise
(`core.simulator.uncertainty`) on each layout's batch rollout, shifted onto the step
time where the rollout is on the step's critical path (colocated policies; disaggregated
steps whose rollout is longer than training), else the deterministic step time.

Work is split by rollout layout across processes; within one, every policy and
balancing mode reuses the same batch rollouts (`simulate(..., rollout_cache=...)`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from core.simulator.calibration import Calibration, partial_steps
from core.simulator.config import GPU_PRESETS, ClusterConfig, EngineLimits, GpuSpec, ModelConfig, Policy
from core.simulator.policies import POLICIES
from core.simulator.policies.base import Env
from core.simulator.predictor import COEFFICIENT_FIELDS, EngineCoefficients, roofline_coefficients
from core.simulator.simulate import simulate
from core.simulator.uncertainty import NoiseModel, monte_carlo, request_latencies
from core.simulator.workload import StepWorkload

ROLLOUT_SHARES = (0.25, 0.5, 0.75)


def _tps(model: ModelConfig, gpu: GpuSpec, budget: int) -> list[int]:
    out, tp = [], 1
    while tp <= budget:
        if model.weight_bytes <= 0.9 * gpu.memory_bytes * tp:
            out.append(tp)
        tp *= 2
    return out[:3] or [1]


def default_grid(
    n_gpus: int,
    model: ModelConfig,
    gpu: GpuSpec | str = "H100",
    *,
    limits: EngineLimits | None = None,
    balancing: tuple[str, ...] = ("none", "kk"),
    concurrency: tuple[int | None, ...] = (None, 256),
) -> list[dict]:
    """Configurations: {label, policy, balancing, rollout_replicas, rollout_tp, train_dp,
    max_running_seqs (None: the calibrated / configured limits)}."""
    gpu = GPU_PRESETS[gpu] if isinstance(gpu, str) else gpu
    grid = []
    for kind, spec in POLICIES.items():
        if spec.disaggregated and n_gpus < 2:
            continue
        shares = ROLLOUT_SHARES if spec.disaggregated else (1.0,)
        seen = set()
        for share, tp in itertools.product(
            shares, _tps(model, gpu, max(1, n_gpus // (2 if spec.disaggregated else 1)))
        ):
            if spec.disaggregated:
                replicas = max(1, int(n_gpus * share) // tp)
                train = n_gpus - replicas * tp
                if train < 1:
                    continue
            else:
                replicas, train = max(1, n_gpus // tp), n_gpus
            if (replicas, tp, train) in seen:
                continue
            seen.add((replicas, tp, train))
            for bal, conc in itertools.product(balancing if spec.batch_rollouts else ("none",), concurrency):
                grid.append(
                    {
                        "policy": kind,
                        "balancing": bal,
                        "rollout_replicas": replicas,
                        "rollout_tp": tp,
                        "train_dp": train,
                        "max_running_seqs": conc,
                    }
                )
    for c in grid:
        c["label"] = label(c)
    return grid


def label(c: dict) -> str:
    """A configuration in words: policy, rollout replicas x TP, training DP, balancing and
    the engines' concurrency (max running sequences, or the trace's calibrated limit)."""
    n = c.get("max_running_seqs")
    conc = "running seqs as calibrated" if n is None else f"max {n} running seqs"
    return (
        f"{c['policy']} | rollout {c['rollout_replicas']}xTP{c['rollout_tp']} | train DP{c['train_dp']} "
        f"| {c['balancing']} balancing | {conc}"
    )


def transfer_coefficients(
    coeffs: EngineCoefficients | None, from_cluster: ClusterConfig | None, to_cluster: ClusterConfig, model: ModelConfig
) -> EngineCoefficients:
    """Calibrated coefficients carried to another TP by the roofline's ratio."""
    target = roofline_coefficients(to_cluster, model)
    if coeffs is None or from_cluster is None:
        return target
    base = roofline_coefficients(from_cluster, model)
    vals = []
    for f in COEFFICIENT_FIELDS:
        b, t, c = getattr(base, f), getattr(target, f), getattr(coeffs, f)
        vals.append(c * t / b if b > 0 else c)
    return EngineCoefficients(*vals)


# --------------------------------------------------------------------------- worker side

_STATE: dict = {}


def _init(state: dict) -> None:
    _STATE.clear()
    _STATE.update(state)


def _run_layout(task: tuple) -> list[dict]:
    """Every configuration of one rollout layout (replicas, TP, concurrency)."""
    (replicas, tp, conc), configs = task
    st = _STATE
    steps: list[StepWorkload] = st["steps"]
    model: ModelConfig = st["model"]
    base: ClusterConfig = st["cluster"]
    limits: EngineLimits = st["limits"]
    if conc is not None:
        limits = EngineLimits(max_running_seqs=conc)
    noise: NoiseModel | None = st["noise"]
    probe = dataclasses.replace(base, rollout_replicas=replicas, rollout_tp=tp)
    coeffs = transfer_coefficients(st["coefficients"], st["cal_cluster"], probe, model)
    # Monte-Carlo of each step's batch rollout on this layout
    mc: dict[int, np.ndarray] = {}
    det_roll: dict[int, float] = {}
    if noise is not None:
        env = Env(probe, model, limits, Policy(), coeffs, limits.kv_capacity(probe, model))
        for w in steps:
            lat, gap, owner, duration = request_latencies(env, w)
            det_roll[w.step] = duration
            mc[w.step] = monte_carlo(lat, gap, owner, w.n_samples, noise, n_runs=st["n_runs"], seed=st["seed"])["runs"]
    cache: dict = {}
    out = []
    for c in configs:
        cluster = dataclasses.replace(base, rollout_replicas=replicas, rollout_tp=tp, train_dp=c["train_dp"])
        spec = POLICIES[c["policy"]]
        batch = spec.batch_rollouts
        policy = Policy(kind=c["policy"], balancing=c["balancing"])
        r = simulate(
            steps,
            cluster,
            model,
            limits,
            policy,
            coefficients=coeffs,
            rollout_cache=cache if batch else None,
        )
        serial = not spec.disaggregated
        rows = []
        for s in r.steps:
            roll = s.stages.get("rollout", 0.0)
            train = sum(v for k, v in s.stages.items() if k != "rollout")
            runs = mc.get(s.step)
            if runs is not None and batch and (serial or roll >= train):
                shifted = s.step_time + (runs - det_roll[s.step])
                q = (float(shifted.mean()), float(np.percentile(shifted, 10)), float(np.percentile(shifted, 90)))
            else:
                q = (s.step_time, s.step_time, s.step_time)
            rows.append({"step": s.step, "mean": q[0], "p10": q[1], "p90": q[2], "deterministic": s.step_time})
        out.append({**c, "steps": rows, "unused_gpus": r.unused_gpus})
    return out


# --------------------------------------------------------------------------- the sweep


def advise(
    steps: list[StepWorkload],
    gpu: GpuSpec | str,
    n_gpus: int,
    model: ModelConfig,
    *,
    calibration: Calibration | None = None,
    noise: NoiseModel | None = None,
    limits: EngineLimits | None = None,
    grid: list[dict] | None = None,
    workers: int = 2,
    n_runs: int = 200,
    seed: int = 0,
    progress: Callable[[float, str], None] | None = None,
) -> dict:
    """Rank the `grid` (default `default_grid`) by mean predicted step time over the
    non-partial steps; per-step winners grouped into step ranges."""
    report = progress or (lambda f, m: None)
    gpu_spec = GPU_PRESETS[gpu] if isinstance(gpu, str) else gpu
    base = ClusterConfig(gpu=gpu_spec, n_gpus=n_gpus)
    if calibration is not None and calibration.cluster.train_mfu:
        base = dataclasses.replace(base, train_mfu=calibration.cluster.train_mfu)
    lim = calibration.limits if calibration is not None else (limits or EngineLimits())
    grid = grid if grid is not None else default_grid(n_gpus, model, gpu_spec)
    by_layout: dict[tuple, list[dict]] = {}
    for c in grid:
        by_layout.setdefault((c["rollout_replicas"], c["rollout_tp"], c["max_running_seqs"]), []).append(c)
    state = {
        "steps": steps,
        "model": model,
        "cluster": base,
        "limits": lim,
        "noise": noise,
        "coefficients": calibration.coefficients if calibration is not None else None,
        "cal_cluster": calibration.cluster if calibration is not None else None,
        "n_runs": n_runs,
        "seed": seed,
    }
    tasks = sorted(by_layout.items(), key=lambda kv: -len(kv[1]))
    results: list[dict] = []
    import multiprocessing as mp

    # a daemonic process (e.g. a Celery prefork child) cannot have children: run here
    parallel = workers > 1 and len(tasks) > 1 and not mp.current_process().daemon
    if parallel:
        ctx = mp.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init, initargs=(state,)) as ex:
            for i, part in enumerate(ex.map(_run_layout, tasks)):
                results += part
                report((i + 1) / len(tasks), f"{len(results)} of {len(grid)} configurations")
    else:
        _init(state)
        for i, t in enumerate(tasks):
            results += _run_layout(t)
            report((i + 1) / len(tasks), f"{len(results)} of {len(grid)} configurations")
    return rank(results, partial_steps(steps))


def rank(results: list[dict], partial: set[int]) -> dict:
    """The ranking (mean over non-partial steps) and who wins where."""
    for r in results:
        kept = [s for s in r["steps"] if s["step"] not in partial] or r["steps"]
        r["step_s"] = {k: float(np.mean([s[k] for s in kept])) for k in ("mean", "p10", "p90", "deterministic")}
    ranking = sorted(results, key=lambda r: r["step_s"]["mean"])
    best = ranking[0]
    for r in ranking:
        r["vs_best"] = r["step_s"]["mean"] / best["step_s"]["mean"] if best["step_s"]["mean"] > 0 else math.nan
    # per step: the winner and its margin over the runner-up
    step_ids = [s["step"] for s in best["steps"]]
    winners = []
    for i, step in enumerate(step_ids):
        order = sorted(results, key=lambda r: r["steps"][i]["mean"])
        first, second = order[0], order[1] if len(order) > 1 else order[0]
        t1, t2 = first["steps"][i]["mean"], second["steps"][i]["mean"]
        winners.append(
            {
                "step": step,
                "partial": step in partial,
                "winner": first["label"],
                "step_s": t1,
                "runner_up": second["label"],
                "margin": (t2 - t1) / t2 if t2 > 0 else 0.0,
            }
        )
    ranges: list[dict] = []
    for w in winners:
        if ranges and ranges[-1]["winner"] == w["winner"]:
            ranges[-1]["steps"][1] = w["step"]
            ranges[-1]["margins"].append(w["margin"])
        else:
            ranges.append({"winner": w["winner"], "steps": [w["step"], w["step"]], "margins": [w["margin"]]})
    for r in ranges:
        m = r.pop("margins")
        r["margin_min"], r["margin_max"] = float(min(m)), float(max(m))
    return {
        "n_configurations": len(results),
        "partial_steps": sorted(partial),
        "ranking": ranking,
        "per_step": winners,
        "ranges": ranges,
        "best": best["label"],
    }
