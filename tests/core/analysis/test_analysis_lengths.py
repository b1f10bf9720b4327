"""Length analysis on hand-made traces, checked against plain-Python computations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.analysis.lengths import analyze_lengths, hist_percentiles, reduce_lengths
from core.analysis.stats import LOG_BIN_EDGES
from core.analysis.tables import TraceData


def pct(values, q):
    """numpy's default 'linear' percentile, written out."""
    v = sorted(values)
    pos = q / 100 * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def bin_of(x):
    x = max(x, 1)
    for i in range(len(LOG_BIN_EDGES) - 1):
        if LOG_BIN_EDGES[i] <= x < LOG_BIN_EDGES[i + 1]:
            return i
    return len(LOG_BIN_EDGES) - 2


ROWS = [
    # step, group, sample, prompt, response, task, validate
    (0, 0, 0, 10, 100, 0, False),
    (0, 0, 1, 10, 300, 0, False),
    (0, 1, 0, 20, 50, 1, False),
    (0, 1, 1, 20, 1000, 1, False),
    (0, 2, 0, 99, 7, 0, True),
    (1, 0, 0, 12, 1000, 0, False),
    (1, 0, 1, 12, 40, 0, False),
    (1, 1, 0, 30, 200, 1, False),
    (1, 1, 1, 30, 1000, 1, False),
    (1, 1, 2, 30, 10, 1, False),
    (3, 0, 0, 5, 500, 1, False),
    (3, 0, 1, 5, 700, 1, False),
]


def make(rows=ROWS, **info) -> TraceData:
    cols = list(zip(*rows))
    return TraceData.from_tables(
        {
            "samples": {
                "step": np.array(cols[0]),
                "group_idx": np.array(cols[1]),
                "sample_idx": np.array(cols[2]),
                "prompt_len": np.array(cols[3]),
                "response_len": np.array(cols[4]),
                "task_id": np.array(cols[5]),
                "validate": np.array(cols[6]),
            }
        },
        **info,
    )


def test_per_step_stats_match_plain_python():
    res = analyze_lengths(make(), max_response_len=1000)
    assert [e["step"] for e in res["steps"]] == [0, 1, 3]
    for entry in res["steps"]:
        rows = [r for r in ROWS if r[0] == entry["step"] and not r[6]]
        resp = [r[4] for r in rows]
        prompt = [r[3] for r in rows]
        total = [r[3] + r[4] for r in rows]
        for name, vals in (("response", resp), ("prompt", prompt), ("total", total)):
            st = entry[name]
            mean = sum(vals) / len(vals)
            assert st["count"] == len(vals)
            assert st["mean"] == pytest.approx(mean)
            assert st["max"] == max(vals) and st["min"] == min(vals)
            assert st["tail_ratio"] == pytest.approx(max(vals) / mean)
            assert st["std"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals)))
            for q in (10, 50, 90, 99):
                assert st[f"p{q}"] == pytest.approx(pct(vals, q))
            expected_hist = [0] * (len(LOG_BIN_EDGES) - 1)
            for v in vals:
                expected_hist[bin_of(v)] += 1
            assert entry["hist"][name] == expected_hist
        assert entry["response"]["truncation_rate"] == pytest.approx(sum(v >= 1000 for v in resp) / len(resp))
        assert entry["prompt"]["truncation_rate"] is None
    assert res["max_response_len"] == 1000 and res["max_response_len_source"] == "param"


def test_validation_samples_are_kept_apart():
    res = analyze_lengths(make(), max_response_len=1000)
    assert [e["step"] for e in res["validation_steps"]] == [0]
    assert res["validation_steps"][0]["response"]["count"] == 1
    assert res["validation_steps"][0]["response"]["max"] == 7
    assert res["steps"][0]["response"]["count"] == 4  # the validation row is not in the training step
    assert res["summary"]["samples"] == 11


