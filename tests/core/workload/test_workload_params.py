"""Generating from PolyTrace's fitted-parameter file matches the described distributions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.workload.distributions import ks_discrete
from core.workload.params_file import (
    generate_from_parameters,
    load_parameters,
    math_cdfs,
    sample_call_counts,
    sample_math,
    sample_tool_matrix,
    sample_tool_sessions,
    tool_cdfs,
)

N = 100_000


@pytest.fixture(scope="module")
def params(shared_fixtures):
    d = json.loads((shared_fixtures / "polytrace" / "enhanced_task_distribution_parameters.json").read_text())
    return load_parameters(d)


def test_file_is_read_fully(params):
    assert params.version == "1.0" and params.tasks == ["math", "tool_calling"]
    assert params.math_gmm.k == 4 and params.math_gmm.weights.sum() == pytest.approx(1.0)
    assert params.math_output == pytest.approx((0.8221578425518301, 4.861523115832697, 767.2288034083723))
    assert sorted(params.call_counts) == list(range(1, 11)) and sum(params.call_counts.values()) == 241546
    assert sorted(params.sequences) == list(range(1, 11))
    assert params.sequences[3].mean.size == 6  # input_1..3, output_1..3


@pytest.mark.parametrize("mode", ["gmm", "marginal"])
def test_math_samples_match_the_described_distribution(params, mode):
    x, y = sample_math(params, N, np.random.default_rng(0), mode=mode)
    fx, fy = math_cdfs(params, mode)
    assert ks_discrete(x, fx, lo=1, hi=32000) < 0.01
    assert ks_discrete(y, fy, lo=1, hi=32000) < 0.01
    if mode == "gmm":  # the mixture's mean vector, as recorded in the file
        assert y.mean() == pytest.approx(9574.8, rel=0.01) and x.mean() == pytest.approx(141.3, rel=0.01)


def test_call_counts_and_sequences_match(params):
    counts = sample_call_counts(params, N, np.random.default_rng(1))
    calls = np.array(sorted(params.call_counts))
    w = np.array([params.call_counts[c] for c in calls], float)
    emp = np.array([(counts <= c).mean() for c in calls])
    assert np.abs(emp - np.cumsum(w / w.sum())).max() < 0.01
    draws = sample_tool_matrix(params, 3, N, np.random.default_rng(2))
    assert draws.shape == (N, 6)
    sessions = sample_tool_sessions(params, 50, np.random.default_rng(2))
    assert all(len(a) == len(b) and 1 <= len(a) <= 10 for a, b in sessions)
    assert len({len(a) for a, _ in sessions}) > 1  # call counts vary
    for i, cdf in enumerate(tool_cdfs(params, 3)):
        assert ks_discrete(draws[:, i], cdf, lo=1, hi=32000) < 0.01


def test_generated_steps_have_groups_and_turns(params):
    math = generate_from_parameters(params, "math", 2, groups=16, samples_per_group=4, seed=3)
    assert [s.step for s in math] == [0, 1]
    assert all(len(s.responses) == 16 and all(r.size == 4 for r in s.responses) for s in math)
    tool = generate_from_parameters(
        params, "tool_calling", 1, groups=8, samples_per_group=2, seed=4, tool_latency_s=0.5
    )[0]
    traj = tool.turns[0][0]
    assert len(traj["input"]) == len(traj["output"]) == len(traj["tool_latency_s"]) + 1
    assert traj["input"][0] == tool.prompt[0] and all(v == 0.5 for v in traj["tool_latency_s"])
    w = tool.to_step_workload()
    assert w.is_multiturn and w.n_samples == 16
    with pytest.raises(ValueError, match="^task"):
        generate_from_parameters(params, "poetry", 1, 1, 1)


def test_small_hand_made_file_and_bad_fields():
    d = {
        "version": "1.0",
        "math_task": {
            "gmm_parameters": {
                "weights": [1.0],
                "means": [[100.0, 2000.0]],
                "covariances": [[[100.0, 0.0], [0.0, 40000.0]]],
            }
        },
    }
    p = load_parameters(d)
    x, y = sample_math(p, 20000, np.random.default_rng(5))
    assert x.mean() == pytest.approx(100, rel=0.01) and y.std() == pytest.approx(200, rel=0.03)
    assert p.tasks == ["math"]
    d["math_task"]["gmm_parameters"]["means"] = [[1.0, 2.0, 3.0]]
    with pytest.raises(ValueError, match="^math_task.gmm_parameters"):
        load_parameters(d)
    with pytest.raises(ValueError, match="^math_task.input_distribution.type"):
        load_parameters({"math_task": {"input_distribution": {"type": "weibull", "parameters": [1, 2, 3]}}})
