"""Fitting length models and generating from them (EM, marginals, KS, round trip)."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest
from scipy import stats

from core.workload.distributions import fit_marginal, icc_log, ks_discrete
from core.workload.fit import TaskLengthModel, fit_workload
from core.workload.generate import generate_steps
from core.workload.gmm import fit_gmm
from core.workload.polytrace_rows import multiturn_rows_to_columns, packed_rows_to_columns
from core.workload.synthetic import packed_length_rows


def test_em_recovers_a_two_component_mixture():
    rng = np.random.default_rng(1)
    a = rng.multivariate_normal([0, 0], [[1, 0.5], [0.5, 1]], 6000)
    b = rng.multivariate_normal([6, 3], [[0.5, 0], [0, 2]], 4000)
    g = fit_gmm(np.r_[a, b], 2, seed=0)
    order = np.argsort(g.means[:, 0])
    assert np.allclose(g.weights[order], [0.6, 0.4], atol=0.02)
    assert np.allclose(g.means[order], [[0, 0], [6, 3]], atol=0.1)
    assert np.allclose(g.covariances[order][0], [[1, 0.5], [0.5, 1]], atol=0.1)
    # the conditional keeps the joint: y given x drawn for x ~ marginal reproduces y's marginal
    x = g.marginal([0]).sample(20000, rng)
    y = g.conditional_sample(x, 1, rng)[:, 0]
    assert stats.kstest(y, lambda v: g.marginal_cdf(v, 1)).statistic < 0.015


def test_marginal_fits_and_their_ks():
    rng = np.random.default_rng(2)
    ln = stats.lognorm(0.8, 0, 500).rvs(50_000, random_state=rng)
    f = fit_marginal(ln, "lognorm")
    assert f.params[0] == pytest.approx(0.8, rel=0.02) and f.params[2] == pytest.approx(500, rel=0.02)
    assert f.ks < 0.01
    gm = stats.gamma(2.0, 0, 300).rvs(50_000, random_state=rng)
    g = fit_marginal(gm, "gamma")
    assert g.params[0] == pytest.approx(2.0, rel=0.05) and g.ks < 0.01
    # the wrong family fits visibly worse
    assert fit_marginal(gm, "lognorm").ks > 3 * g.ks


def test_ks_discrete_by_hand():
    # uniform on [0.5, 3.5] rounded: P(1) = P(2) = P(3) = 1/3; samples 1, 1, 2, 3
    cdf = lambda v: np.clip((np.asarray(v) - 0.5) / 3.0, 0, 1)  # noqa: E731
    assert ks_discrete(np.array([1, 1, 2, 3]), cdf, lo=1) == pytest.approx(0.5 - 1 / 3)
    # censoring at hi puts the upper tail's mass on hi
    assert ks_discrete(np.array([1, 2, 2]), cdf, lo=1, hi=2) == pytest.approx(0.0)


def test_intra_group_correlation():
    rng = np.random.default_rng(3)
    same = [np.full(8, v) for v in rng.lognormal(5, 1, 50)]
    assert icc_log(same) == pytest.approx(0.99)
    indep = [rng.lognormal(5, 1, 8) for _ in range(400)]
    assert icc_log(indep) < 0.05


@pytest.mark.parametrize("name", ["verl_dapo_qwen2_5_32b", "verl_video_qwen2_5_vl_7b"])
def test_round_trip_fit_then_generate(shared_fixtures, name):
    folder = shared_fixtures / "polytrace" / name
    rows = [
        orjson.loads(line)
        for f in sorted(folder.glob("packed_lengths_step_*.jsonl"))
        for line in f.read_bytes().splitlines()
    ]
    cols = packed_rows_to_columns(rows)
    (model,) = fit_workload(cols).values()
    steps = np.unique(cols["step"])
    gen = generate_steps(model, len(steps), seed=0)
    assert [g.step for g in gen] == steps.tolist()
    original = cols["response_len"]
    generated = np.concatenate([np.concatenate(g.responses) for g in gen])
    assert generated.size == original.size
    assert stats.ks_2samp(generated, original).statistic <= 0.05
    for g in gen:
        orig = original[cols["step"] == g.step]
        assert abs(np.concatenate(g.responses).mean() / orig.mean() - 1) <= 0.10
        assert len(g.responses) == len(np.unique(cols["group_idx"][cols["step"] == g.step]))
    rep = model.report()
    assert set(rep["response"]) == {"lognorm", "gamma"} and 0 <= rep["joint_gmm"]["ks_response"] < 0.05


def test_model_survives_json_and_generates_the_same():
    rows = [r for step in packed_length_rows(3, 40, 4, seed=5) for r in step]
    (model,) = fit_workload(packed_rows_to_columns(rows)).values()
    again = TaskLengthModel.from_dict(json.loads(json.dumps(model.to_dict())))
    a = generate_steps(model, 2, seed=9)
    b = generate_steps(again, 2, seed=9)
    assert all(np.array_equal(np.concatenate(x.responses), np.concatenate(y.responses)) for x, y in zip(a, b))
    assert again.report() == model.report()


def test_trend_is_fitted_and_extrapolated():
    rows = [r for step in packed_length_rows(10, 200, 4, seed=6, drift=0.05) for r in step]
    (model,) = fit_workload(packed_rows_to_columns(rows)).values()
    assert model.trend.slope_log == pytest.approx(0.05, abs=0.015)
    assert model.report()["trend"]["mean_tokens_per_step"] > 0
    later = generate_steps(model, 1, first_step=30, groups=200, samples_per_group=4, seed=1)[0]
    first = generate_steps(model, 1, first_step=0, groups=200, samples_per_group=4, seed=1)[0]
    assert np.concatenate(later.responses).mean() > 1.5 * np.concatenate(first.responses).mean()
    # group structure: 4 samples per group, a group shares its prompt
    assert all(r.size == 4 for r in later.responses) and later.prompt.size == 200


def test_multiturn_structure_from_search_r1(shared_fixtures):
    path = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b" / "multiturn_workload_step_0.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    cols = multiturn_rows_to_columns(rows)
    (model,) = fit_workload(cols["samples"], cols["turns"], cols["tool_calls"]).values()
    mt = model.multiturn
    counts = np.bincount([len(r["turns"]) for r in rows])
    assert mt.turns == {k: int(v) for k, v in enumerate(counts) if v}
    assert mt.tool_latency is not None and mt.tool_latency.ks < 0.2
    (step,) = generate_steps(model, 1, seed=2)
    gen_counts = np.bincount([len(t["output"]) for grp in step.turns for t in grp], minlength=counts.size)
    assert np.allclose(gen_counts[: counts.size] / gen_counts.sum(), counts / counts.sum(), atol=0.03)
    w = step.to_step_workload()
    assert w.is_multiturn and w.n_samples == len(rows)
    # turn k's prompt is everything before it; the previous context is cached
    first = w.turn_sample == w.turn_sample[0]
    assert w.turn_cached_tokens[first][0] == 0
    if first.sum() > 1:
        assert w.turn_cached_tokens[first][1] == w.turn_prompt_tokens[first][0] + w.turn_completion_tokens[first][0]
