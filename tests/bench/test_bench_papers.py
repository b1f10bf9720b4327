"""bench.papers on a tiny setting: one row per design with a finite replayed speedup."""

from __future__ import annotations

import math
import re

from bench import papers
from core.simulator.policies import POLICIES


def test_every_case_is_a_registered_policy_with_its_baseline():
    kinds = [c.design for c in papers.CASES]
    assert len(kinds) == len(set(kinds))
    for case in papers.CASES:
        assert case.design in POLICIES and case.baseline in POLICIES
        assert 1.0 <= case.published_low <= case.published_high


def test_tiny_run_has_a_row_per_design_with_finite_speedups(capsys):
    out = papers.main(["--steps", "2", "--scale", "0.05"])
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `(\w+)`", r).group(1) for r in rows] == [c.design for c in papers.CASES]
    speedups = [float(re.search(r"\*\*([0-9.]+|nan)x\*\*", r).group(1)) for r in rows]
    assert all(math.isfinite(s) and s > 0 for s in speedups)
    assert "designs in" in capsys.readouterr().out


def test_the_generated_workload_follows_the_case_setting():
    case = next(c for c in papers.CASES if c.design == "divided")
    work = papers.workload_for(case, steps=1, scale=0.05)
    w = work[0]
    assert w.n_groups == round(case.prompts * 0.05)
    assert w.n_samples == w.n_groups * case.n
    assert w.response_len.max() <= case.cap
    # the median scales with the cap (the same fraction for every design)
    assert abs(math.log(float(w.response_len.mean()) / (case.cap * papers.MEDIAN_PER_CAP))) < 1.0
