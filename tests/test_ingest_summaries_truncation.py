"""Per-step summaries carry both truncation definitions: at the cap, and the trace's flag."""

from __future__ import annotations

import numpy as np
import pytest

from backend.ingest.summaries import summarize_steps


def test_summaries_report_at_cap_and_flagged_truncation():
    cols = {
        "step": np.array([0, 0, 0, 0, 1, 1]),
        "group_idx": np.array([0, 1, 2, 3, 0, 1]),
        "prompt_len": np.array([10] * 6),
        "response_len": np.array([3000, 3000, 100, 3000, 5, 6]),
        "truncated": np.array([1, 0, 0, 0, 0, 1]),
    }
    out = summarize_steps(cols, 3000, [])
    r0, r1 = out[0].summary["response"]["all"], out[1].summary["response"]["all"]
    assert r0["truncation_rate"] == pytest.approx(3 / 4) and r0["truncation_rate_flag"] == pytest.approx(1 / 4)
    assert r1["truncation_rate"] == 0.0 and r1["truncation_rate_flag"] == pytest.approx(1 / 2)
    del cols["truncated"]
    assert "truncation_rate_flag" not in summarize_steps(cols, 3000, [])[0].summary["response"]["all"]
