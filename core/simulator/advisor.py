"""Configuration advisor: sweep layouts, policies and their parameters on one GPU
budget, rank them by predicted step time (with intervals), say which wins on which steps
and why.

Swept (`default_grid`): rollout TP (powers of two whose GPUs hold the weights), the
rollout share of the budget for disaggregated policies (1/4, 1/2, 3/4; colocated ones
use the whole cluster for both), policy (every registered kind) with every combination
of its parameters' sweep values (`param_sweep`: each parameter's default and the values
its declaration lists in `grid`, combinations that replay another kind left out), DP
balancing (none, kk; the streaming policies with none only) and engine concurrency (the
calibrated or configured limit, and 256 running sequences with the KV cache from memory).
Layouts that cannot hold the model (`core.simulator.feasibility`: training state
sharded over the training GPUs, a replica's weights and a minimal KV cache) are left out.
The grid stays bounded: at most `MAX_PARAM_COMBOS` parameter combinations per policy (a
declaration with more is an error), so at most 3 TPs x 3 shares x 8 x 2 x 2 per policy.

Engine coefficients: calibrated ones (per replica, at the calibrated TP) are carried
to another TP by the roofline's ratio of the two TPs, field by field; without a
calibration, the roofline's. Intervals, with the calibrated noise
(`core.simulator.uncertainty`): where the step is a batch rollout on the step's critical
path (colocated batch-rollout policies; disaggregated steps whose rollout is longer than
training), the Monte-Carlo runs of that batch rollout shifted onto the step time; every
other configuration is replayed itself `policy_runs` times with its requests perturbed
(`core.simulator.replay_mc`). Without a noise model there is no interval: P10 and P90
are None (never a zero-width interval).

Identical configurations collapse into one row (`collapse`): two swept settings that
resolve to the same effective configuration the replay runs (layout, policy with its
resolved parameters, balancing, engine limits; e.g. "running seqs as calibrated" without
a calibration is the default limit of 256) are replayed once, under one label that names
the settings it stands for (`stands_for`). After the replay, configurations that differ
only in their engine limits yet replay to the very same step times and intervals (no
limit was reached: the engines ran the same concurrency) collapse too
(`merge_unbound`, `limits_never_bound`).

Who wins where: per step, the winner and the runner-up with their step times; a margin
that shows as 0.0% is a tie, and a win whose interval overlaps the runner-up's is within
the uncertainty (`verdict`: "faster", "tie", "within uncertainty").

Why: every configuration's gain over the reference — the best `sync` configuration (the
slowest one without sync in the grid) — is split by cause with `explain` (GPU-seconds per
idle cause, overhead and work), and the cause that moves the most is named.

Work is split by rollout layout into parts (`plan`), each replayed on its own
(`run_part`: within one, every policy and balancing mode reuses the same batch rollouts,
`simulate(..., rollout_cache=...)`), then ranked together (`finish`); `advise` runs the
parts on local processes, a worker fleet as a Celery group (workers/runners/advice.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from core.forking import forked_pool
from core.simulator.calibration import Calibration, partial_steps
from core.simulator.config import GPU_PRESETS, ClusterConfig, EngineLimits, GpuSpec, ModelConfig, Policy
from core.simulator.explain import digest, explain_digests
from core.simulator.feasibility import layout_shortfall
from core.simulator.policies import POLICIES, PolicySpec
from core.simulator.policies.base import Env
from core.simulator.predictor import COEFFICIENT_FIELDS, EngineCoefficients, roofline_coefficients
from core.simulator.replay_mc import DEFAULT_RUNS, monte_carlo_replay
from core.simulator.result import SimResult, StepResult
from core.simulator.simulate import simulate
from core.simulator.uncertainty import NoiseModel, monte_carlo, request_latencies
from core.simulator.workload import StepWorkload

ROLLOUT_SHARES = (0.25, 0.5, 0.75)
MAX_PARAM_COMBOS = 8
# a margin below this shows as "0.0%": the two are tied, not one faster
TIE_MARGIN = 0.0005


def param_sweep(spec: PolicySpec) -> list[dict]:
    """The parameter combinations the advisor tries for a policy: the product of each
    swept parameter's default and declared `grid` values (the defaults first), minus
    those making the policy replay another kind; [{}] without swept parameters."""
    names, values = [], []
    for info in spec.param_infos:
        if info.grid:
            names.append(info.name)
            values.append(list(dict.fromkeys((info.default, *info.grid))))
    combos = [dict(zip(names, vals, strict=True)) for vals in itertools.product(*values)]
    if len(combos) > MAX_PARAM_COMBOS:
        raise ValueError(f"policy {spec.kind}: {len(combos)} swept parameter combinations, at most {MAX_PARAM_COMBOS}")
    return [c for i, c in enumerate(combos) if i == 0 or spec.equivalent_to(spec.resolve(c)) is None]


def policy_label(kind: str, params: dict) -> str:
    """`partial(over_provision=1.5)`: a policy with the swept parameters it runs with."""
    if not params:
        return kind
    shown = ", ".join(f"{k}={_value(v)}" for k, v in params.items())
    return f"{kind}({shown})"


def _value(v: object) -> str:
    if isinstance(v, bool) or v is None:
        return "null" if v is None else str(v).lower()
    return f"{v:g}" if isinstance(v, float) else str(v)


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
    """Configurations: {label, policy, params (the swept ones), balancing,
    rollout_replicas, rollout_tp, train_dp, max_running_seqs (None: the calibrated /
    configured limits)}."""
    gpu = GPU_PRESETS[gpu] if isinstance(gpu, str) else gpu
    lim = limits or EngineLimits()
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
            layout = ClusterConfig(gpu=gpu, n_gpus=n_gpus, rollout_replicas=replicas, rollout_tp=tp, train_dp=train)
            if layout_shortfall(layout, model, lim) is not None:
                continue
            modes = itertools.product(param_sweep(spec), balancing if spec.batch_rollouts else ("none",), concurrency)
            for params, bal, conc in modes:
                grid.append(
                    {
                        "policy": kind,
                        "params": params,
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
        f"{policy_label(c['policy'], c.get('params') or {})} | rollout {c['rollout_replicas']}xTP{c['rollout_tp']} | train DP{c['train_dp']} "
        f"| {c['balancing']} balancing | {conc}"
    )


def effective_limits(c: dict, limits: EngineLimits) -> EngineLimits:
    """The engine limits a configuration replays with: `limits` (calibrated or
    configured) unless it sets its own running-sequence limit."""
    n = c.get("max_running_seqs")
    return limits if n is None else EngineLimits(max_running_seqs=n)


def _setting(c: dict) -> tuple:
    """Policy with its resolved parameters, balancing and layout: a configuration but for
    its engine limits."""
    resolved = repr(POLICIES[c["policy"]].resolve(c.get("params")))
    return (c["policy"], resolved, c["balancing"], (c["rollout_replicas"], c["rollout_tp"], c["train_dp"]))


def identity(c: dict, limits: EngineLimits) -> tuple:
    """What the replay of `c` runs: layout, policy with its resolved parameters,
    balancing and effective engine limits (equal identities replay identically)."""
    return (*_setting(c), effective_limits(c, limits))


def collapse(grid: list[dict], limits: EngineLimits) -> list[dict]:
    """One configuration per identity (the first swept), labelled with the settings it
    also stands for; `stands_for` lists every swept label it represents."""
    kept: dict[tuple, dict] = {}
    for c in grid:
        key = identity(c, limits)
        if key in kept:
            kept[key]["stands_for"].append(c.get("label") or label(c))
        else:
            kept[key] = {**c, "stands_for": [c.get("label") or label(c)]}
    out = list(kept.values())
    for c in out:
        if len(c["stands_for"]) > 1:
            c["label"] = _merged_label(c["stands_for"])
    return out


def merge_unbound(results: list[dict]) -> list[dict]:
    """Replayed configurations that differ only in their engine limits and replay to the
    same step times and intervals, step by step: no limit bound, so the engines ran the
    same concurrency; one row (the first) stands for them all."""
    kept: dict[tuple, dict] = {}
    for r in results:
        key = (*_setting(r), r.get("unused_gpus"), tuple(tuple(sorted(s.items())) for s in r["steps"]))
        if key in kept:
            kept[key]["stands_for"] += r["stands_for"]
            kept[key]["limits_never_bound"] = True
        else:
            kept[key] = r
    out = list(kept.values())
    for r in out:
        if r.get("limits_never_bound"):
            r["label"] = _merged_label(r["stands_for"], "no engine limit reached")
    return out


def _merged_label(labels: list[str], why: str = "") -> str:
    """`a | b | c (same as: c')`: the first label and, per other, the parts that differ."""
    first = labels[0].split(" | ")
    diffs = []
    for other in labels[1:]:
        parts = [p for i, p in enumerate(other.split(" | ")) if i >= len(first) or p != first[i]]
        diffs.append(" | ".join(parts) or other)
    return f"{labels[0]} (same as: {'; '.join(diffs)}{': ' + why if why else ''})"


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


# --------------------------------------------------------------------------- one part


def run_part(state: dict, part: tuple) -> list[dict]:
    """Every configuration of one rollout layout (replicas, TP, concurrency): a part of
    `plan`, replayed with the sweep's `state`; its rows in the order `finish` ranks."""
    (replicas, tp, conc), configs = part
    steps: list[StepWorkload] = state["steps"]
    model: ModelConfig = state["model"]
    base: ClusterConfig = state["cluster"]
    limits = effective_limits({"max_running_seqs": conc}, state["limits"])
    probe = dataclasses.replace(base, rollout_replicas=replicas, rollout_tp=tp)
    coeffs = transfer_coefficients(state["coefficients"], state["cal_cluster"], probe, model)
    batch_mc = _batch_monte_carlo(state, probe, limits, coeffs)
    cache: dict = {}
    out = []
    for c in configs:
        cluster = dataclasses.replace(probe, train_dp=c["train_dp"])
        spec = POLICIES[c["policy"]]
        policy = Policy(kind=c["policy"], balancing=c["balancing"], params=dict(c.get("params") or {}))
        r = simulate(
            steps,
            cluster,
            model,
            limits,
            policy,
            coefficients=coeffs,
            rollout_cache=cache if spec.batch_rollouts else None,
        )
        replayed = None
        if state["noise"] is not None and not _shifted_everywhere(spec, r, batch_mc):
            replayed = monte_carlo_replay(
                steps,
                cluster,
                model,
                limits,
                policy,
                state["noise"],
                coefficients=coeffs,
                n_runs=state["policy_runs"],
                seed=state["seed"],
            )["steps"]
        rows = [_step_row(spec, s, batch_mc, replayed) for s in r.steps]
        out.append({**c, "steps": rows, "unused_gpus": r.unused_gpus, "digest": digest(r)})
    return out


