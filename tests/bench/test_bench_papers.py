"""bench.papers: one declaration per design with its paper's setting (cited, assumed or
the shared default), and on a tiny setting one row per design with a finite replayed
speedup, its sensitivity band and its paper setting."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from bench import papers
from core.simulator import MODEL_PRESETS
from core.simulator.config import GPU_PRESETS
from core.simulator.policies import POLICIES


def test_every_case_is_a_registered_policy_with_its_baseline():
    kinds = [c.design for c in papers.CASES]
    assert len(kinds) == len(set(kinds))
    for case in papers.CASES:
        assert case.design in POLICIES and case.baseline in POLICIES
        assert 1.0 <= case.published_low <= case.published_high
        assert case.model in MODEL_PRESETS and case.gpu in GPU_PRESETS
        assert case.measured_at and case.unmodelled


def test_every_setting_field_is_cited_assumed_or_the_shared_default():
    for case in papers.CASES:
        assert set(case.cited) <= set(papers.SETTING) and set(case.assumed) <= set(papers.SETTING)
        assert not set(case.cited) & set(case.assumed)
        assert all(why.strip() for why in (*case.cited.values(), *case.assumed.values()))
        for name in case.not_stated():
            assert getattr(case, name) == papers.DEFAULTS[name], (case.design, name)
        # the design's parameters are its registry's
        POLICIES[case.design].resolve(case.params)


def test_the_papers_stated_settings_are_replayed():
    by = {c.design: c for c in papers.CASES}
    verl = by["async"]
    assert (verl.gpu, verl.gpus, verl.rollout_gpus, verl.prompts, verl.n, verl.cap) == ("H20", 128, 64, 512, 16, 28672)
    assert verl.params["staleness_threshold"] == 0.5 and verl.params["require_batches"] == 4
    off = by["one_step_off"]
    assert (off.gpu, off.gpus, off.rollout_gpus, off.tp) == ("H20", 16, 4, 2)
    seer = by["divided"]
    assert (seer.gpus, seer.prompts, seer.n, seer.cap) == (128, 600, 16, 40960)
    # a disaggregated design rolls out on its paper's share, its colocated baseline on every GPU
    design = papers.cluster_for(verl, "async", 1.0)
    assert (design.rollout_gpus, design.train_dp) == (64, 64)
    base = papers.cluster_for(verl, "sync", 1.0)
    assert (base.rollout_gpus, base.train_dp) == (128, 128)


@pytest.mark.parametrize(
    ("speedup", "expected"),
    [(1.3, "within"), (2.1, "within"), (1.0, "within"), (0.6, "below"), (3.0, "above")],
)
def test_verdict_is_within_25_percent_of_the_range_or_names_what_is_missing(speedup, expected):
    case = dataclasses.replace(papers.CASES[0], published_low=1.2, published_high=2.0)
    text = papers.verdict(case, speedup)
    assert text.startswith(expected)
    if expected == "below":
        assert case.unmodelled in text and "would need a 2.00-3.33x gain" in text
    if expected == "above":
        assert "overstates it 1.50-2.50x" in text
    assert "band reaches" in papers.verdict(case, 0.5, [0.5, 1.0]) and "band" not in papers.verdict(case, 0.5)


def test_tiny_run_has_a_row_per_design_with_its_setting_and_band(capsys):
    out = papers.main(["--steps", "2", "--scale", "0.05"])
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `(\w+)`", r).group(1) for r in rows] == [c.design for c in papers.CASES]
    for case, row in zip(papers.CASES, rows, strict=True):
        m = re.search(r"\*\*([0-9.]+|nan)x\*\* \[([0-9.]+)-([0-9.]+)\]", row)
        assert m, row
        speedup, lo, hi = (float(g) for g in m.groups())
        assert math.isfinite(speedup) and speedup > 0
        assert lo - 0.005 <= speedup <= hi + 0.005
        assert f"{case.model}, " in row and f"cap {case.cap:,}" in row and case.gpu in row
        missing = case.not_stated()
        assert ("not stated (shared default): " + ", ".join(missing) in row) == bool(missing)
    assert "designs in" in capsys.readouterr().out


def test_the_band_covers_only_what_moves_the_metric():
    names = {r.name for r in papers.band_ranges(next(c for c in papers.CASES if c.metric == "rollout"))}
    assert names == {"bandwidth_efficiency", "rollout_mfu"}
    e2e = next(c for c in papers.CASES if c.metric == "end-to-end")
    assert {"train_mfu", "colocation_overhead"} <= {r.name for r in papers.band_ranges(e2e)}


def test_the_generated_workload_follows_the_case_setting():
    case = next(c for c in papers.CASES if c.design == "divided")
    work = papers.workload_for(case, steps=1, scale=0.05)
    w = work[0]
    assert w.n_groups == round(case.prompts * 0.05)
    assert w.n_samples == w.n_groups * case.n
    assert w.response_len.max() <= case.cap
    # the median scales with the cap (the same fraction for every design)
    assert abs(math.log(float(w.response_len.mean()) / (case.cap * papers.MEDIAN_PER_CAP))) < 1.0