def test_per_task_entries():
    res = analyze_lengths(make(task_names={0: "math", 1: "code"}), max_response_len=1000)
    tasks = {t["task_id"]: t for t in res["tasks"]}
    assert tasks[0]["task"] == "math" and tasks[1]["task"] == "code"
    for tid, task in tasks.items():
        for e in task["steps"]:
            vals = [r[4] for r in ROWS if r[5] == tid and r[0] == e["step"] and not r[6]]
            assert e["response"]["count"] == len(vals)
            assert e["response"]["mean"] == pytest.approx(sum(vals) / len(vals))
        all_vals = [r[4] for r in ROWS if r[5] == tid and not r[6]]
        assert task["summary"]["response"]["count"] == len(all_vals)
        assert task["summary"]["response"]["max"] == max(all_vals)
        assert sum(task["hist"]["response"]) == len(all_vals)
    assert [e["step"] for e in tasks[1]["steps"]] == [0, 1, 3]


def test_drift_is_least_squares_over_steps():
    res = analyze_lengths(make(), max_response_len=1000)
    xs = [0, 1, 3]
    ys = [
        sum(r[4] for r in ROWS if r[0] == s and not r[6]) / sum(1 for r in ROWS if r[0] == s and not r[6]) for s in xs
    ]
    xm, ym = sum(xs) / 3, sum(ys) / 3
    slope = sum((x - xm) * (y - ym) for x, y in zip(xs, ys)) / sum((x - xm) ** 2 for x in xs)
    d = res["drift"]["response"]["mean"]
    assert d["slope"] == pytest.approx(slope)
    assert d["intercept"] == pytest.approx(ym - slope * xm)
    assert d["relative_change"] == pytest.approx((ys[-1] - ys[0]) / ys[0])
    f0, f1 = ym + slope * (0 - xm), ym + slope * (3 - xm)
    assert d["fitted_relative_change"] == pytest.approx((f1 - f0) / f0)
    assert res["drift"]["response"]["p99"]["n"] == 3


def test_pooled_summary_exact_moments_and_binned_percentiles():
    rng = np.random.default_rng(3)
    steps = np.repeat(np.arange(6), 500)
    resp = rng.lognormal(6, 1, len(steps)).astype(np.int64) + 1
    data = TraceData.from_tables(
        {
            "samples": {
                "step": steps,
                "group_idx": np.arange(len(steps)),
                "sample_idx": np.zeros(len(steps), int),
                "prompt_len": np.full(len(steps), 100),
                "response_len": resp,
            }
        }
    )
    res = analyze_lengths(data)
    s = res["summary"]["response"]
    vals = resp.tolist()
    mean = sum(vals) / len(vals)
    assert s["count"] == len(vals)
    assert s["mean"] == pytest.approx(mean)
    assert s["std"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals)))
    m3 = sum((v - mean) ** 3 for v in vals) / len(vals)
    assert s["skewness"] == pytest.approx(m3 / s["std"] ** 3, rel=1e-6)
    width = 2**0.25 * 1.01  # one log bin (edges are rounded to integers)
    for q in (10, 50, 90, 99):
        exact = pct(vals, q)
        assert exact / width <= s[f"p{q}"] <= exact * width
    assert s["percentile_method"] == "log-histogram"
    tails = [max(vals[i * 500 : (i + 1) * 500]) / (sum(vals[i * 500 : (i + 1) * 500]) / 500) for i in range(6)]
    assert res["summary"]["step_tail_ratio"]["max"] == pytest.approx(max(tails))
    assert res["summary"]["step_tail_ratio"]["min"] == pytest.approx(min(tails))


def test_truncation_cap_inferred_only_when_the_max_repeats():
    rows = [(0, 0, i, 10, v, 0, False) for i, v in enumerate([5, 64, 64, 20])] + [(1, 0, 0, 10, 30, 0, False)]
    res = analyze_lengths(make(rows))
    assert res["max_response_len"] == 64 and res["max_response_len_source"] == "inferred"
    assert res["steps"][0]["response"]["truncation_rate"] == pytest.approx(2 / 4)
    assert res["steps"][1]["response"]["truncation_rate"] == 0.0
    assert res["summary"]["response"]["truncation_rate"] == pytest.approx(2 / 5)

    rows[2] = (0, 0, 2, 10, 63, 0, False)  # now the max appears once: a natural tail, no cap
    res = analyze_lengths(make(rows))
    assert res["max_response_len"] is None
    assert res["steps"][0]["response"]["truncation_rate"] is None
    assert res["summary"]["response"]["truncation_rate"] is None


