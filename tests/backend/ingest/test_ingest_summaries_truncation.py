"""Per-step summaries count truncation by the one definition (core/analysis/truncation.py):
the stored column where ingestion settled it, else the share at the cap, else unknown."""

from __future__ import annotations

import numpy as np
import pytest

from backend.ingest.summaries import summarize_steps
from core.analysis.truncation import Truncation, choose_cap


def test_summaries_count_the_stored_truncated_column():
    cols = {
        "step": np.array([0, 0, 0, 0, 1, 1]),
        "group_idx": np.array([0, 1, 2, 3, 0, 1]),
        "prompt_len": np.array([10] * 6),
        "response_len": np.array([3000, 3000, 100, 3000, 5, 6]),
        "truncated": np.array([1, 0, 0, 0, 0, 1]),
        "task_id": np.array([0, 0, 1, 1, 0, 1]),
    }
    out = summarize_steps(cols, 3000, ["a", "b"])
    r0, r1 = out[0].summary["response"]["all"], out[1].summary["response"]["all"]
    assert r0["truncation_rate"] == pytest.approx(1 / 4) and r1["truncation_rate"] == pytest.approx(1 / 2)
    assert "truncation_rate_flag" not in r0
    assert out[0].summary["response"]["a"]["truncation_rate"] == pytest.approx(1 / 2)
    assert out[1].summary["response"]["b"]["truncation_rate"] == 1.0
    assert out[0].summary["prompt"]["all"]["truncation_rate"] is None
    del cols["truncated"], cols["task_id"]  # no column: at the cap
    assert summarize_steps(cols, 3000, [])[0].summary["response"]["all"]["truncation_rate"] == pytest.approx(3 / 4)
    assert summarize_steps(cols, None, [])[0].summary["response"]["all"]["truncation_rate"] is None


def test_the_definition_names_its_basis_and_cap():
    assert choose_cap(None, 3000, 16000) == (3000, "recorded")
    assert choose_cap(8192, 3000, None) == (8192, "given")
    assert choose_cap(None, None, None) == (None, None)
    stop = Truncation(True, 3000, "recorded")
    assert stop.basis == "stop_reason" and "stop reason" in stop.definition() and "3,000-token" in stop.definition()
    cap = Truncation(False, 16000, "inferred")
    assert cap.basis == "cap" and "16,000-token cap (inferred" in cap.definition()
    assert not Truncation().known and "unknown" in Truncation().definition()
    assert Truncation.from_dict(cap.as_dict()) == cap
