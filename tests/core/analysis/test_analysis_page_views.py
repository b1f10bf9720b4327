"""Views of the long-tail and imbalance results (core.analysis.page_views): the page view
is small on a big trace (256 DP ranks x 1,000 steps: < 2 MB of JSON, where the full results
are megabytes more), its heatmap capped whatever the trace's size, its per-step figures
and summary those of the full result; the steps view pages the full-resolution entries."""

from __future__ import annotations

import base64
import functools

import numpy as np
import orjson
import pytest

from core.analysis.imbalance import analyze_imbalance
from core.analysis.longtail import analyze_longtail
from core.analysis.page_views import (
    HEATMAP_CELLS,
    HEATMAP_ROWS,
    IMBALANCE_STEP_FIELDS,
    LONGTAIL_STEP_FIELDS,
    STEPS_PAGE_MAX,
    page_view,
    steps_page,
    whole_percents,
)
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


def f4(encoded: dict) -> np.ndarray:
    assert encoded["dtype"] == "f4"
    return np.frombuffer(base64.b64decode(encoded["bdata"]), dtype="<f4").reshape(encoded["shape"])


@pytest.mark.parametrize(("kind", "load"), [("longtail", "tokens"), ("imbalance", "tokens"), ("imbalance", "cost")])
def test_page_view_of_a_big_result_fits_a_page(kind, load):
    full = big()[kind]
    view = orjson.dumps(page_view(kind, full, load=load))
    assert len(view) < BUDGET / 2, f"{kind} page view is {len(view) / 1e6:.2f} MB"
    assert len(orjson.dumps(full)) > 4 * len(view)  # the full result is what did not fit


def fake_longtail(steps: int, engines: int, seed: int = 1) -> dict:
    idle = np.random.default_rng(seed).uniform(0, 1, (steps, engines))
    return {
        "engine_key": "dp_rank",
        "summary": {"steps": steps},
        "steps": [
            {"step": s, "idle_fraction": 0.5, "engine": {"engine": list(range(engines)), "idle_fraction": row}}
            for s, row in enumerate(idle.tolist())
        ],
    }


def fake_imbalance(steps: int, ranks: int, seed: int = 2) -> dict:
    rec = np.random.default_rng(seed).integers(1, 10**6, (steps, ranks))
    return {
        "dp_size": ranks,
        "summary": {"steps": steps},
        "steps": [
            {"step": s, "tokens": {"recorded": row, "mean": sum(row) / ranks}} for s, row in enumerate(rec.tolist())
        ],
    }


@pytest.mark.parametrize(("steps", "ranks"), [(4000, 64), (600, 1000)])
def test_heatmaps_stay_capped_however_big_the_trace(steps, ranks):
    """The old page view carried steps x ranks cells (4 bytes or more each): here that is
    over 1 MB, and it grew with the trace; the capped heatmap stays under 64 Ki cells."""
    assert steps * ranks * 4 > 10**6
    lt = page_view("longtail", fake_longtail(steps, ranks))["engine_heatmap"]
    im = page_view("imbalance", fake_imbalance(steps, ranks))["load_heatmap"]
    for block, rows in ((lt, "engines"), (im, "ranks")):
        assert len(block[rows]) <= HEATMAP_ROWS
        assert len(block["steps"]) * len(block[rows]) <= HEATMAP_CELLS
        assert len(orjson.dumps(block)) < 400_000
    assert len(lt["idle_pct"]) == len(lt["engines"]) and all(len(r) == len(lt["steps"]) for r in lt["idle_pct"])
    assert f4(im["recorded"]).shape == (len(im["ranks"]), len(im["steps"]))


def test_imbalance_view_keeps_one_load_and_every_step_figure():
    full = big()["imbalance"]
    view = page_view("imbalance", full, load="cost")
    assert view["view"] == {"name": "page", "load": "cost"}
    assert view["summary"] == full["summary"] and view["dp_size"] == 256
    assert [s["step"] for s in view["steps"]] == [s["step"] for s in full["steps"]]
    for got, want in zip(view["steps"], full["steps"]):
        assert "tokens" not in got and "recorded" not in got["cost"]
        assert got["cost"] == {k: want["cost"][k] for k in IMBALANCE_STEP_FIELDS}


def test_imbalance_heatmap_cells_are_block_means():
    """1,000 steps x 256 ranks: 256 columns of 4 steps; a cell = the mean of its 4 loads."""
    full = big()["imbalance"]
    heat = page_view("imbalance", full, load="cost")["load_heatmap"]
    assert heat["steps"] == list(range(0, 1000, 4)) and heat["step_last"] == list(range(3, 1000, 4))
    assert heat["ranks"] == list(range(256)) and (heat["steps_per_cell"], heat["ranks_per_cell"]) == (4, 1)
    rec = np.array([s["cost"]["recorded"] for s in full["steps"]], dtype=np.float64).T  # ranks x steps
    cells = f4(heat["recorded"])
    assert np.array_equal(cells, rec.reshape(256, 250, 4).mean(axis=2).astype(np.float32))
    means = np.array([s["cost"]["mean"] for s in full["steps"]])
    assert np.allclose(heat["mean"], means.reshape(250, 4).mean(axis=1), rtol=1e-12)