def _batch_monte_carlo(state: dict, probe: ClusterConfig, limits: EngineLimits, coeffs: EngineCoefficients) -> dict:
    """{step: (deterministic batch rollout seconds, its Monte-Carlo runs)} on this layout
    ({} without a noise model)."""
    noise: NoiseModel | None = state["noise"]
    if noise is None:
        return {}
    env = Env(probe, state["model"], limits, Policy(), coeffs, limits.kv_capacity(probe, state["model"]))
    out = {}
    for w in state["steps"]:
        lat, gap, owner, duration = request_latencies(env, w)
        runs = monte_carlo(lat, gap, owner, w.n_samples, noise, n_runs=state["n_runs"], seed=state["seed"])["runs"]
        out[w.step] = (duration, runs)
    return out


def _on_critical_path(spec: PolicySpec, s: StepResult) -> bool:
    """The step's batch rollout decides its time: colocated, or longer than training."""
    roll = s.stages.get("rollout", 0.0)
    train = sum(v for k, v in s.stages.items() if k != "rollout")
    return spec.batch_rollouts and (not spec.disaggregated or roll >= train)


def _shifted_everywhere(spec: PolicySpec, r: SimResult, batch_mc: dict) -> bool:
    return all(s.step in batch_mc and _on_critical_path(spec, s) for s in r.steps)


