"""Monte-Carlo replay of every registered policy: the policy replayed per run with the
calibrated noise on its requests (core/simulator/replay_mc.py, request_noise.py)."""

from __future__ import annotations

import numpy as np
import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, simulate
from core.simulator.policies import POLICIES
from core.simulator.replay_mc import monte_carlo_replay
from core.simulator.request_noise import request_noise
from core.simulator.uncertainty import NoiseModel

MODEL = MODEL_PRESETS["Qwen2.5-7B"]
NOISE = NoiseModel([200.0], [0.0, 0.0], [0.2, 0.1], [100, 100], step_sd=0.05)


def _steps() -> list[StepWorkload]:
    rng = np.random.default_rng(0)
    return [
        StepWorkload.from_groups(s, rng.integers(50, 300, 16), [rng.integers(10, 800, 4) for _ in range(16)])
        for s in range(3)
    ]


def _cluster(kind: str) -> ClusterConfig:
    if POLICIES[kind].disaggregated:
        return ClusterConfig(n_gpus=8, rollout_replicas=4, rollout_tp=1, train_dp=4)
    return ClusterConfig(n_gpus=8, rollout_replicas=8, rollout_tp=1, train_dp=8)


@pytest.mark.parametrize("kind", list(POLICIES))
def test_every_policy_gets_a_non_degenerate_interval_under_noise(kind):
    out = monte_carlo_replay(_steps(), _cluster(kind), MODEL, EngineLimits(), Policy(kind=kind), NOISE, n_runs=16)
    assert out["n_runs"] == 16
    assert out["makespan"]["p90"] > out["makespan"]["p10"]
    assert all(q["p90"] > q["p10"] for q in out["steps"].values()), out["steps"]


def test_the_same_seed_gives_the_same_intervals_and_another_seed_others():
    steps, c = _steps(), _cluster("partial")
    a = monte_carlo_replay(steps, c, MODEL, EngineLimits(), Policy(kind="partial"), NOISE, n_runs=4, seed=3)
    b = monte_carlo_replay(steps, c, MODEL, EngineLimits(), Policy(kind="partial"), NOISE, n_runs=4, seed=3)
    other = monte_carlo_replay(steps, c, MODEL, EngineLimits(), Policy(kind="partial"), NOISE, n_runs=4, seed=4)
    assert a["makespan"] == b["makespan"] and a["makespan"] != other["makespan"]


def test_noise_without_dispersion_replays_the_means():
    steps, c = _steps(), _cluster("async")
    still = NoiseModel([], [0.0], [0.0], [100])
    det = simulate(steps, c, MODEL, EngineLimits(), Policy(kind="async"))
    out = monte_carlo_replay(steps, c, MODEL, EngineLimits(), Policy(kind="async"), still, n_runs=2)
    assert out["makespan"]["p10"] == out["makespan"]["p90"] == pytest.approx(det.makespan)


def test_a_request_draws_the_same_factor_whatever_else_is_added():
    rn = request_noise(NOISE, np.array([300.0]), seed=0, run=1)
    arr = {"decode": np.array([10, 500, 900]), "context": np.array([5, 6, 7]), "prefill": np.array([5, 6, 7])}
    f = rn.factors(arr, np.array([0, 1, 2]))
    again = rn.factors({k: v.copy() for k, v in arr.items()}, np.array([0, 1, 2]))
    assert np.array_equal(f, again) and len(set(f.tolist())) == 3
    # log-factors have the bins' dispersion: short requests scatter more than long ones
    many = {"decode": np.full(4000, 100), "context": np.arange(4000), "prefill": np.zeros(4000, np.int64)}
    long = {**many, "decode": np.full(4000, 1000)}
    sd_short = np.log(rn.factors(many, np.arange(4000))).std()
    sd_long = np.log(rn.factors(long, np.arange(4000))).std()
    assert sd_short == pytest.approx(0.2, rel=0.1) and sd_long == pytest.approx(0.1, rel=0.1)


def test_a_simulation_job_gives_every_policy_a_step_time_interval():
    """The replay runner: a colocated batch-rollout side gets its rollout's runs shifted;
    a streaming or disaggregated side its own Monte-Carlo replay, non-degenerate."""
    from core.simulator.replay import Replay, policy_intervals, uncertainty_dict

    steps = _steps()
    ca, cb = _cluster("sync"), _cluster("async")
    a, b = (simulate(steps, c, MODEL, EngineLimits(), Policy(kind=k)) for c, k in ((ca, "sync"), (cb, "async")))
    engine = (MODEL, EngineLimits(), NOISE, None)
    pmc = policy_intervals(steps, 1, engine, (a, Policy(kind="sync"), ca), (b, Policy(kind="async"), cb))
    assert set(pmc) == {"b"}
    figures = {k: {"mean": 2.0, "p10": 1.0, "p90": 3.0} for k in ("rollout_s", "p50_traj_s", "p90_traj_s")}
    mc = {w.step: {"n_runs": 10, **figures, "deterministic": dict.fromkeys(figures, 2.0)} for w in steps}
    unc = {"noise": {"sd": [0.1]}, "steps": mc}
    rows = uncertainty_dict(Replay(steps, a, b, None, None, unc, policy_mc=pmc))["steps"]
    b_steps = {s.step: s.step_time for s in b.steps}
    for row in rows:
        own = pmc["b"][row["step"]]
        assert row["step_s_b"] == {
            "mean": own["mean"],
            "p10": own["p10"],
            "p90": own["p90"],
            "deterministic": b_steps[row["step"]],
        }
        assert own["p90"] > own["p10"] and "step_s_a" in row
