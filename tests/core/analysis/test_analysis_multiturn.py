"""Multi-turn analysis on hand-made trajectories, checked by plain-Python loops."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from core.analysis.multiturn import analyze_multiturn, reduce_multiturn
from core.analysis.stats import LOG_BIN_EDGES
from core.analysis.tables import TraceData
from core.workload.polytrace_rows import TURN_COLUMNS

# (step, group, sample) -> turns [(prompt, cached, completion, tool_calls)]
TRAJ = {
    (0, 0, 0): [(300, 0, 40, 1), (1400, 340, 130, 0)],
    (0, 0, 1): [(300, 0, 50, 1), (1900, 350, 140, 1), (2600, 2000, 60, 2)],
    (0, 1, 0): [(500, 0, 900, 0)],
    (1, 0, 0): [(310, 0, 20, 1), (1000, 320, 10, 0)],
    (1, 2, 0): [(320, 100, 30, 0)],
}


def latency_of(p, c):
    return 2.0 + 0.001 * p + 0.05 * c


def turn_table(traj=TRAJ, with_counts=True):
    cols: dict[str, list] = {k: [] for k in TURN_COLUMNS}
    for key, turns in traj.items():
        for i, (p, ca, co, tc) in enumerate(turns):
            for name, v in zip(("step", "group_idx", "sample_idx"), key):
                cols[name].append(v)
            cols["turn"].append(i)
            cols["prompt_tokens"].append(p)
            cols["cached_tokens"].append(ca)
            cols["completion_tokens"].append(co)
            cols["engine_latency_s"].append(latency_of(p, co))
            cols["tool_call_count"].append(tc)
    if not with_counts:
        del cols["tool_call_count"]
    # shuffle rows: the analysis must not rely on input order
    order = np.random.default_rng(0).permutation(len(cols["turn"]))
    return {k: np.asarray(v)[order] for k, v in cols.items()}


def tool_table(traj=TRAJ):
    rows = [key for key, turns in traj.items() for t in turns for _ in range(t[3])]
    return {
        "step": [r[0] for r in rows],
        "group_idx": [r[1] for r in rows],
        "sample_idx": [r[2] for r in rows],
        "latency_s": [0.1] * len(rows),
    }


def test_turns_and_tool_calls_per_trajectory():
    res = analyze_multiturn(TraceData.from_tables({"turns": turn_table()}))
    assert [e["step"] for e in res["steps"]] == [0, 1]
    for e in res["steps"]:
        trajs = [t for k, t in TRAJ.items() if k[0] == e["step"]]
        n_turns = [len(t) for t in trajs]
        n_tools = [sum(x[3] for x in t) for t in trajs]
        assert e["trajectories"] == len(trajs)
        assert e["turns_mean"] == pytest.approx(sum(n_turns) / len(trajs))
        assert e["turns_max"] == max(n_turns)
        hist = Counter(n_turns)
        assert e["turns_hist"] == [hist.get(i, 0) for i in range(max(n_turns) + 1)]
        assert e["tool_calls_mean"] == pytest.approx(sum(n_tools) / len(trajs))
        th = Counter(n_tools)
        assert e["tool_calls_hist"] == [th.get(i, 0) for i in range(max(n_tools) + 1)]
    assert res["summary"]["turns_hist"] == [0, 2, 2, 1]
    assert res["summary"]["trajectories"] == 5


def test_tool_calls_counted_from_tool_call_rows():
    data = TraceData.from_tables({"turns": turn_table(with_counts=False), "tool_calls": tool_table()})
    res = analyze_multiturn(data)
    step0 = res["steps"][0]
    # trajectories (0,0,0): 1 call, (0,0,1): 4 calls, (0,1,0): 0 calls
    assert step0["tool_calls_hist"] == [1, 1, 0, 0, 1]
    assert step0["tool_calls_max"] == 4


def test_context_growth_and_prefix_cache():
    res = analyze_multiturn(TraceData.from_tables({"turns": turn_table()}))
    for e in res["steps"]:
        rows = [(i, t) for k, ts in TRAJ.items() if k[0] == e["step"] for i, t in enumerate(ts)]
        assert e["prompt_tokens"] == sum(t[0] for _, t in rows)
        assert e["cache_hit_rate"] == pytest.approx(sum(t[1] for _, t in rows) / sum(t[0] for _, t in rows))
        bt = e["by_turn"]
        for i in bt["turn"]:
            at = [t for j, t in rows if j == i]
            assert bt["count"][i] == len(at)
            assert bt["prompt_mean"][i] == pytest.approx(sum(t[0] for t in at) / len(at))
            assert bt["cache_hit_rate"][i] == pytest.approx(sum(t[1] for t in at) / sum(t[0] for t in at))
    s = res["summary"]["by_turn"]
    all_rows = [(i, t) for ts in TRAJ.values() for i, t in enumerate(ts)]
    assert s["prompt_mean"][1] == pytest.approx(sum(t[0] for i, t in all_rows if i == 1) / 3)
    assert s["prompt_mean"][0] < s["prompt_mean"][1] < s["prompt_mean"][2]  # context grows
    assert res["summary"]["cache_hit_rate"] == pytest.approx(
        sum(t[1] for _, t in all_rows) / sum(t[0] for _, t in all_rows)
    )


def test_latency_fit_recovers_an_exact_line_and_bins_average():
    res = analyze_multiturn(TraceData.from_tables({"turns": turn_table()}))
    fit = res["summary"]["latency_fit"]
    assert fit["n"] == 9
    assert fit["a"] == pytest.approx(2.0, abs=1e-6)
    assert fit["b"] == pytest.approx(0.001, rel=1e-6)
    assert fit["c"] == pytest.approx(0.05, rel=1e-6)
    assert fit["r2"] == pytest.approx(1.0)
    bins = res["summary"]["latency_by_completion"]
    rows = [t for ts in TRAJ.values() for t in ts]
    for lo, hi, n, mean in zip(bins["bin_lo"], bins["bin_hi"], bins["count"], bins["latency_mean"]):
        inside = [latency_of(t[0], t[2]) for t in rows if lo <= t[2] < hi]
        assert n == len(inside) and mean == pytest.approx(sum(inside) / len(inside))
    assert sum(bins["count"]) == 9
    assert set(bins["bin_lo"]) <= set(LOG_BIN_EDGES.tolist())


def test_validation_trajectories_left_out():
    samples = {
        "step": [1],
        "group_idx": [2],
        "sample_idx": [0],
        "prompt_len": [320],
        "response_len": [30],
        "validate": [True],
    }
    res = analyze_multiturn(TraceData.from_tables({"turns": turn_table(), "samples": samples}))
    assert res["steps"][1]["trajectories"] == 1
    res = analyze_multiturn(TraceData.from_tables({"turns": turn_table(), "samples": samples}), include_validation=True)
    assert res["steps"][1]["trajectories"] == 2


def test_samples_only_fallback():
    samples = {
        "step": [0, 0, 1],
        "group_idx": [0, 1, 0],
        "sample_idx": [0, 0, 0],
        "prompt_len": [1, 1, 1],
        "response_len": [1, 1, 1],
        "num_turns": [1, 3, 2],
        "num_tool_calls": [0, 2, 1],
    }
    res = analyze_multiturn(TraceData.from_tables({"samples": samples}))
    assert res["steps"][0]["turns_hist"] == [0, 1, 0, 1] and res["steps"][0]["tool_calls_mean"] == 1.0
    assert res["steps"][0]["by_turn"] is None
    assert res["summary"]["turns_mean"] == pytest.approx(2.0)
    assert res["summary"]["cache_hit_rate"] is None


def test_json_and_reduce():
    data = TraceData.from_tables({"turns": turn_table(), "tool_calls": tool_table()})
    whole = analyze_multiturn(data)
    json.dumps(whole, allow_nan=False)
    merged = reduce_multiturn([analyze_multiturn(data.select_steps(1, 2)), analyze_multiturn(data.select_steps(0, 1))])
    assert merged["steps"] == whole["steps"]
    assert merged["summary"]["by_turn"] == whole["summary"]["by_turn"]
    for k in ("a", "b", "c", "r2"):
        assert merged["summary"]["latency_fit"][k] == pytest.approx(whole["summary"]["latency_fit"][k])


def test_tool_calls_per_trajectory_come_from_the_trajectory_not_summed_turn_counts():
    """Search-R1 records per-turn tool_call_count that does not count the turn's calls
    (a 2-turn trajectory with 12 calls has [1, 42]); the trajectory-level count is used."""
    traj = {(0, 0, 0): [(300, 0, 40, 1), (1400, 340, 130, 42)], (0, 0, 1): [(300, 0, 40, 1)]}
    calls = {(0, 0, 0): 12, (0, 0, 1): 1}
    turns = turn_table(traj)
    rows = [k for k, c in calls.items() for _ in range(c)]
    tool_calls = {
        "step": [r[0] for r in rows],
        "group_idx": [r[1] for r in rows],
        "sample_idx": [r[2] for r in rows],
        "latency_s": [0.1] * len(rows),
    }
    samples = {
        "step": [0, 0],
        "group_idx": [0, 0],
        "sample_idx": [0, 1],
        "prompt_len": [300, 300],
        "response_len": [1, 1],
        "num_turns": [2, 1],
        "num_tool_calls": [12, 1],
    }
    for tables, basis in (
        ({"turns": turns, "tool_calls": tool_calls}, "tool_calls"),
        ({"turns": turns, "samples": samples}, "samples"),
        ({"turns": turns, "tool_calls": tool_calls, "samples": samples}, "tool_calls"),
    ):
        res = analyze_multiturn(TraceData.from_tables(tables))
        step0 = res["steps"][0]
        assert step0["tool_calls_max"] == 12, basis
        assert step0["tool_calls_mean"] == pytest.approx(6.5)
        assert step0["tool_calls_hist"][12] == 1 and step0["tool_calls_hist"][1] == 1
        assert step0["tool_calls_basis"] == basis and res["summary"]["tool_calls_basis"] == basis
