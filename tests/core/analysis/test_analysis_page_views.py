"""Page views of the long-tail and imbalance results (core.analysis.page_views): small
on a big trace (256 DP ranks x 1,000 steps: < 2 MB of JSON, where the full results are
megabytes more), and carrying what the pages draw."""

from __future__ import annotations

import base64
import functools

import numpy as np
import orjson
import pytest

from core.analysis.imbalance import analyze_imbalance
from core.analysis.longtail import analyze_longtail
from core.analysis.page_views import page_view, whole_percents
from core.analysis.tables import TraceData

BUDGET = 2_000_000  # bytes a page may fetch


def synthetic(steps: int, ranks: int, per_rank: int = 4, seed: int = 0) -> TraceData:
    """One prompt group of `per_rank` samples per DP rank and step, lognormal lengths."""
    rng = np.random.default_rng(seed)
    groups = steps * ranks
    n = groups * per_rank
    return TraceData.from_tables(
        {
            "samples": {
                "step": np.repeat(np.arange(steps), ranks * per_rank),
                "group_idx": np.tile(np.repeat(np.arange(ranks), per_rank), steps),
                "sample_idx": np.tile(np.arange(per_rank), groups),
                "prompt_len": np.repeat(rng.integers(16, 4096, groups), per_rank),
                "response_len": np.clip(rng.lognormal(6.4, 0.9, n), 1, 16384).astype(np.int64),
                "dp_rank": np.tile(np.repeat(np.arange(ranks), per_rank), steps),
            }
        }
    )


@functools.cache
def big() -> dict:
    """Real results of a 256-rank x 1,000-step trace, through JSON as the API stores them."""
    data = synthetic(1000, 256)
    return {
        "imbalance": orjson.loads(orjson.dumps(analyze_imbalance(data))),
        "longtail": orjson.loads(orjson.dumps(analyze_longtail(data))),
    }


@pytest.mark.parametrize(("kind", "load"), [("longtail", "tokens"), ("imbalance", "tokens"), ("imbalance", "cost")])
def test_page_view_of_a_big_result_fits_a_page(kind, load):
    full = big()[kind]
    view = orjson.dumps(page_view(kind, full, load=load))
    assert len(view) < BUDGET, f"{kind} page view is {len(view) / 1e6:.2f} MB"
    assert len(orjson.dumps(full)) > 2 * len(view)  # the full result is what did not fit


def test_imbalance_view_keeps_one_load_as_float32_bytes():
    full = big()["imbalance"]
    view = page_view("imbalance", full, load="cost")
    assert view["view"] == {"name": "page", "load": "cost"}
    assert view["summary"] == full["summary"] and view["dp_size"] == 256
    assert [s["step"] for s in view["steps"]] == [s["step"] for s in full["steps"]]
    for got, want in zip(view["steps"][::97], full["steps"][::97]):
        assert "tokens" not in got
        rec = got["cost"]["recorded"]
        assert rec["dtype"] == "f4"
        loads = np.frombuffer(base64.b64decode(rec["bdata"]), dtype="<f4")
        assert loads.tolist() == np.asarray(want["cost"]["recorded"], dtype=np.float32).tolist()
        for key in ("mean", "max_over_mean", "kk_max_over_min", "lpt_max_over_mean", "saving", "best_split"):
            assert got["cost"][key] == want["cost"][key]


def test_imbalance_view_refuses_an_unknown_load():
    with pytest.raises(ValueError, match="unknown load"):
        page_view("imbalance", {"steps": []}, load="flops")


def test_longtail_view_has_each_engine_in_whole_percents():
    full = big()["longtail"]
    view = page_view("longtail", full)
    assert view["engines"] == list(range(256)) and view["summary"] == full["summary"]
    for got, want in zip(view["steps"][::131], full["steps"][::131]):
        assert "engine" not in got
        assert got["tail_time_share"] == want["tail_time_share"] and got["tail_tied"] == want["tail_tied"]
        idle = dict(zip(want["engine"]["engine"], want["engine"]["idle_fraction"]))
        assert [e for e, v in zip(view["engines"], got["engine_idle_pct"]) if v is not None] == sorted(idle)
        for e, v in zip(view["engines"], got["engine_idle_pct"]):
            if v is not None:
                assert isinstance(v, int) and abs(v - 100 * idle[e]) <= 0.5 + 1e-4


def test_longtail_view_marks_engines_missing_from_a_step():
    result = {
        "engine_key": "dp_rank",
        "steps": [
            {"step": 0, "engine": {"engine": [0, 2], "idle_fraction": [0.125, 0.5]}},
            {"step": 1, "engine": {"engine": [1], "idle_fraction": [None]}},
            {"step": 2},
        ],
    }
    view = page_view("longtail", result)
    assert view["engines"] == [0, 1, 2]
    assert [s.get("engine_idle_pct") for s in view["steps"]] == [[12, None, 50], [None, None, None], None]


def test_whole_percents_round_half_to_even_like_the_heatmap():
    assert whole_percents([0.125, 0.135, 0.005, None, float("nan"), 1.0]) == [12, 14, 0, None, None, 100]


def test_other_kinds_and_missing_results_pass_through():
    result = {"steps": [{"step": 0, "p50": 1.0}]}
    assert page_view("lengths", result) is result
    assert page_view("imbalance", None) is None