def _step_row(spec: PolicySpec, s: StepResult, batch_mc: dict, replayed: dict | None) -> dict:
    """One step's mean / P10 / P90: the policy's own Monte-Carlo replay, else the batch
    rollout's runs shifted onto the step time, else the deterministic time with no
    interval (P10 and P90 None: without a noise model nothing bounds it)."""
    if replayed is not None and s.step in replayed:
        q = replayed[s.step]
        mean, p10, p90 = q["mean"], q["p10"], q["p90"]
    elif s.step in batch_mc and _on_critical_path(spec, s):
        duration, runs = batch_mc[s.step]
        shifted = s.step_time + (runs - duration)
        mean, p10, p90 = float(shifted.mean()), float(np.percentile(shifted, 10)), float(np.percentile(shifted, 90))
    else:
        mean, p10, p90 = s.step_time, None, None
    return {"step": s.step, "mean": mean, "p10": p10, "p90": p90, "deterministic": s.step_time}


# --------------------------------------------------------------------------- the sweep


def plan(
    steps: list[StepWorkload],
    gpu: GpuSpec | str,
    n_gpus: int,
    model: ModelConfig,
    *,
    calibration: Calibration | None = None,
    noise: NoiseModel | None = None,
    limits: EngineLimits | None = None,
    grid: list[dict] | None = None,
    n_runs: int = 200,
    policy_runs: int = DEFAULT_RUNS,
    seed: int = 0,
) -> tuple[dict, list[tuple]]:
    """The sweep split into parts: (the state every part replays with, the parts), one
    part per rollout layout `((replicas, tp, concurrency), configurations)`, the largest
    first. Deterministic: the same arguments give the same parts in the same order, so
    a part run elsewhere (a worker of the fleet) can plan again and take its own."""
    gpu_spec = GPU_PRESETS[gpu] if isinstance(gpu, str) else gpu
    base = ClusterConfig(gpu=gpu_spec, n_gpus=n_gpus)
    if calibration is not None and calibration.cluster.train_mfu:
        base = dataclasses.replace(base, train_mfu=calibration.cluster.train_mfu)
    lim = calibration.limits if calibration is not None else (limits or EngineLimits())
    configs = collapse(grid if grid is not None else default_grid(n_gpus, model, gpu_spec), lim)
    by_layout: dict[tuple, list[dict]] = {}
    for c in configs:
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
        "policy_runs": policy_runs,
        "seed": seed,
    }
    return state, sorted(by_layout.items(), key=lambda kv: -len(kv[1]))


