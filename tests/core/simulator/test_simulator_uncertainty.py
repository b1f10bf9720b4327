"""Calibrated uncertainty and rolling-origin accuracy, on synthetic ground truth: traces
whose per-request latencies come from a known engine times known lognormal noise."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineCoefficients, EngineLimits, Policy, StepWorkload
from core.simulator.calibration import accuracy_report, calibrate, partial_steps
from core.simulator.evaluation import noise_for, rolling_origin
from core.simulator.policies.base import Env
from core.simulator.uncertainty import monte_carlo, monte_carlo_step, noise_from_residuals, request_latencies

MODEL = MODEL_PRESETS["Qwen2.5-7B"]
CLUSTER = ClusterConfig(n_gpus=8, rollout_replicas=1, rollout_tp=1, train_dp=8)
LIMITS = EngineLimits(max_running_seqs=4096, kv_cache_tokens=10**12)
TRUE = EngineCoefficients(0.01, 0.0, 0.0015, 1e-3, 5e-5, 0.0)
SIGMA = 0.12


def _step(step: int, n: int, rng: np.random.Generator) -> StepWorkload:
    """n multi-turn trajectories (groups of 4), 1-4 turns, tool latency between turns."""
    turns = rng.integers(1, 5, n)
    sample = np.repeat(np.arange(n), turns)
    m = sample.size
    completion = np.maximum(1, rng.lognormal(5.0, 0.8, m)).astype(np.int64)
    tool = np.where(np.r_[sample[1:] == sample[:-1], False], rng.exponential(2.0, m), 0.0)
    prompt0 = rng.integers(100, 400, n)
    prompt = np.empty(m, np.int64)
    cached = np.zeros(m, np.int64)
    first = np.searchsorted(sample, np.arange(n))
    for i in range(n):
        ctx = prev = int(prompt0[i])
        for j in range(first[i], first[i] + turns[i]):
            prompt[j] = ctx
            cached[j] = 0 if j == first[i] else prev
            prev = ctx + int(completion[j])
            ctx = prev + 50  # tool response
    w = StepWorkload(
        step=step,
        group=np.arange(n) // 4,
        prompt_len=prompt0,
        response_len=np.bincount(sample, completion, minlength=n).astype(np.int64),
        turn_sample=sample,
        turn_prompt_tokens=prompt,
        turn_cached_tokens=cached,
        turn_completion_tokens=completion,
        turn_tool_latency_s=tool,
    )
    return w


def _measure(w: StepWorkload, rng: np.random.Generator) -> StepWorkload:
    """The known engine's latencies times lognormal(0, SIGMA) noise per request."""
    env = Env(CLUSTER, MODEL, LIMITS, Policy(), TRUE, float(LIMITS.kv_cache_tokens))
    lat, gap, owner, _ = request_latencies(env, w)
    meas = lat * np.exp(SIGMA * rng.standard_normal(lat.size))
    w.turn_engine_latency_s = meas
    w.sample_latency_s = np.bincount(owner, meas + gap, minlength=w.n_samples)
    return w


@pytest.fixture(scope="module")
def truth():
    rng = np.random.default_rng(11)
    return [_measure(_step(s, 400, rng), rng) for s in range(41)]


def test_noise_model_recovers_the_known_dispersion(truth):
    env = Env(CLUSTER, MODEL, LIMITS, Policy(), TRUE, float(LIMITS.kv_cache_tokens))
    lat, _, _, _ = request_latencies(env, truth[0])
    noise = noise_from_residuals(lat, truth[0].turn_engine_latency_s)
    assert noise is not None and len(noise.mu) >= 5
    assert np.allclose(noise.sd, SIGMA, atol=0.03) and np.allclose(noise.mu, 0.0, atol=0.03)


def test_intervals_cover_the_truth_at_their_nominal_rate(truth):
    """Calibrated on step 0 (coefficients and noise), the P10-P90 interval of the
    rollout time of 40 later steps contains the measured one 80 % +- 10 pp of the time."""
    cal = calibrate(truth, CLUSTER, MODEL, LIMITS, fit_steps=[0], concurrency_candidates=[LIMITS])
    noise = noise_for(truth, cal, MODEL)
    assert noise is not None
    rep = accuracy_report(truth, cal, MODEL, noise=noise, n_runs=300)
    assert rep["predictor"] == "mc_mean" and len(rep["steps"]) == 40
    cov = rep["mean"]["rollout_s_coverage"]
    assert abs(cov - 0.8) <= 0.10, cov
    # the MC mean removes the max-of-means bias of the deterministic replay
    det = np.mean([r["rollout_s"]["deterministic_rel_error"] for r in rep["steps"]])
    mc = np.mean([r["rollout_s"]["rel_error"] for r in rep["steps"]])
    assert det < -0.01 and abs(mc) < abs(det) / 2
    assert rep["mean"]["rollout_s_accuracy"] > rep["mean"]["rollout_s_deterministic_accuracy"]


