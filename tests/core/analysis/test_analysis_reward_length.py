"""Reward vs length: recomputed from raw rows with plain Python, per step and bucket; the
chunked result equals the direct one; partial steps are flagged and kept out."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from core.analysis.registry import run_analysis, run_analysis_chunked
from core.analysis.tables import TraceData


def rows(seed: int = 5) -> list[dict]:
    """Samples of 6 steps; long responses fail more often; step 5 has 6 samples only."""
    rng = random.Random(seed)
    out = []
    for step in range(6):
        for i in range(6 if step == 5 else 60):
            length = int(rng.lognormvariate(6, 1.2))
            reward = 0.0 if rng.random() < min(0.9, length / 3000) else 1.0
            out.append(
                {
                    "step": step,
                    "group_idx": i // 4,
                    "sample_idx": i % 4,
                    "response_len": length,
                    "reward": reward if i != 7 else float("nan"),  # one unknown reward per step
                    "repeat_period": 12 if i % 9 == 0 else 0,
                    "validate": False,
                }
            )
    out.append({**out[0], "step": 9, "validate": True})  # validation: left out
    return out


def data_of(items: list[dict]) -> TraceData:
    cols = {k: np.array([r[k] for r in items]) for k in items[0]}
    cols["prompt_len"] = np.full(len(items), 10)
    return TraceData.from_tables({"samples": cols})


def expected_step(items: list[dict]) -> dict:
    known = [r for r in items if r["reward"] == r["reward"]]
    lengths = sorted((r["response_len"] for r in known), reverse=True)
    k = math.ceil(0.1 * len(known))
    cut = lengths[k - 1]
    tail = [r for r in known if r["response_len"] >= cut]
    rest = [r for r in known if r["response_len"] < cut]
    share = lambda group: sum(r["reward"] <= 0 for r in group) / len(group)  # noqa: E731
    return {
        "n": len(known),
        "tail_n": len(tail),
        "tail_min_len": cut,
        "tail_no_reward_share": share(tail),
        "rest_no_reward_share": share(rest),
        "no_reward_share": share(known),
        "repetition_share": sum(r["repeat_period"] > 0 for r in known) / len(known),
        "partial": len(known) < 10,
    }


def test_per_step_tail_and_buckets_match_a_plain_recomputation():
    items = rows()
    result = run_analysis("reward_length", data_of(items))
    by_step = {r["step"]: r for r in result["steps"]}
    assert sorted(by_step) == [0, 1, 2, 3, 4, 5]  # validation step 9 left out
    for step, row in by_step.items():
        want = expected_step([r for r in items if r["step"] == step and not r["validate"]])
        for key, value in want.items():
            assert row[key] == pytest.approx(value), (step, key)
    assert by_step[5]["partial"] and result["summary"]["partial_steps"] == [5]
    full = [by_step[s] for s in range(5)]
    assert result["summary"]["tail_no_reward_share"] == pytest.approx(
        np.mean([r["tail_no_reward_share"] for r in full])
    )
    assert result["summary"]["eligible_steps"] == 5
    # buckets: [0, 64), [64, 128), ... counted by hand
    for b in result["buckets"]:
        members = [
            r
            for r in items
            if r["step"] == b["step"]
            and not r["validate"]
            and r["reward"] == r["reward"]
            and b["lo"] <= r["response_len"] < b["hi"]
        ]
        assert b["n"] == len(members) > 0
        assert b["mean_reward"] == pytest.approx(sum(r["reward"] for r in members) / len(members))
        assert b["lo"] == 0 or b["hi"] == 2 * b["lo"]
    # the synthetic long tail fails more: the figure says so
    assert result["summary"]["tail_no_reward_share"] > result["summary"]["rest_no_reward_share"]
    assert "ceil(10% x n)" in result["definitions"]["tail"]


def test_chunked_equals_direct():
    data = data_of(rows(seed=8))
    direct = run_analysis("reward_length", data)
    chunked = run_analysis_chunked("reward_length", data.split_steps(3))
    assert chunked == direct


def test_without_text_the_repetition_share_is_null():
    items = [{**r, "repeat_period": -1} for r in rows() if r["step"] == 0]
    result = run_analysis("reward_length", data_of(items))
    assert result["steps"][0]["repetition_share"] is None and result["summary"]["repetition_share"] is None
