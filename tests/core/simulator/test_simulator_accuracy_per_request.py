"""Per-request held-out accuracy: the scores on synthetic data whose truth is known, the
held-out replay on a known engine, and the scoring on the real Search-R1 fixture."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ks_2samp, wasserstein_distance

from core.simulator import Policy
from core.simulator.evaluation import held_out_requests, rolling_origin
from core.simulator.policies.base import Env
from core.simulator.request_accuracy import mean_scores, naive_rules, score_held_out
from core.simulator.request_scores import ERRORS, NO_INTERVAL, distances, resample_index, score_requests
from core.simulator.uncertainty import NoiseModel
from tests.core.simulator.test_simulator_uncertainty import CLUSTER, LIMITS, MODEL, SIGMA, TRUE, _measure, _step


def _meas(n: int = 600, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(3.0, 0.6, n)


def test_identical_prediction_scores_zero_error_and_full_skill():
    meas = _meas()
    s = score_requests(meas.copy(), meas, naive={"off": meas * 1.3}, n_boot=200)
    for k in ERRORS:
        assert s[k]["value"] == pytest.approx(0.0, abs=1e-12)
        assert s[k]["ci90"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert s["naive"]["off"]["median_abs_rel_error"]["value"] == pytest.approx(0.3)
    assert s["naive"]["off"]["skill"]["value"] == pytest.approx(1.0)
    assert s["coverage"] == NO_INTERVAL and s["n"] == meas.size


def test_a_shifted_prediction_scores_the_shift():
    meas = _meas()
    rel = score_requests(meas * 1.1, meas, naive={"off": meas * 1.4}, n_boot=200)
    for k in ("median_abs_rel_error", "p90_abs_rel_error", "median_rel_error"):
        assert rel[k]["value"] == pytest.approx(0.1)
    assert rel["naive"]["off"]["skill"]["value"] == pytest.approx(1 - 0.1 / 0.4)
    low = score_requests(meas * 0.8, meas, n_boot=0)
    assert low["median_rel_error"]["value"] == pytest.approx(-0.2)
    # an additive shift moves the whole distribution by it: W1 is the shift exactly
    add = score_requests(meas + 2.0, meas, n_boot=200)
    assert add["w1_over_mean"]["value"] == pytest.approx(2.0 / meas.mean())
    assert add["w1_over_mean"]["ci90"][0] <= 2.0 / meas.mean() <= add["w1_over_mean"]["ci90"][1]


def test_distances_match_scipy_and_are_one_for_disjoint_samples():
    rng = np.random.default_rng(5)
    a, b = rng.normal(0, 1, 300), rng.normal(0.4, 1.5, 170)
    w1, ks = distances(a, b)
    assert w1 == pytest.approx(wasserstein_distance(a, b))
    assert ks == pytest.approx(ks_2samp(a, b).statistic)
    assert distances(np.arange(5.0), np.arange(5.0) + 10)[1] == 1.0


def test_bootstrap_contains_the_point_and_is_seeded():
    rng = np.random.default_rng(7)
    meas = _meas(800)
    pred = meas * np.exp(rng.normal(0.03, 0.15, meas.size))
    interval = (pred * 0.85, pred * 1.15)
    naive = {"mean": np.full(meas.size, meas.mean()), "median": np.full(meas.size, np.median(meas))}
    s = score_requests(pred, meas, naive=naive, interval=interval, n_boot=300, seed=4)
    figures = [s[k] for k in ERRORS] + [s["coverage"]] + [v for q in s["naive"].values() for v in q.values()]
    for f in figures:
        lo, hi = f["ci90"]
        assert lo <= f["value"] <= hi and hi - lo > 0
    assert s["coverage"]["value"] == pytest.approx(np.mean((interval[0] <= meas) & (meas <= interval[1])))
    assert 0 < s["naive"]["mean"]["skill"]["value"] < 1
    assert score_requests(pred, meas, naive=naive, interval=interval, n_boot=300, seed=4) == s
    other = score_requests(pred, meas, naive=naive, interval=interval, n_boot=300, seed=5)
    assert other["ks"]["value"] == s["ks"]["value"] and other["ks"]["ci90"] != s["ks"]["ci90"]


def test_group_resampling_keeps_whole_groups():
    groups = np.repeat(np.arange(50), np.arange(50) % 4 + 1)
    idx = resample_index(groups.size, groups, np.random.default_rng(0))
    picked = groups[idx]
    # every group drawn brings all its members, contiguous
    starts = np.flatnonzero(np.r_[True, picked[1:] != picked[:-1]])
    for s, e in zip(starts, np.r_[starts[1:], picked.size], strict=True):
        assert (e - s) % np.sum(groups == picked[s]) == 0  # a group drawn k times in a row: k runs
    assert len(np.unique(picked)) < 50  # with replacement: some groups left out


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="must match"):
        score_requests(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="finite and > 0"):
        score_requests(np.ones(3), np.array([1.0, 0.0, 2.0]))


@pytest.fixture(scope="module")
def truth():
    rng = np.random.default_rng(21)
    return [_measure(_step(s, 300, rng), rng) for s in range(3)]


def _true_env() -> Env:
    return Env(CLUSTER, MODEL, LIMITS, Policy(), TRUE, float(LIMITS.kv_cache_tokens))


def test_held_out_on_the_known_engine_covers_at_the_nominal_rate(truth):
    noise = NoiseModel([], [0.0], [SIGMA], [1])
    row = score_held_out(truth[:1], truth[1], _true_env(), noise, n_boot=100)
    turn, traj = row["turn"], row["trajectory"]
    assert row["predictor"] == "mc_mean" and turn["n"] == truth[1].turn_sample.size and traj["n"] == 300
    # requests' own P10-P90 of the true noise: 80 % of them inside
    assert turn["coverage"]["value"] == pytest.approx(0.8, abs=0.04)
    assert 0.6 < traj["coverage"]["value"] < 0.95
    # median |exp(sigma z) - 1| is about 0.674 sigma
    assert turn["median_abs_rel_error"]["value"] == pytest.approx(0.674 * SIGMA, rel=0.15)
    assert turn["w1_over_mean"]["value"] < 0.05 and turn["naive"]["per_token"]["skill"]["value"] > 0
    # the held-out step's measurements are only compared with, never read for the prediction
    kept = truth[1].turn_engine_latency_s
    truth[1].turn_engine_latency_s = kept * 10
    try:
        again = score_held_out(truth[:1], truth[1], _true_env(), noise, n_boot=0)
    finally:
        truth[1].turn_engine_latency_s = kept
    assert again["turn"]["median_rel_error"]["value"] == pytest.approx(
        0.1 * (1 + turn["median_rel_error"]["value"]) - 1, abs=0.02
    )


def test_without_noise_the_replay_is_deterministic_with_no_interval(truth):
    row = score_held_out(truth[:1], truth[2], _true_env(), None, n_boot=50)
    assert row["predictor"] == "deterministic"
    assert row["turn"]["coverage"] == NO_INTERVAL == row["trajectory"]["coverage"]
    rules = naive_rules(truth[:2])
    assert rules["turn"] is not None and rules["turn"]["median"] > 0 and rules["turn"]["per_token"] > 0
    mean = mean_scores([row, {**row, "step": 9}], skip={9})
    assert mean["steps"] == [2] and mean["turn"]["coverage"] == NO_INTERVAL
    assert mean["turn"]["median_abs_rel_error"] == row["turn"]["median_abs_rel_error"]["value"]


def test_rolling_origin_carries_the_per_request_scores(truth):
    ro = rolling_origin(truth, CLUSTER, MODEL, LIMITS, monte_carlo=False)
    assert [r["per_request"]["step"] for r in ro["steps"]] == [1, 2]
    assert ro["mean"]["per_request"]["steps"] == [1, 2]
    assert ro["mean"]["per_request"]["trajectory"]["median_abs_rel_error"] < 0.2
    from rlvr_explorer.cli.whatif import _rolling_origin_summary

    text = _rolling_origin_summary(ro)
    assert "per request, trajectories: completion error median" in text and NO_INTERVAL in text
    assert "per request, turns" in text


def test_search_r1_per_request_scores_are_finite_and_in_range(shared_fixtures):
    from bench.accuracy import runs

    if not (shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b").is_dir():
        pytest.skip("the Search-R1 fixture is not in the shared fixtures")
    steps = runs()["search_r1_qwen2_5_7b"]
    from bench.accuracy import CLUSTER as R1_CLUSTER
    from bench.accuracy import MODEL as R1_MODEL

    r = held_out_requests(steps, R1_CLUSTER, R1_MODEL, scheme="rolling", n_boot=50)
    assert r["partial_steps"] == [5] and r["mean"]["steps"] == [1]
    (row,) = [x for x in r["steps"] if x["step"] == 1]
    for level in ("turn", "trajectory"):
        s = row[level]
        assert s["n"] == (steps[1].turn_sample.size if level == "turn" else 2048)
        for k in ("median_abs_rel_error", "p90_abs_rel_error", "w1_over_mean", "ks", "coverage"):
            v, (lo, hi) = s[k]["value"], s[k]["ci90"]
            assert np.isfinite([v, lo, hi]).all() and 0 <= lo <= v <= hi <= 1
        assert s["median_abs_rel_error"]["value"] < 0.2 and s["ks"]["value"] < 0.2
        for q in s["naive"].values():
            assert np.isfinite(q["skill"]["value"]) and q["skill"]["value"] <= 1