def finish(results: list[dict], steps: list[StepWorkload]) -> dict:
    """The ranking (`rank`) of every part's rows, concatenated in the parts' order."""
    return rank(merge_unbound(results), partial_steps(steps))


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
    policy_runs: int = DEFAULT_RUNS,
    seed: int = 0,
    progress: Callable[[float, str], None] | None = None,
) -> dict:
    """Rank the `grid` (default `default_grid`) by mean predicted step time over the
    steps (`rank`); per-step winners grouped into step ranges; each configuration's
    gain over the reference explained by cause. `n_runs`: Monte-Carlo runs of a batch
    rollout; `policy_runs`: replays of a configuration that is not one batch rollout.
    `plan`, every part on `workers` local processes (`run_parts`), `finish`."""
    state, parts = plan(
        steps,
        gpu,
        n_gpus,
        model,
        calibration=calibration,
        noise=noise,
        limits=limits,
        grid=grid,
        n_runs=n_runs,
        policy_runs=policy_runs,
        seed=seed,
    )
    return finish(run_parts(state, parts, workers, progress), steps)


_STATE: dict = {}  # a forked pool worker's copy of the sweep's state


def _init(state: dict) -> None:
    _STATE.clear()
    _STATE.update(state)


def _run_in_pool(part: tuple) -> list[dict]:
    return run_part(_STATE, part)


