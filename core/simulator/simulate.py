"""Entry point: replay a workload under a policy on a described cluster."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from core.simulator.config import ClusterConfig, EngineLimits, ModelConfig, Policy, to_dict
from core.simulator.defaults import unused_gpus, unused_warning
from core.simulator.feasibility import layout_warnings
from core.simulator.parallel_rollouts import prefill_rollouts
from core.simulator.policies import Env, PolicySpec, policy_spec
from core.simulator.predictor import EngineCoefficients, roofline_coefficients
from core.simulator.request_noise import RequestNoise
from core.simulator.result import SimResult, StepResult
from core.simulator.timeline import step_locator
from core.simulator.workload import StepWorkload


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """The replay allocates millions of short-lived tuples and floats that reference
    counting frees, and no cycles; the cyclic collector would only walk the growing
    results again and again (a quarter of a 500-step replay's time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def simulate(
    workload: list[StepWorkload],
    cluster: ClusterConfig,
    model: ModelConfig,
    limits: EngineLimits,
    policy: Policy,
    progress: Callable[[float], None] | None = None,
    *,
    coefficients: EngineCoefficients | None = None,
    rollout_cache: dict | None = None,
    workers: int | None = None,
    noise: RequestNoise | None = None,
) -> SimResult:
    """Replay `workload` (steps in order) and return stage times, timeline and idle split.

    `coefficients` (e.g. from `calibrate`) override the roofline engine coefficients.
    `progress` is called with the fraction of steps done. `rollout_cache` (a dict kept
    by the caller) lets replays with the same rollout layout share batch rollouts.
    Without one, a big replay of a batch-rollout policy computes its rollouts ahead in
    `workers` processes (default: the CPUs, where forking is safe; 1 = this process).
    `noise` perturbs every request's length (one Monte-Carlo run, `request_noise`).
    """
    if not workload:
        raise ValueError("workload: no steps to simulate")
    spec = policy_spec(policy.kind)
    cluster.check_fits(spec.disaggregated)
    coeffs = coefficients or roofline_coefficients(cluster, model)
    params = spec.resolve(policy.params)
    kv = limits.kv_capacity(cluster, model)
    env = Env(
        cluster,
        model,
        limits,
        policy,
        coeffs,
        kv,
        rollout_cache,
        params,
        spec.rollout,
        workers,
        noise,
        colocated=not spec.disaggregated,
    )
    steps_in = list(workload)
    report = progress or (lambda f: None)
    run_progress = report
    with _cyclic_gc_paused():
        if (
            spec.batch_rollouts
            and rollout_cache is None
            and prefill_rollouts(env, steps_in, lambda f: report(0.9 * f), workers)
        ):
            run_progress = lambda f: report(0.9 + 0.1 * f)  # noqa: E731
        steps, tb, makespan = spec.run(env, steps_in, run_progress)
    step_of = step_locator([s.end for s in steps], [s.step for s in steps])
    lanes, idle, busy, idle_step, busy_step = tb.finish(makespan, step_of)
    for s in steps:
        s.idle_gpu_s = idle_step.get(s.step, {})
        s.busy_gpu_s = busy_step.get(s.step, 0.0)
    config = _config(env, spec)
    warning = unused_warning(cluster, spec.disaggregated)
    warnings = ([warning] if warning else []) + layout_warnings(cluster, spec.disaggregated)
    return SimResult(
        steps=steps,
        makespan=makespan,
        lanes=lanes,
        n_gpus=cluster.n_gpus,
        config=config,
        idle_gpu_s=idle,
        busy_gpu_s=busy,
        unused_gpus=unused_gpus(cluster, spec.disaggregated),
        warnings=warnings,
    )


def _config(env: Env, spec: PolicySpec) -> dict:
    """What the replay ran with, as its result records it."""
    return {
        "cluster": to_dict(env.cluster),
        "model": to_dict(env.model),
        "limits": to_dict(env.limits),
        "policy": {
            **to_dict(env.policy),
            "params": dataclasses.asdict(env.params),
            "equivalent_to": spec.equivalent_to(env.params),
        },
        "coefficients": env.coefficients.to_dict(),
        "kv_capacity_tokens": env.kv_capacity,
    }


__all__ = ["simulate", "SimResult", "StepResult"]
