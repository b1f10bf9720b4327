"""Data efficiency (DAPO dynamic sampling) recomputed from the synthetic run's raw lines
with plain Python, and the groups='used' restriction of lengths and imbalance."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from helpers import dapo_run

from core.analysis.data_efficiency import analyze_data_efficiency, reduce_data_efficiency
from core.analysis.imbalance import analyze_imbalance
from core.analysis.lengths import analyze_lengths
from core.analysis.registry import ANALYSES, run_analysis, run_analysis_chunked
from core.analysis.tables import TraceData


def trace(packed, filt) -> TraceData:
    marks = {}
    for line in filt:
        for g in range(line["prompt_count"]):
            used, kept = g in line["used_prompt_indices"], g in line["kept_prompt_indices"]
            marks[(line["workload_step"], g)] = (2 if used else 1 if kept else 0, line["trainer_step"])
    cols = defaultdict(list)
    for rows in packed:
        for g, r in enumerate(rows):
            for i, out in enumerate(r["output"]):
                mark, trainer = marks[(r["step"], g)]
                for k, v in (
                    ("step", r["step"]),
                    ("group_idx", g),
                    ("sample_idx", i),
                    ("prompt_len", r["input"]),
                    ("response_len", out),
                    ("dp_rank", r["dp_rank"]),
                    ("filter_mark", mark),
                    ("trainer_step", trainer),
                ):
                    cols[k].append(v)
    return TraceData.from_tables({"samples": {k: np.asarray(v) for k, v in cols.items()}})


def expected(packed, filt) -> list[dict]:
    by_trainer: dict = {}
    for line in filt:
        rows = packed[line["workload_step"]]
        t = by_trainer.setdefault(
            line["trainer_step"],
            {"generation_steps": [], "generated": 0, "kept": 0, "used": 0, "samples_used": 0, "tok": 0, "tok_used": 0},
        )
        t["generation_steps"].append(line["workload_step"])
        t["generated"] += len(rows)
        t["kept"] += len(line["kept_prompt_indices"])
        t["used"] += len(line["used_prompt_indices"])
        t["samples_used"] += sum(len(rows[g]["output"]) for g in line["used_prompt_indices"])
        t["tok"] += sum(sum(r["output"]) for r in rows)
        t["tok_used"] += sum(sum(rows[g]["output"]) for g in line["used_prompt_indices"])
    return [dict(trainer_step=k, **v) for k, v in sorted(by_trainer.items())]


def test_generated_kept_used_per_trainer_step():
    packed, filt = dapo_run()
    res = analyze_data_efficiency(trace(packed, filt))
    want = expected(packed, filt)
    assert len(res["steps"]) == len(want) and len(want) >= 2
    for got, w in zip(res["steps"], want):
        assert got["trainer_step"] == w["trainer_step"]
        assert got["generation_steps"] == w["generation_steps"]
        assert got["groups_generated"] == w["generated"]
        assert got["groups_kept"] == w["kept"]
        assert got["groups_used"] == w["used"]
        assert got["samples_used"] == w["samples_used"]
        assert got["response_tokens_generated"] == w["tok"]
        assert got["response_tokens_used"] == w["tok_used"]
        assert got["used_token_share"] == pytest.approx(w["tok_used"] / w["tok"])
    s = res["summary"]
    assert s["used_token_share"] == pytest.approx(sum(w["tok_used"] for w in want) / sum(w["tok"] for w in want))
    # rollout time of never-used groups: per generation step, time ~ longest response,
    # split by tokens
    num = den = 0.0
    for line in filt:
        rows = packed[line["workload_step"]]
        longest = max(o for r in rows for o in r["output"])
        total = sum(sum(r["output"]) for r in rows)
        used = sum(sum(rows[g]["output"]) for g in line["used_prompt_indices"])
        num += longest * (total - used) / total
        den += longest
    assert s["unused_rollout_time_share"] == pytest.approx(num / den)
    assert "longest sample" in s["time_estimate"]
    json.dumps(res, allow_nan=False)


def test_chunked_equals_whole_even_when_a_trainer_step_is_split():
    packed, filt = dapo_run(gen_steps=7, train_batch_size=9)
    data = trace(packed, filt)
    whole = run_analysis("data_efficiency", data)
    for n in (2, 3, 7):
        chunked = run_analysis_chunked("data_efficiency", data.split_steps(n))
        assert chunked["steps"] == whole["steps"] and chunked["summary"] == whole["summary"]
    assert reduce_data_efficiency([analyze_data_efficiency(data)])["steps"] == whole["steps"]


def test_applicable_only_with_marks():
    spec = ANALYSES["data_efficiency"]
    base = {"samples": {"step", "group_idx", "sample_idx", "prompt_len", "response_len"}}
    assert not spec.applicable(base)
    assert spec.applicable({"samples": base["samples"] | {"filter_mark", "trainer_step"}})


def test_groups_used_restricts_lengths_and_imbalance():
    packed, filt = dapo_run()
    data = trace(packed, filt)
    used_resp = defaultdict(list)
    loads = defaultdict(lambda: defaultdict(int))
    for line in filt:
        rows = packed[line["workload_step"]]
        for g in line["used_prompt_indices"]:
            r = rows[g]
            used_resp[r["step"]] += r["output"]
            for o in r["output"]:
                loads[r["step"]][r["dp_rank"]] += r["input"] + o
    lengths = analyze_lengths(data, groups="used")
    assert lengths["groups"] == "used"
    got = {e["step"]: e["response"] for e in lengths["steps"]}
    assert sorted(got) == sorted(s for s, v in used_resp.items() if v)
    for st, e in got.items():
        assert e["count"] == len(used_resp[st]) and e["mean"] == pytest.approx(np.mean(used_resp[st]))
    imb = analyze_imbalance(data, groups="used")
    for e in imb["steps"]:
        rec = e["tokens"]["recorded"]
        assert rec == [loads[e["step"]].get(r, 0) for r in range(len(rec))]
    assert analyze_lengths(data)["summary"]["samples"] == sum(len(r["output"]) for rows in packed for r in rows)
    plain = TraceData.from_tables(
        {"samples": {k: v for k, v in data.samples.__dict__.items() if k != "filter_mark" and v is not None}}
    )
    with pytest.raises(ValueError, match="needs DAPO filter marks"):
        analyze_lengths(plain, groups="used")