def test_monte_carlo_is_seeded_and_converges():
    rng = np.random.default_rng(0)
    lat = rng.uniform(1, 10, 3000)
    owner = np.repeat(np.arange(1000), 3)
    noise = noise_from_residuals(lat, lat * np.exp(0.1 * rng.standard_normal(lat.size)))
    a = monte_carlo(lat, np.zeros_like(lat), owner, 1000, noise, seed=3)
    b = monte_carlo(lat, np.zeros_like(lat), owner, 1000, noise, seed=3)
    assert a["rollout_s"] == b["rollout_s"] and 200 <= a["n_runs"] <= 2000
    se = a["rollout_s"]["sd"] / np.sqrt(a["n_runs"])
    assert se <= 1e-3 * a["rollout_s"]["mean"] or a["n_runs"] == 2000
    assert a["rollout_s"]["p10"] < a["rollout_s"]["mean"] < a["rollout_s"]["p90"]


def test_partial_steps_are_flagged_and_kept_out_of_the_mean(truth):
    rng = np.random.default_rng(5)
    steps = [truth[0], truth[1], _measure(_step(2, 40, rng), rng)]
    assert partial_steps(steps) == {2}
    rep = rolling_origin(steps, CLUSTER, MODEL, LIMITS, n_runs=200)
    by = {r["step"]: r for r in rep["steps"]}
    assert set(by) == {1, 2} and by[2]["partial"] and not by[1]["partial"]
    assert by[1]["calibrated_on"] == [0] and by[2]["calibrated_on"] == [0, 1]
    assert rep["mean"]["steps"] == [1]
    r = by[1]["rollout_s"]
    assert rep["mean"]["rollout_s_accuracy"] == pytest.approx(r["accuracy"])
    assert r["naive_previous"] == pytest.approx(float(np.max(truth[0].sample_latency_s)))
    # accuracy never below 0: the relative error says how far off
    for row in rep["steps"]:
        for k in ("rollout_s", "p50_traj_s", "p90_traj_s"):
            for pre in ("", "naive_", "naive_previous_", "deterministic_"):
                acc = row[k][f"{pre}accuracy"]
                assert acc is None or acc >= 0
                assert row[k][f"{pre}rel_error"] is not None


def test_mc_step_reports_the_deterministic_replay(truth):
    env = Env(CLUSTER, MODEL, LIMITS, Policy(), TRUE, float(LIMITS.kv_cache_tokens))
    lat, _, _, _ = request_latencies(env, truth[0])
    noise = noise_from_residuals(lat, truth[0].turn_engine_latency_s)
    out = monte_carlo_step(env, truth[3], noise, n_runs=100)
    assert out["n_runs"] == 100
    assert out["deterministic"]["rollout_s"] < out["rollout_s"]["mean"]


def test_forecast_draws_the_step_from_earlier_workloads(truth):
    from core.simulator.forecast import drift_factor, forecast_step

    env = Env(CLUSTER, MODEL, LIMITS, Policy(), TRUE, float(LIMITS.kv_cache_tokens))
    lat, _, _, _ = request_latencies(env, truth[0])
    noise = noise_from_residuals(lat, truth[0].turn_engine_latency_s)
    target = truth[6]
    out = forecast_step(env, truth[:6], target, noise, workloads=3, n_runs=150)
    assert out["history"] == [0, 1, 2, 3, 4, 5] and out["runs"] == 150
    assert out["n_samples"]["forecast"] == target.n_samples  # 100 groups of 4, as the history
    r = out["rollout_s"]
    assert r["interval"][0] < r["predicted"] < r["interval"][1]
    assert r["accuracy"] > 0.85 and r["measured"] == pytest.approx(float(np.max(target.sample_latency_s)))
    # the forecast never reads the target's workload: a longer target changes nothing
    longer = dataclasses.replace(target, turn_completion_tokens=target.turn_completion_tokens * 3)
    again = forecast_step(env, truth[:6], longer, noise, workloads=3, n_runs=150)
    assert again["rollout_s"]["predicted"] == r["predicted"]
    assert abs(drift_factor(truth[:6], 6) - 1) < 0.1  # no drift in the synthetic truth