def test_small_imbalance_heatmap_is_the_recorded_loads():
    full = fake_imbalance(30, 8)
    heat = page_view("imbalance", full)["load_heatmap"]
    assert (heat["steps_per_cell"], heat["ranks_per_cell"]) == (1, 1)
    want = np.array([s["tokens"]["recorded"] for s in full["steps"]], dtype=np.float32).T
    assert np.array_equal(f4(heat["recorded"]), want)
    assert heat["mean"] == [s["tokens"]["mean"] for s in full["steps"]]


def test_imbalance_view_refuses_an_unknown_load():
    with pytest.raises(ValueError, match="unknown load"):
        page_view("imbalance", {"steps": []}, load="flops")


def test_longtail_view_keeps_every_step_figure_and_bins_the_engines():
    full = big()["longtail"]
    view = page_view("longtail", full)
    assert view["summary"] == full["summary"] and view["view"] == {"name": "page"}
    for got, want in zip(view["steps"], full["steps"]):
        assert got == {k: want[k] for k in LONGTAIL_STEP_FIELDS if k in want} and "engine" not in got
    heat = view["engine_heatmap"]
    assert heat["engines"] == list(range(256)) and heat["steps"] == list(range(0, 1000, 4))
    idle = np.array([s["engine"]["idle_fraction"] for s in full["steps"]], dtype=np.float64).T
    for e in (0, 101, 255):
        assert heat["idle_pct"][e] == whole_percents(idle[e].reshape(250, 4).mean(axis=1))


def test_longtail_view_marks_engines_missing_from_a_step():
    result = {
        "engine_key": "dp_rank",
        "steps": [
            {"step": 0, "engine": {"engine": [0, 2], "idle_fraction": [0.125, 0.5]}},
            {"step": 1, "engine": {"engine": [1], "idle_fraction": [None]}},
            {"step": 2},
        ],
    }
    heat = page_view("longtail", result)["engine_heatmap"]
    assert heat["engines"] == [0, 1, 2] and heat["steps"] == [0, 1]
    assert heat["idle_pct"] == [[12, None], [None, None], [50, None]]


def test_binned_cells_average_the_values_they_have():
    steps, engines = 3 * HEATMAP_CELLS // HEATMAP_ROWS, HEATMAP_ROWS  # 3 steps per column
    result = fake_longtail(steps, engines)
    result["steps"][1]["engine"]["idle_fraction"][0] = None  # engine 0 has no figure at step 1
    heat = page_view("longtail", result)["engine_heatmap"]
    assert heat["steps_per_cell"] == 3 and heat["steps"][:2] == [0, 3]
    first = [result["steps"][s]["engine"]["idle_fraction"][0] for s in (0, 2)]
    assert heat["idle_pct"][0][0] == whole_percents([sum(first) / 2])[0]


def test_whole_percents_round_half_to_even_like_the_heatmap():
    assert whole_percents([0.125, 0.135, 0.005, None, float("nan"), 1.0]) == [12, 14, 0, None, None, 100]


def test_steps_view_pages_the_full_resolution_entries():
    full = big()["longtail"]
    page = steps_page(full, 990, STEPS_PAGE_MAX)
    assert page["steps"] == full["steps"][990:] and page["summary"] == full["summary"]
    assert page["view"] == {"name": "steps", "offset": 990, "limit": STEPS_PAGE_MAX, "total": 1000}
    pages = [steps_page(full, o, 100)["steps"] for o in range(0, 1000, 100)]
    assert [e for p in pages for e in p] == full["steps"]  # every entry exactly once
    assert len(orjson.dumps(steps_page(full, 0, STEPS_PAGE_MAX))) < BUDGET
    for offset, limit in ((0, 0), (0, STEPS_PAGE_MAX + 1), (-1, 10)):
        with pytest.raises(ValueError):
            steps_page(full, offset, limit)
    assert steps_page({"temporal": []}, 0, 10) == {"temporal": []}


def test_other_kinds_and_missing_results_pass_through():
    result = {"steps": [{"step": 0, "p50": 1.0}]}
    assert page_view("lengths", result) is result
    assert page_view("imbalance", None) is None


def test_imbalance_heatmap_of_steps_with_fewer_ranks():
    result = {
        "steps": [
            {"step": 0, "tokens": {"recorded": [5, 7], "mean": 6.0}},
            {"step": 1, "tokens": {"recorded": [9], "mean": 9.0}},
            {"step": 2},
        ]
    }
    heat = page_view("imbalance", result)["load_heatmap"]
    assert heat["steps"] == [0, 1] and heat["ranks"] == [0, 1] and heat["mean"] == [6.0, 9.0]
    cells = f4(heat["recorded"])
    assert cells[:, 0].tolist() == [5.0, 7.0] and cells[0, 1] == 9.0 and np.isnan(cells[1, 1])
