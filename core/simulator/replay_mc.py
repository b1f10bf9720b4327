"""Monte-Carlo replay of any policy: the policy itself replayed `n_runs` times, each run
with every request's length perturbed by the calibrated noise (`request_noise`), and
the P10 / P50 / P90 of each step's time and of the makespan over runs.

This is what gives intervals to policies whose schedule reacts to when requests finish
(streaming, overlapping, carry-over): shifting one deterministic replay by the noise of
its batch rollout (`uncertainty.monte_carlo`) holds only where the step is one batch
rollout followed by fixed stages. A policy with random draws of its own (its spec's
`seed_param`) also draws them anew each run. A run costs one full replay, so the number
of runs is small (`DEFAULT_RUNS`) and seeded: the same seed gives the same intervals.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core.simulator.config import ClusterConfig, EngineLimits, ModelConfig, Policy
from core.simulator.policies import Env, policy_spec
from core.simulator.predictor import EngineCoefficients, roofline_coefficients
from core.simulator.request_noise import request_noise, token_edges
from core.simulator.simulate import simulate
from core.simulator.uncertainty import NoiseModel
from core.simulator.workload import StepWorkload

DEFAULT_RUNS = 16


def _quantiles(x: np.ndarray) -> dict:
    p10, p50, p90 = np.percentile(x, [10, 50, 90])
    return {"mean": float(x.mean()), "p10": float(p10), "p50": float(p50), "p90": float(p90)}


def monte_carlo_replay(
    steps: list[StepWorkload],
    cluster: ClusterConfig,
    model: ModelConfig,
    limits: EngineLimits,
    policy: Policy,
    noise: NoiseModel,
    *,
    coefficients: EngineCoefficients | None = None,
    n_runs: int = DEFAULT_RUNS,
    seed: int = 0,
    workers: int | None = 1,
) -> dict:
    """`n_runs` seeded replays of `policy` under `noise`. Returns {"n_runs", "steps":
    {step: {mean, p10, p50, p90}} of the step time, "makespan": the same, "runs": {step:
    its time in every run}}."""
    coeffs = coefficients or roofline_coefficients(cluster, model)
    probe = Env(cluster, model, limits, Policy(), coeffs, limits.kv_capacity(cluster, model))
    edges = token_edges(noise, probe, sorted(steps, key=lambda w: w.step))
    spec = policy_spec(policy.kind)
    times: dict[int, list[float]] = {}
    spans = []
    for run in range(n_runs):
        p = policy
        if spec.seed_param is not None:
            p = dataclasses.replace(policy, params={**policy.params, spec.seed_param: seed + run})
        r = simulate(
            steps,
            cluster,
            model,
            limits,
            p,
            coefficients=coeffs,
            workers=workers,
            noise=request_noise(noise, edges, seed, run),
        )
        for s in r.steps:
            times.setdefault(s.step, []).append(s.step_time)
        spans.append(r.makespan)
    return {
        "n_runs": n_runs,
        "steps": {step: _quantiles(np.asarray(v)) for step, v in sorted(times.items())},
        "makespan": _quantiles(np.asarray(spans)),
        "runs": {step: np.asarray(v) for step, v in sorted(times.items())},
    }
