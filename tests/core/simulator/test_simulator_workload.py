"""StepWorkload built from the bulk tables' column arrays."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from core.simulator.requests import step_request_arrays
from core.simulator.workload import StepWorkload, workload_from_columns
from core.workload.polytrace_rows import multiturn_rows_to_columns


def _samples():
    # step 3 listed before step 1, rows shuffled; one validation row
    return {
        "step": np.array([3, 1, 1, 1, 3, 1, 1]),
        "group_idx": np.array([0, 5, 5, 2, 0, 2, 9]),
        "sample_idx": np.array([1, 1, 0, 0, 0, 1, 0]),
        "prompt_len": np.array([40, 20, 20, 10, 40, 10, 99]),
        "response_len": np.array([400, 201, 200, 100, 300, 101, 999]),
        "validate": np.array([0, 0, 0, 0, 0, 0, 1], bool),
        "dp_rank": np.array([1, 0, 0, 1, 1, 1, 0]),
    }


def test_single_turn_steps_sorted_grouped_and_validation_dropped():
    steps = workload_from_columns(
        _samples(),
        rank_timings={
            "step": np.array([1, 1, 3]),
            "rank": np.array([1, 0, 0]),
            "phase": ["reward", "reward", "other"],
            "seconds": np.array([2.5, 1.5, 9.0]),
        },
        steps={"step": np.array([1, 3]), "t_gen": np.array([12.0, np.nan]), "t_step": np.array([30.0, 31.0])},
    )
    assert [w.step for w in steps] == [1, 3]
    s1 = steps[0]
    # groups 2 and 5 become dense 0, 1; samples in index order; validation group 9 dropped
    assert s1.group.tolist() == [0, 0, 1, 1]
    assert s1.response_len.tolist() == [100, 101, 200, 201]
    assert s1.prompt_len.tolist() == [10, 10, 20, 20]
    assert s1.n_groups == 2 and not s1.is_multiturn
    assert s1.reward_time_by_rank.tolist() == [1.5, 2.5]  # ordered by rank
    assert s1.timings == {"t_gen": 12.0, "t_step": 30.0}
    assert s1.measured_rollout_s == 12.0
    assert steps[1].timings == {"t_step": 31.0} and steps[1].reward_time_by_rank is None
    assert s1.total_len.tolist() == [110, 111, 220, 221]


def test_missing_required_column_is_named():
    cols = _samples()
    del cols["response_len"]
    with pytest.raises(ValueError, match="^samples.response_len"):
        workload_from_columns(cols)


def test_multiturn_turns_and_tool_latency_attached():
    samples = {
        "step": np.array([0, 0]),
        "group_idx": np.array([0, 0]),
        "sample_idx": np.array([0, 1]),
        "prompt_len": np.array([10, 10]),
        "response_len": np.array([50, 5]),
    }
    turns = {
        "step": np.array([0, 0, 0]),
        "group_idx": np.array([0, 0, 0]),
        "sample_idx": np.array([0, 0, 1]),
        "turn": np.array([1, 0, 0]),
        "prompt_tokens": np.array([60, 10, 10]),
        "cached_tokens": np.array([20, 0, 0]),
        "completion_tokens": np.array([7, 20, 5]),
        "engine_latency_s": np.array([2.0, 3.0, 1.0]),
    }
    calls = {
        "step": np.array([0, 0]),
        "group_idx": np.array([0, 0]),
        "sample_idx": np.array([0, 0]),
        "turn": np.array([0, 0]),
        "latency_s": np.array([0.25, 0.5]),
    }
    (w,) = workload_from_columns(samples, turns, calls)
    assert w.is_multiturn
    assert w.turn_sample.tolist() == [0, 0, 1]
    assert w.turn_prompt_tokens.tolist() == [10, 60, 10]
    assert w.turn_tool_latency_s.tolist() == [0.75, 0.0, 0.0]
    # measured trajectory latency: turn latencies + tool latencies
    assert w.sample_latency_s.tolist() == [3.0 + 0.75 + 2.0, 1.0]
    assert w.measured_rollout_s == 5.75
    req = step_request_arrays(w)
    assert req["prefill"].tolist() == [10, 40, 10]  # cached prefix skips prefill
    assert req["next"].tolist() == [1, -1, -1] and req["first"].tolist() == [0, 2]


def test_unknown_cached_tokens_assume_the_previous_context_is_cached():
    samples = {
        "step": np.array([0]),
        "group_idx": np.array([0]),
        "sample_idx": np.array([0]),
        "prompt_len": np.array([10]),
        "response_len": np.array([40]),
    }
    turns = {
        "step": np.zeros(3, int),
        "group_idx": np.zeros(3, int),
        "sample_idx": np.zeros(3, int),
        "turn": np.array([0, 1, 2]),
        "prompt_tokens": np.array([10, 30, 60]),
        "completion_tokens": np.array([5, 7, 9]),
    }
    (w,) = workload_from_columns(samples, turns)
    assert w.turn_cached_tokens.tolist() == [0, 15, 37]
    turns["cached_tokens"] = np.array([0, -1, 20])  # -1: NULL read back from the database
    (w,) = workload_from_columns(samples, turns)
    assert w.turn_cached_tokens.tolist() == [0, 15, 20]


def test_single_turn_requests_share_the_group_prompt():
    w = StepWorkload.from_groups(0, [100, 30], [[5, 6, 7], [8]])
    req = step_request_arrays(w)
    assert req["prefill"].tolist() == [100, 0, 0, 30]
    assert req["context"].tolist() == [100, 100, 100, 30]


def test_search_r1_columns(shared_fixtures):
    path = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b" / "multiturn_workload_step_0.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    cols = multiturn_rows_to_columns(rows)
    (w,) = workload_from_columns(cols["samples"], cols["turns"], cols["tool_calls"])
    assert w.n_samples == len(rows) and w.turn_sample.size == sum(len(r["turns"]) for r in rows)
    slowest = max(
        sum(t["engine_latency_s"] for t in r["turns"]) + sum(c["latency_s"] for c in r["tool_calls"]) for r in rows
    )
    assert w.measured_rollout_s == pytest.approx(slowest)
