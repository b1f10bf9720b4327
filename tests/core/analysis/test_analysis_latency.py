"""Reward and tool latency on hand-made traces, checked by plain-Python loops."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.analysis.latency import analyze_latency, reduce_latency
from core.analysis.tables import TraceData


def pct(values, q):
    v = sorted(values)
    pos = q / 100 * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# step, rank, phase, seconds, batch_size, validate
TIMINGS = [
    (0, 0, "reward", 10.0, 4, False),
    (0, 1, "reward", 30.0, 4, False),
    (0, 2, "reward", 20.0, 4, False),
    (0, 3, "reward", 12.0, 4, False),
    (0, 0, "gen", 500.0, 4, False),  # another phase: ignored
    (0, 1, "reward", 999.0, 4, True),  # validation: ignored
    (1, 3, "reward", 7.0, 2, False),
    (1, 0, "reward", 5.0, 2, False),
]
# step, group, sample, tool, latency, status
CALLS = [
    (0, 0, 0, "search", 0.5, "success"),
    (0, 0, 0, "search", 1.5, "success"),
    (0, 0, 1, "python", 3.0, "error"),
    (0, 1, 0, "search", 0.1, "success"),
    (1, 0, 0, "python", 2.0, "success"),
    (1, 5, 0, "search", 100.0, "success"),  # (1,5,0) is validation
]


def make(steps=None) -> TraceData:
    t = list(zip(*TIMINGS))
    c = list(zip(*CALLS))
    tables = {
        "rank_timings": {
            "step": t[0],
            "rank": t[1],
            "phase": np.array(t[2]),
            "seconds": t[3],
            "batch_size": t[4],
            "validate": t[5],
        },
        "tool_calls": {
            "step": c[0],
            "group_idx": c[1],
            "sample_idx": c[2],
            "tool_name": np.array(c[3]),
            "latency_s": c[4],
            "status": np.array(c[5]),
        },
        "samples": {
            "step": [0, 0, 0, 1, 1],
            "group_idx": [0, 0, 1, 0, 5],
            "sample_idx": [0, 1, 0, 0, 0],
            "prompt_len": [1] * 5,
            "response_len": [1] * 5,
            "validate": [False, False, False, False, True],
        },
    }
    if steps:
        tables["steps"] = steps
    return TraceData.from_tables(tables)


def test_reward_per_step_and_rank():
    res = analyze_latency(make())
    assert [e["step"] for e in res["reward"]] == [0, 1]
    for e in res["reward"]:
        rows = sorted((r[1], r[3], r[4]) for r in TIMINGS if r[0] == e["step"] and r[2] == "reward" and not r[5])
        secs = [r[1] for r in rows]
        assert e["ranks"] == len(rows)
        assert e["rank"] == [r[0] for r in rows] and e["seconds"] == secs
        for q in (50, 90, 99):
            assert e[f"p{q}"] == pytest.approx(pct(secs, q))
        assert e["max"] == max(secs) and e["min"] == min(secs)
        assert e["max_over_mean"] == pytest.approx(max(secs) / (sum(secs) / len(secs)))
        assert e["per_sample_s"] == pytest.approx(sum(secs) / sum(r[2] for r in rows))
        assert e["share_of_step"] is None  # no step timings
    assert res["reward"][0]["max"] == 30.0  # the 999 s validation row is not counted


def test_reward_share_of_step_time():
    res = analyze_latency(
        make(steps={"step": [0, 1, 2], "t_step": [100.0, 50.0, 80.0], "t_reward": [31.0, float("nan"), 8.0]})
    )
    by_step = {e["step"]: e for e in res["reward"]}
    assert by_step[0]["share_of_step"] == pytest.approx(30.0 / 100.0)
    assert by_step[0]["measured_share_of_step"] == pytest.approx(31.0 / 100.0)
    assert by_step[1]["share_of_step"] == pytest.approx(7.0 / 50.0)
    assert by_step[1]["measured_share_of_step"] is None
    # step 2 only has the measured t_reward
    assert by_step[2]["ranks"] == 0 and by_step[2]["max"] is None
    assert by_step[2]["measured_share_of_step"] == pytest.approx(0.1)
    s = res["summary"]["reward"]
    assert s["share_of_step"]["max"] == pytest.approx(0.3)
    assert s["measured_share_of_step"]["mean"] == pytest.approx((0.31 + 0.1) / 2)


def test_tool_latency_per_step_and_tool():
    res = analyze_latency(make())
    assert [e["step"] for e in res["tools"]] == [0, 1]
    for e in res["tools"]:
        rows = [r for r in CALLS if r[0] == e["step"] and (r[1], r[2]) != (5, 0)]
        lat = [r[4] for r in rows]
        assert e["calls"] == len(rows)
        assert e["sum"] == pytest.approx(sum(lat)) and e["max"] == max(lat)
        assert e["p50"] == pytest.approx(pct(lat, 50)) and e["p99"] == pytest.approx(pct(lat, 99))
        assert e["errors"] == sum(r[5] != "success" for r in rows)
        tools = sorted({r[3] for r in rows})
        assert e["by_tool"]["tool"] == tools
        for j, name in enumerate(tools):
            tl = [r[4] for r in rows if r[3] == name]
            assert e["by_tool"]["calls"][j] == len(tl)
            assert e["by_tool"]["p90"][j] == pytest.approx(pct(tl, 90))
            assert e["by_tool"]["mean"][j] == pytest.approx(sum(tl) / len(tl))
    s = res["summary"]["tools"]
    assert s["calls"] == 5 and s["errors"] == 1 and s["max"] == 3.0
    assert s["by_tool"]["search"]["calls"] == 3
    assert s["by_tool"]["python"]["mean"] == pytest.approx(2.5)
    with_val = analyze_latency(make(), include_validation=True)
    assert with_val["summary"]["tools"]["max"] == 100.0


def test_json_and_reduce():
    data = make(steps={"step": [0, 1], "t_step": [100.0, 50.0]})
    whole = analyze_latency(data)
    json.dumps(whole, allow_nan=False)
    merged = reduce_latency([analyze_latency(data.select_steps(1, 2)), analyze_latency(data.select_steps(0, 1))])
    assert merged == whole


def test_nothing_to_read():
    res = analyze_latency(TraceData())
    assert res["reward"] == [] and res["tools"] == []
    assert res["summary"]["tools"]["calls"] == 0 and res["summary"]["reward"]["max"] is None


def test_unknown_times_are_skipped():
    data = TraceData.from_tables(
        {
            "rank_timings": {
                "step": [0, 0],
                "rank": [0, 1],
                "phase": np.array(["reward", "reward"]),
                "seconds": [4.0, float("nan")],
            },
            "tool_calls": {"step": [0, 0], "group_idx": [0, 0], "sample_idx": [0, 1], "latency_s": [float("nan"), 2.0]},
        }
    )
    res = analyze_latency(data)
    assert res["reward"][0]["ranks"] == 1 and res["reward"][0]["max"] == 4.0
    assert res["tools"][0]["calls"] == 1 and res["tools"][0]["p50"] == 2.0
