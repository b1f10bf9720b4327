"""The analyses on real PolyTrace fixtures (the paper's published shape) and the registry
(chunked runs equal whole runs, default analyses) on the real and the synthetic traces.

Fixture files are read here directly with orjson (not through the project's readers), and
every figure the analyses report is recomputed in plain Python.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import MISSING, fields
from pathlib import Path

import numpy as np
import orjson
import pytest

from core.analysis.registry import (
    ANALYSES,
    chunk_ranges,
    default_analyses,
    resolve_params,
    run_analysis,
    run_analysis_chunked,
)
from core.analysis.tables import TABLE_CLASSES, TraceData
from core.workload.polytrace_rows import TURN_COLUMNS
from core.workload.synthetic import packed_length_rows

PACKED = ("verl_video_qwen2_5_vl_7b", "verl_dapo_qwen2_5_32b", "rllm_deepcoder_14b_16k")


def read_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def packed_rows(folder: Path) -> list[dict]:
    return [r for f in sorted(folder.glob("packed_lengths_step_*.jsonl")) for r in read_jsonl(f)]


def packed_trace(rows: list[dict], reward_rows: list[dict] = ()) -> TraceData:
    cols = defaultdict(list)
    per_step = defaultdict(int)
    for r in rows:
        g = per_step[r["step"]]
        per_step[r["step"]] += 1
        for i, out in enumerate(r["output"]):
            cols["step"].append(r["step"])
            cols["group_idx"].append(g)
            cols["sample_idx"].append(i)
            cols["prompt_len"].append(r["input"])
            cols["response_len"].append(out)
            cols["dp_rank"].append(r["dp_rank"])
            cols["rank"].append(r["rank"])
            cols["validate"].append(r["validate"])
    tables = {"samples": {k: np.asarray(v) for k, v in cols.items()}}
    if reward_rows:
        tables["rank_timings"] = {
            "step": [r["step"] for r in reward_rows],
            "rank": [r["rank"] for r in reward_rows],
            "dp_rank": [r["dp_rank"] for r in reward_rows],
            "phase": np.array(["reward"] * len(reward_rows)),
            "seconds": [r["reward_time_s"] for r in reward_rows],
            "batch_size": [r["batch_size"] for r in reward_rows],
            "validate": [r["validate"] for r in reward_rows],
        }
    return TraceData.from_tables(tables)


def multiturn_records(folder: Path) -> list[dict]:
    return [r for f in sorted(folder.glob("multiturn_workload_step_*.jsonl")) for r in read_jsonl(f)]


def multiturn_trace(records: list[dict]) -> TraceData:
    s, t, c = defaultdict(list), defaultdict(list), defaultdict(list)
    for r in records:
        key = (r["step"], r["prompt_group_id"], r["sample_id"])
        for name, v in zip(("step", "group_idx", "sample_idx"), key):
            s[name].append(v)
        s["prompt_len"].append(r["prompt_len"])
        s["response_len"].append(r["final_response_len"])
        s["validate"].append(r["validate"])
        for turn in r["turns"]:
            for name, v in zip(("step", "group_idx", "sample_idx"), key):
                t[name].append(v)
            for name in TURN_COLUMNS[3:]:  # after step, group_idx, sample_idx
                t[name].append(turn[name])
        for call in r["tool_calls"]:
            for name, v in zip(("step", "group_idx", "sample_idx"), key):
                c[name].append(v)
            c["tool_name"].append(call["tool_name"])
            c["latency_s"].append(call["latency_s"])
            c["status"].append(call["status"])
    tables = {
        name: {k: np.asarray(v) for k, v in cols.items()}
        for name, cols in (("samples", s), ("turns", t), ("tool_calls", c))
    }
    return TraceData.from_tables(tables, max_response_len=records[0]["max_response_len"])


def step_tail_ratios(rows):
    by_step = defaultdict(list)
    for r in rows:
        by_step[r["step"]].extend(r["output"])
    return {s: max(v) / (sum(v) / len(v)) for s, v in by_step.items()}


def dp_token_loads(rows):
    loads = defaultdict(lambda: defaultdict(int))
    for r in rows:
        loads[r["step"]][r["dp_rank"]] += sum(r["input"] + o for o in r["output"])
    return loads


# --------------------------------------------------------------------------- real fixtures

# per-step response max/mean (min, max over steps) and the largest per-step DP max/min
# token load, computed from the files with the plain loops above
EXPECTED = {
    "verl_video_qwen2_5_vl_7b": {"tail": (1.942, 81.673), "dp_max_over_min": 1.269},
    "verl_dapo_qwen2_5_32b": {"tail": (6.672, 18.459), "dp_max_over_min": 1.096},
    "rllm_deepcoder_14b_16k": {"tail": (1.400, 2.102), "dp_max_over_min": 1.839},
}


@pytest.mark.parametrize("name", PACKED)
def test_response_tail_ratio_per_step(shared_fixtures, name):
    rows = packed_rows(shared_fixtures / "polytrace" / name)
    expected = step_tail_ratios(rows)
    res = run_analysis("lengths", packed_trace(rows))
    got = {e["step"]: e["response"]["tail_ratio"] for e in res["steps"]}
    assert got.keys() == expected.keys()
    for s in expected:
        assert got[s] == pytest.approx(expected[s])
    lo, hi = EXPECTED[name]["tail"]
    assert min(got.values()) == pytest.approx(lo, abs=1e-3)
    assert max(got.values()) == pytest.approx(hi, abs=1e-3)
    # the paper's shape: skewed, long-tailed; the video trace spans ~2x to ~80x
    assert all(v > 1.3 for v in got.values())
    json.dumps(res, allow_nan=False)


def test_paper_range_of_tail_ratios(shared_fixtures):
    root = shared_fixtures / "polytrace"
    ratios = [v for name in PACKED for v in step_tail_ratios(packed_rows(root / name)).values()]
    assert 1.3 < min(ratios) < 2.0 and 80 < max(ratios) < 85


@pytest.mark.parametrize("name", PACKED)
def test_dp_token_imbalance(shared_fixtures, name):
    rows = packed_rows(shared_fixtures / "polytrace" / name)
    loads = dp_token_loads(rows)
    res = run_analysis("imbalance", packed_trace(rows))
    for e in res["steps"]:
        per_rank = loads[e["step"]]
        assert e["tokens"]["recorded"] == [per_rank[k] for k in sorted(per_rank)]
        assert e["tokens"]["max_over_min"] == pytest.approx(max(per_rank.values()) / min(per_rank.values()))
    worst = res["summary"]["tokens"]["max_over_min"]["max"]
    assert worst == pytest.approx(EXPECTED[name]["dp_max_over_min"], abs=1e-3)
    assert worst < 1.9  # "max/min up to ~1.9 per step"
    # balancing whole prompt groups brings every step to within a few percent
    assert res["summary"]["tokens"]["kk_max_over_min"]["max"] < 1.03
    assert res["summary"]["tokens"]["lpt_max_over_min"]["max"] < 1.04


def test_deepcoder_truncation_and_reward_time(shared_fixtures):
    folder = shared_fixtures / "polytrace" / "rllm_deepcoder_14b_16k"
    rows = packed_rows(folder)
    reward = [r for f in sorted(folder.glob("reward_timings_step_*.jsonl")) for r in read_jsonl(f)]
    data = packed_trace(rows, reward)
    lengths = run_analysis("lengths", data)
    outs = [o for r in rows for o in r["output"]]
    assert lengths["max_response_len"] == 16000 and lengths["max_response_len_source"] == "inferred"
    assert lengths["summary"]["response"]["truncation_rate"] == pytest.approx(
        sum(o >= 16000 for o in outs) / len(outs)
    )  # 59 of 384
    lat = run_analysis("latency", data)
    for e in lat["reward"]:
        secs = {r["rank"]: r["reward_time_s"] for r in reward if r["step"] == e["step"]}
        assert e["seconds"] == [secs[k] for k in sorted(secs)]
        assert e["max"] == max(secs.values())
        assert e["max_over_mean"] == pytest.approx(max(secs.values()) / (sum(secs.values()) / len(secs)))
        batch = sum(r["batch_size"] for r in reward if r["step"] == e["step"])
        assert e["per_sample_s"] == pytest.approx(sum(secs.values()) / batch)
        assert e["share_of_step"] is None  # the fixture has no step timings
    assert lat["summary"]["reward"]["max"]["max"] == pytest.approx(113.013, abs=1e-3)
    assert lat["summary"]["reward"]["max_over_mean"]["max"] == pytest.approx(1.446, abs=1e-3)


@pytest.mark.parametrize("name", PACKED)
def test_rollout_long_tail(shared_fixtures, name):
    rows = packed_rows(shared_fixtures / "polytrace" / name)
    res = run_analysis("longtail", packed_trace(rows))
    by_step = defaultdict(list)
    for r in rows:
        by_step[r["step"]].extend(r["output"])
    for e in res["steps"]:
        xs = sorted(by_step[e["step"]])
        t90 = xs[math.ceil(0.9 * len(xs)) - 1]
        assert e["tail_time_share"] == pytest.approx((xs[-1] - t90) / xs[-1])
        assert e["rollout_len"] == xs[-1]
        assert 0.0 <= e["idle_fraction"] <= 1.0


def test_search_r1_multiturn_and_tools(shared_fixtures):
    records = multiturn_records(shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b")
    data = multiturn_trace(records)
    res = run_analysis("multiturn", data)
    train = [r for r in records if not r["validate"]]
    turns = [t for r in train for t in r["turns"]]
    assert res["summary"]["trajectories"] == len(train)
    assert res["summary"]["turns_mean"] == pytest.approx(sum(r["turn_count"] for r in train) / len(train))
    assert res["summary"]["cache_hit_rate"] == pytest.approx(
        sum(t["cached_tokens"] for t in turns) / sum(t["prompt_tokens"] for t in turns)
    )
    growth = res["summary"]["by_turn"]["prompt_mean"]
    assert all(a < b for a, b in zip(growth, growth[1:]))  # context grows turn by turn
    json.dumps(res, allow_nan=False)

    lat = run_analysis("latency", data)
    for e in lat["tools"]:
        xs = sorted(c["latency_s"] for r in train if r["step"] == e["step"] for c in r["tool_calls"])
        assert e["calls"] == len(xs) and e["max"] == xs[-1]
        assert e["p50"] == pytest.approx(float(np.percentile(xs, 50)))


@pytest.mark.parametrize("kind", [k for k, spec in ANALYSES.items() if spec.reduce is not None])
def test_chunked_equals_whole_on_real_traces(shared_fixtures, kind):
    root = shared_fixtures / "polytrace"
    traces = [packed_trace(packed_rows(root / name)) for name in PACKED[:2]]
    traces.append(multiturn_trace(multiturn_records(root / "search_r1_qwen2_5_7b")))
    for data in traces:
        whole = run_analysis(kind, data)
        chunked = run_analysis_chunked(kind, data.split_steps(3))
        whole.pop("params"), chunked.pop("params")
        assert_close(chunked, whole)


# --------------------------------------------------------------------------- registry


def synthetic_trace(steps=6, groups=24) -> TraceData:
    rows = [
        r for batch in packed_length_rows(steps, groups, 4, dp_size=4, max_response_len=4096, seed=1) for r in batch
    ]
    return packed_trace(rows)


def assert_close(a, b, path="$"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9), path
    else:
        assert a == b, path


@pytest.mark.parametrize("kind", ["lengths", "longtail", "imbalance"])
def test_chunked_equals_whole_on_synthetic(kind):
    data = synthetic_trace()
    whole = run_analysis(kind, data)
    for n in (1, 2, 4, 6):
        chunked = run_analysis_chunked(kind, data.split_steps(n))
        assert chunked["params"].items() >= {k: v for k, v in whole["params"].items() if k != "dp_size"}.items()
        chunked.pop("params")
        assert_close(chunked, {k: v for k, v in whole.items() if k != "params"})


def test_chunk_ranges_cover_steps_once():
    steps = np.array([0, 0, 1, 5, 6, 7, 9, 9])
    ranges = chunk_ranges(steps, 3)
    assert len(ranges) == 3
    for s in set(steps.tolist()):
        assert sum(lo <= s < hi for lo, hi in ranges) == 1
    assert chunk_ranges(np.array([3]), 5) == [(3, 4)]


def test_default_analyses_follow_available_tables():
    single_turn = {"samples": {"step", "group_idx", "sample_idx", "prompt_len", "response_len", "dp_rank"}}
    assert default_analyses(single_turn) == ["lengths", "longtail", "imbalance"]
    no_dp = {"samples": {"step", "group_idx", "sample_idx", "prompt_len", "response_len"}}
    assert default_analyses(no_dp) == ["lengths", "longtail"]
    multi = {
        **single_turn,
        "turns": {"step", "group_idx", "sample_idx", "turn", "prompt_tokens"},
        "tool_calls": {"step", "group_idx", "sample_idx", "latency_s"},
    }
    # no gpu events, no DAPO marks and no rewards
    skipped = ("gpu_timeline", "data_efficiency", "reward_length")
    assert default_analyses(multi) == [k for k in ANALYSES if k not in skipped]
    dapo = {"samples": single_turn["samples"] | {"filter_mark", "trainer_step"}}
    assert default_analyses(dapo) == ["lengths", "longtail", "imbalance", "data_efficiency"]
    kineto = {
        "gpu_events": {"rank", "stream", "step", "kind", "name_id", "start_us", "dur_us", "launch_us"},
        "steps": {"step"},
    }
    assert default_analyses(kineto) == ["gpu_timeline"]
    with_reward = {**single_turn, "rank_timings": {"step", "rank", "phase", "seconds"}}
    assert "latency" in default_analyses(with_reward) and "multiturn" not in default_analyses(with_reward)


def test_params_are_checked_and_recorded():
    assert resolve_params("longtail", {"tail_fraction": 0.2})["tail_fraction"] == 0.2
    with pytest.raises(ValueError, match="unknown parameter"):
        resolve_params("longtail", {"tail_fracton": 0.2})
    with pytest.raises(ValueError, match="unknown analysis"):
        run_analysis("nope", TraceData())
    res = run_analysis("longtail", synthetic_trace(2, 8), {"tail_fraction": 0.2})
    assert res["params"]["tail_fraction"] == 0.2 and res["tail_fraction"] == 0.2
    json.dumps(res, allow_nan=False)


def test_spec_tables_include_each_tables_required_columns():
    for kind, spec in ANALYSES.items():
        for table, cols in spec.tables.items():
            if table not in TABLE_CLASSES:  # kineto_events: the kept Kineto files, not columns
                continue
            required = {f.name for f in fields(TABLE_CLASSES[table]) if f.default is MISSING}
            assert required <= set(cols), (kind, table, required - set(cols))