def run_parts(
    state: dict, parts: list[tuple], workers: int = 1, progress: Callable[[float, str], None] | None = None
) -> list[dict]:
    """Every part's rows in the parts' order, on `workers` processes forked here (where
    no fleet shares the work: the CLI, tests)."""
    report = progress or (lambda f, m: None)
    total = sum(len(configs) for _, configs in parts)
    results: list[dict] = []
    import multiprocessing as mp

    # a daemonic process (e.g. a Celery prefork child) cannot have children: run here
    if workers > 1 and len(parts) > 1 and not mp.current_process().daemon:
        with forked_pool(workers, _init, (state,)) as ex:  # they stop when this process dies
            for i, rows in enumerate(ex.map(_run_in_pool, parts)):
                results += rows
                report((i + 1) / len(parts), f"{len(results)} of {total} configurations")
    else:
        for i, part in enumerate(parts):
            results += run_part(state, part)
            report((i + 1) / len(parts), f"{len(results)} of {total} configurations")
    return results


def rank(results: list[dict], partial: set[int]) -> dict:
    """The ranking with intervals, who wins where, and why (each configuration's gain
    over the reference by cause).

    Ranked by the mean step time over every step (the makespan over the step count),
    partial steps included: a policy that carries samples over (partial, tail_batching,
    async) moves work into later steps, so a mean over some steps only would favour it
    for work it has only postponed. `partial` steps are flagged in the per-step winners."""
    for r in results:
        r["step_s"] = {k: _mean_of(r["steps"], k) for k in ("mean", "p10", "p90", "deterministic")}
    ranking = sorted(results, key=lambda r: r["step_s"]["mean"])
    best = ranking[0]
    ref = _reference(ranking)
    for r in ranking:
        r["vs_best"] = r["step_s"]["mean"] / best["step_s"]["mean"] if best["step_s"]["mean"] > 0 else math.nan
        # intervals overlap: within the noise of the best, not reliably slower (None: no intervals)
        r["within_noise_of_best"] = _overlap(best["step_s"], r["step_s"])
        r["gain"] = None if r is ref else _gain(ref, r)
    winners = _per_step_winners(results, partial, [s["step"] for s in best["steps"]])
    ranges = _ranges(winners, {r["label"]: r["gain"] for r in ranking})
    why = None if best is ref else explain_digests(ref["digest"], best["digest"], (ref["label"], best["label"]))
    for r in ranking:
        r.pop("digest", None)
    runner_up = ranking[1] if len(ranking) > 1 else None
    clear = _overlap(best["step_s"], runner_up["step_s"]) if runner_up is not None else False
    return {
        "n_configurations": len(results),
        "n_swept_settings": sum(len(r.get("stands_for") or [r["label"]]) for r in results),
        "partial_steps": sorted(partial),
        "ranking": ranking,
        "per_step": winners,
        "ranges": ranges,
        "best": best["label"],
        # the runner-up's interval starts above the best's: the win is not noise (None: no intervals)
        "best_is_clear": None if clear is None else not clear,
        "reference": ref["label"],
        "why_best": why,
    }


def _mean_of(steps: list[dict], key: str) -> float | None:
    """The mean of one field over the steps; None when a step has none (no interval)."""
    values = [s[key] for s in steps]
    return None if any(v is None for v in values) else float(np.mean(values))


def _overlap(faster: Mapping[str, Any], slower: Mapping[str, Any]) -> bool | None:
    """Whether the slower one's interval starts at or below the faster one's end (the
    difference is within the uncertainty); None when either has no interval."""
    if faster.get("p90") is None or slower.get("p10") is None:
        return None
    return bool(slower["p10"] <= faster["p90"])


def _reference(ranking: list[dict]) -> dict:
    """What gains are measured against: the best sync configuration, else the slowest."""
    return next((r for r in ranking if r["policy"] == "sync"), ranking[-1])