def test_the_stored_truncated_column_is_the_truncation():
    data = make()
    data.samples.truncated = np.array([r[4] == 1000 or r[4] == 7 for r in ROWS])
    res = analyze_lengths(data)
    assert res["truncation_basis"] == "trace" and res["max_response_len_source"] is None
    step1 = [r for r in ROWS if r[0] == 1]
    assert res["steps"][1]["response"]["truncation_rate"] == pytest.approx(sum(r[4] == 1000 for r in step1) / 5)


def test_trace_cap_used_when_no_param():
    res = analyze_lengths(make(max_response_len=300))
    assert res["max_response_len_source"] == "trace"
    resp0 = [r[4] for r in ROWS if r[0] == 0 and not r[6]]
    assert res["steps"][0]["response"]["truncation_rate"] == pytest.approx(sum(v >= 300 for v in resp0) / 4)


def test_result_is_strict_json_and_reduces_over_step_ranges():
    data = make()
    whole = analyze_lengths(data)
    json.dumps(whole, allow_nan=False)
    parts = [analyze_lengths(data.select_steps(0, 1)), analyze_lengths(data.select_steps(1, 10))]
    merged = reduce_lengths(parts[::-1])
    assert merged["max_response_len"] == whole["max_response_len"] == 1000
    assert [t["task_id"] for t in merged["tasks"]] == [0, 1]
    assert merged == whole


def test_empty_and_single_step():
    empty = TraceData()
    res = analyze_lengths(empty)
    assert res["steps"] == [] and res["summary"]["response"] == {"count": 0}
    assert res["drift"]["response"]["mean"]["slope"] is None
    one = analyze_lengths(make([(4, 0, 0, 3, 9, 0, False)]))
    assert one["steps"][0]["response"]["std"] == 0.0
    assert one["drift"]["response"]["mean"]["slope"] is None and one["drift"]["response"]["mean"]["first"] == 9.0


def test_hist_percentiles_within_bins():
    hist = [0] * (len(LOG_BIN_EDGES) - 1)
    i = int(np.searchsorted(LOG_BIN_EDGES, 100, side="right") - 1)
    hist[i] = 10
    p50 = hist_percentiles(hist, (50,))[0]
    assert LOG_BIN_EDGES[i] <= p50 <= LOG_BIN_EDGES[i + 1]
    assert hist_percentiles([0] * len(hist), (50,)) == [None]


def test_one_truncation_figure_even_with_a_cap():
    """Multi-turn: the engine stopped few trajectories for length while more sit exactly
    at the cap (the trajectory ends between turns). One figure: the stored column, which
    ingestion settled (stop reason where recorded), whatever the cap."""
    data = make(max_response_len=1000)
    data.samples.truncated = np.array([r[4] == 7 or (r[0], r[1], r[2]) == (1, 0, 0) for r in ROWS])
    res = analyze_lengths(data)
    assert res["truncation_basis"] == "trace" and res["max_response_len"] == 1000
    e = res["steps"][1]["response"]
    assert e["truncation_rate"] == pytest.approx(1 / 5)
    assert "truncation_rate_cap" not in e and "truncation_rate_flag" not in e
    train = [r for r in ROWS if not r[6]]
    assert res["summary"]["response"]["truncation_rate"] == pytest.approx(1 / len(train))
    data.samples.truncated = None  # no stored column: the share at the cap
    res = analyze_lengths(data)
    assert res["truncation_basis"] == "cap"
    step1 = [r for r in ROWS if r[0] == 1]
    assert res["steps"][1]["response"]["truncation_rate"] == pytest.approx(sum(r[4] >= 1000 for r in step1) / 5)
