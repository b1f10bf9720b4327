"""Rollout long tail: the slot model's figures against a tick-by-tick simulation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.analysis.longtail import analyze_longtail, reduce_longtail
from core.analysis.tables import TraceData

# step -> engine -> response lengths
TRACE = {
    0: {0: [1, 2, 3, 4, 5, 6, 7, 8, 9, 40], 1: [5, 5]},
    1: {0: [10, 10, 10], 1: [2, 30], 2: [7]},
    2: {1: [0, 4]},
}


def make(trace=TRACE, validation=None, steps_table=None) -> TraceData:
    rows = [(s, e, x) for s, engines in trace.items() for e, xs in engines.items() for x in xs]
    val = [False] * len(rows)
    if validation:
        rows += validation
        val += [True] * len(validation)
    step, eng, resp = (np.array(c) for c in zip(*rows))
    tables = {
        "samples": {
            "step": step,
            "group_idx": np.arange(len(rows)),
            "sample_idx": np.zeros(len(rows), int),
            "prompt_len": np.ones(len(rows), int),
            "response_len": resp,
            "dp_rank": eng,
            "rank": eng * 4,
            "validate": np.array(val),
        }
    }
    if steps_table:
        tables["steps"] = steps_table
    return TraceData.from_tables(tables)


def simulate(engines: dict[int, list[int]]):
    """Tick by tick: every sample decodes one token per tick from t=0; returns the idle
    engine-time (engine busy in proportion to its running samples) and per-engine idle."""
    T = max(max(xs) for xs in engines.values())
    idle = 0.0
    for t in range(T):
        for xs in engines.values():
            running = sum(1 for x in xs if x > t)
            idle += 1 - running / len(xs)
    return T, idle


def tail_share(xs, f=0.1):
    """Time from when (1-f) of the samples have finished to the end, over the end."""
    xs = sorted(xs)
    end = xs[-1]
    for t in range(end + 1):
        if sum(1 for x in xs if x <= t) >= (1 - f) * len(xs) - 1e-9:
            return (end - t) / end if end else 0.0


def test_step_figures_match_simulation():
    res = analyze_longtail(make())
    assert [e["step"] for e in res["steps"]] == [0, 1, 2]
    for entry in res["steps"]:
        engines = TRACE[entry["step"]]
        T, idle = simulate(engines)
        lengths = [x for xs in engines.values() for x in xs]
        assert entry["rollout_len"] == T
        assert entry["engines"] == len(engines)
        assert entry["samples"] == len(lengths) and entry["tokens"] == sum(lengths)
        assert entry["idle_token_time"] == pytest.approx(idle)
        assert entry["engine_time"] == len(engines) * T
        assert entry["idle_fraction"] == pytest.approx(idle / (len(engines) * T))
        within = sum(max(xs) - sum(xs) / len(xs) for xs in engines.values())
        waiting = sum(T - max(xs) for xs in engines.values())
        assert entry["idle_within_engines"] == pytest.approx(within)
        assert entry["idle_waiting"] == pytest.approx(waiting)
        assert entry["tail_time_share"] == pytest.approx(tail_share(lengths))
        assert entry["tail_sample_share"] == pytest.approx(sum(1 for x in lengths if x > 0.9 * T) / len(lengths))


def test_engine_columns():
    res = analyze_longtail(make())
    eng = res["steps"][0]["engine"]
    assert eng["engine"] == [0, 1]
    xs = TRACE[0][0]
    assert eng["idle_fraction"][0] == pytest.approx(1 - sum(xs) / (len(xs) * max(xs)))
    assert eng["idle_fraction"][1] == 0.0
    assert eng["tail_time_share"][0] == pytest.approx(tail_share(xs))  # 9 of 10 done at t=9: (40-9)/40
    assert eng["tail_time_share"][0] == pytest.approx(31 / 40)
    assert eng["max_len"] == [40, 5] and eng["samples"] == [10, 2]
    assert res["steps"][0]["engine_idle_fraction_max"] == pytest.approx(1 - 85 / 400)


def test_engine_key_rank_and_none():
    by_rank = analyze_longtail(make(), engine_key="rank")
    assert by_rank["engine_key"] == "rank"
    assert by_rank["steps"][0]["engine"]["engine"] == [0, 4]
    one = analyze_longtail(make(), engine_key=None)
    assert one["engine_key"] is None
    step0 = [x for xs in TRACE[0].values() for x in xs]
    assert one["steps"][0]["engines"] == 1
    assert one["steps"][0]["idle_fraction"] == pytest.approx(1 - sum(step0) / (len(step0) * max(step0)))


def test_seconds_scale_with_t_gen_and_validation_is_ignored():
    data = make(validation=[(0, 0, 1000)], steps_table={"step": [0, 1], "t_gen": [80.0, float("nan")]})
    res = analyze_longtail(data)
    e0, e1 = res["steps"][0], res["steps"][1]
    assert e0["rollout_len"] == 40  # the validation sample of length 1000 is not counted
    assert e0["t_gen"] == 80.0
    assert e0["idle_engine_seconds"] == pytest.approx(e0["idle_token_time"] * 80.0 / 40)
    assert e0["tail_seconds"] == pytest.approx(e0["tail_time_share"] * 80.0)
    assert e1["t_gen"] is None and e1["idle_engine_seconds"] is None
    assert res["summary"]["timed_steps"] == 1
    assert res["summary"]["idle_engine_seconds"] == pytest.approx(e0["idle_engine_seconds"])
    with_val = analyze_longtail(data, include_validation=True)
    assert with_val["steps"][0]["rollout_len"] == 1000


def test_summary_and_reduce():
    data = make()
    res = analyze_longtail(data)
    json.dumps(res, allow_nan=False)
    fr = [e["idle_fraction"] for e in res["steps"]]
    assert res["summary"]["idle_fraction"]["mean"] == pytest.approx(sum(fr) / 3)
    assert res["summary"]["idle_fraction"]["max"] == pytest.approx(max(fr))
    assert res["summary"]["idle_token_time"] == pytest.approx(sum(e["idle_token_time"] for e in res["steps"]))
    merged = reduce_longtail([analyze_longtail(data.select_steps(1, 3)), analyze_longtail(data.select_steps(0, 1))])
    assert merged == res


def test_random_traces_against_simulation():
    rng = np.random.default_rng(7)
    for _ in range(20):
        trace = {
            s: {e: rng.integers(1, 60, rng.integers(1, 12)).tolist() for e in range(rng.integers(1, 4))}
            for s in range(3)
        }
        res = analyze_longtail(make(trace), tail_fraction=0.25)
        for entry in res["steps"]:
            T, idle = simulate(trace[entry["step"]])
            assert entry["idle_token_time"] == pytest.approx(idle)
            lengths = [x for xs in trace[entry["step"]].values() for x in xs]
            assert entry["tail_time_share"] == pytest.approx(tail_share(lengths, 0.25))
            assert math.isclose(entry["tail_sample_share"], sum(x > 0.75 * T for x in lengths) / len(lengths))


def test_measured_completion_times_are_the_basis_when_every_sample_has_them():
    """Multi-turn traces carry measured engine latencies (samples.latency_s) and tool
    latencies; the tail is then computed from completion time, not tokens."""
    n = 20
    response = np.arange(1, n + 1) * 10  # token order: sample 19 is the longest
    engine_s = np.linspace(100.0, 10.0, n)  # ... but sample 0 takes the longest time
    samples = {
        "step": np.zeros(n, int),
        "group_idx": np.arange(n),
        "sample_idx": np.zeros(n, int),
        "prompt_len": np.ones(n, int),
        "response_len": response,
        "latency_s": engine_s,
    }
    tool_calls = {"step": [0, 0], "group_idx": [5, 5], "sample_idx": [0, 0], "latency_s": [30.0, 40.0]}
    res = analyze_longtail(TraceData.from_tables({"samples": samples, "tool_calls": tool_calls}))
    assert res["basis"] == "time" and res["steps"][0]["basis"] == "time"
    times = engine_s.copy()
    times[5] += 70.0
    ts = np.sort(times)
    k = math.ceil(0.9 * n)
    e = res["steps"][0]
    assert e["rollout_len"] == pytest.approx(ts[-1])
    assert e["tail_time_share"] == pytest.approx((ts[-1] - ts[k - 1]) / ts[-1])
    assert e["idle_fraction"] == pytest.approx(1 - times.sum() / (n * ts[-1]))
    assert e["tail_seconds"] == pytest.approx(ts[-1] - ts[k - 1])
    # without a latency for every sample: tokens, as before
    samples["latency_s"] = np.where(np.arange(n) == 3, np.nan, engine_s)
    assert analyze_longtail(TraceData.from_tables({"samples": samples}))["basis"] == "tokens"


def test_ties_at_the_cap_are_flagged_not_reported_as_a_short_tail():
    """DeepCoder: more than 10% of the samples stop at the 16k cap, so the last 10% of
    samples all end at the same moment and their 'share of rollout time' is 0."""
    lengths = [100 * i for i in range(1, 18)] + [16384] * 3  # 3 of 20 (15%) at the cap
    res = analyze_longtail(make({0: {0: lengths}}))
    e = res["steps"][0]
    assert e["tail_time_share"] == 0.0
    assert e["at_max_share"] == pytest.approx(0.15) and e["tail_tied"] is True
    assert res["summary"]["tail_tied_steps"] == 1
    e = analyze_longtail(make({0: {0: lengths[:-2]}}))["steps"][0]  # one at the max: a real tail
    assert e["tail_tied"] is False and e["tail_time_share"] > 0