def _gain(ref: dict, r: dict) -> dict:
    """`r` against the reference: speedup of its replay, and the cause that moves its
    makespan the most in the direction of the difference (`explain`)."""
    e = explain_digests(ref["digest"], r["digest"], (ref["label"], r["label"]))
    sign = -1.0 if e["verdict"] == "faster" else 1.0
    moves = [c for c in e["components"] if c["delta_s"] * sign > 0] if e["verdict"] != "same" else []
    top = moves[0] if moves else None
    return {
        "vs": ref["label"],
        "speedup": e["speedup"],
        "saved_s": -e["delta_s"],
        "verdict": e["verdict"],
        "cause": top["cause"] if top else None,
        "phrase": top["phrase"] if top else None,
        "cause_s": top["delta_s"] if top else 0.0,
    }


def _per_step_winners(results: list[dict], partial: set[int], step_ids: list[int]) -> list[dict]:
    """Per step: the winner and the runner-up (among the configurations that report the
    step) with their step times, the margin and the `verdict` it supports."""
    by_step = [{s["step"]: s for s in r["steps"]} for r in results]
    winners = []
    for step in step_ids:
        order = sorted((t[step]["mean"], i) for i, t in enumerate(by_step) if step in t)
        (t1, i1), (t2, i2) = order[0], order[1] if len(order) > 1 else order[0]
        margin = (t2 - t1) / t2 if t2 > 0 else 0.0
        winners.append(
            {
                "step": step,
                "partial": step in partial,
                "winner": results[i1]["label"],
                "step_s": t1,
                "runner_up": results[i2]["label"],
                "runner_up_s": t2,
                "margin": margin,
                "verdict": _verdict(margin, _overlap(by_step[i1][step], by_step[i2][step])),
            }
        )
    return winners


def _verdict(margin: float, overlap: bool | None) -> str:
    """ "tie" when the margin shows as 0.0%, "within uncertainty" when the intervals
    overlap, else "faster"."""
    if margin < TIE_MARGIN:
        return "tie"
    return "within uncertainty" if overlap else "faster"


def _ranges(winners: list[dict], gains: dict[str, dict | None]) -> list[dict]:
    """Consecutive steps with the same winner and verdict: its margins, the mean step
    times of the winner and of the runner-ups, the cause of its gain and the range in
    words (`said`, so every client says it the same way)."""
    ranges: list[dict] = []
    for w in winners:
        last = ranges[-1] if ranges else None
        if last is not None and (last["winner"], last["verdict"]) == (w["winner"], w["verdict"]):
            last["steps"][1] = w["step"]
            last["of"].append(w)
        else:
            ranges.append({"winner": w["winner"], "verdict": w["verdict"], "steps": [w["step"], w["step"]], "of": [w]})
    for r in ranges:
        of = r.pop("of")
        r["margin_min"], r["margin_max"] = float(min(w["margin"] for w in of)), float(max(w["margin"] for w in of))
        r["winner_s"] = float(np.mean([w["step_s"] for w in of]))
        r["runner_up_s"] = float(np.mean([w["runner_up_s"] for w in of]))
        r["runner_ups"] = list(dict.fromkeys(w["runner_up"] for w in of))
        gain = gains.get(r["winner"])
        r["cause"] = gain["phrase"] if gain else None
        r["said"] = range_sentence(r)
    return ranges


def range_sentence(rg: dict) -> str:
    """A range of `rank`'s `ranges` in words: "faster than the runner-up" only when it is
    (a tie and a win within the uncertainty are said as such, with the step times)."""
    a, b = rg["steps"]
    where = f"step {a}" if a == b else f"steps {a}-{b}"
    lo, hi = 100 * rg["margin_min"], 100 * rg["margin_max"]
    margin = f"{lo:.1f}%" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}%"
    figures = f"{rg['winner_s']:.1f} s vs {rg['runner_up_s']:.1f} s"
    if rg["verdict"] == "tie":
        said = f"tied with the runner-up ({figures})"
    elif rg["verdict"] == "within uncertainty":
        said = f"{margin} ahead of the runner-up, within the uncertainty ({figures}; intervals overlap)"
    else:
        said = f"{margin} faster than the runner-up ({figures})"
    return f"{where}: {rg['winner']}, {said}"
