"""The long-tail and imbalance pages draw from the API's page view of their results
(`GET /jobs/{id}?view=page`, core.analysis.page_views): every figure and card built
from the view equals the one built from the full result, and the pages ask for the
view (one load at a time for imbalance), cached apart from the full result."""

from __future__ import annotations

import functools

import httpx
import numpy as np
import orjson
import plotly.io as pio
import pytest

from core.analysis.imbalance import analyze_imbalance
from core.analysis.longtail import analyze_longtail
from core.analysis.page_views import page_view
from core.analysis.tables import TraceData
from dashboard.api import session
from dashboard.figures.compare_many import imbalance_figure, longtail_figure
from dashboard.figures.headlines import imbalance_headline, rollout_idle_share
from dashboard.figures.imbalance import (
    f4_matrix,
    imbalance_ratio_figure,
    load_heatmap_figure,
    recorded_loads,
    saving_figure,
    saving_summary,
)
from dashboard.figures.longtail import longtail_engine_figure, longtail_finish_figure, longtail_idle_figure
from dashboard.views.freshness import result_steps
from tests.dashboard.test_dashboard_client import KEY, StubApi


@pytest.fixture
def stub():
    return StubApi()


@pytest.fixture
def app(stub):
    from dashboard.app import create_dash
    from dashboard.server import figure_cache, results

    # results and figures are cached per (API root, key, job): start and end empty
    figure_cache.clear()
    results._cache.clear()
    yield create_dash("http://api.test", http_client=httpx.Client(transport=httpx.MockTransport(stub)))
    figure_cache.clear()
    results._cache.clear()


def _json(x):
    return orjson.loads(orjson.dumps(x))


@functools.cache
def results() -> dict:
    """Real results of a 64-rank x 40-step trace (loads past float32's exact integers
    in the cost load), through JSON as the API sends them."""
    rng = np.random.default_rng(5)
    steps, ranks, per_rank = 40, 64, 4
    groups = steps * ranks
    data = TraceData.from_tables(
        {
            "samples": {
                "step": np.repeat(np.arange(steps), ranks * per_rank),
                "group_idx": np.tile(np.repeat(np.arange(ranks), per_rank), steps),
                "sample_idx": np.tile(np.arange(per_rank), groups),
                "prompt_len": np.repeat(rng.integers(16, 4096, groups), per_rank),
                "response_len": np.clip(rng.lognormal(7.5, 1.0, groups * per_rank), 1, 32768).astype(np.int64),
                "dp_rank": np.tile(np.repeat(np.arange(ranks), per_rank), steps),
            }
        }
    )
    return {"imbalance": _json(analyze_imbalance(data)), "longtail": _json(analyze_longtail(data))}


def same(a, b) -> bool:
    return pio.to_json(a, validate=False) == pio.to_json(b, validate=False)


@pytest.mark.parametrize("load", ["tokens", "cost"])
def test_imbalance_figures_from_the_view_equal_the_full_ones(load):
    full = results()["imbalance"]
    view = _json(page_view("imbalance", full, load=load))
    assert max(max(s["cost"]["recorded"]) for s in full["steps"]) > 2**24  # float32 rounds these
    assert same(load_heatmap_figure(view, load), load_heatmap_figure(full, load))
    for metric in ("max_over_mean", "max_over_min"):
        assert same(imbalance_ratio_figure(view, load, metric), imbalance_ratio_figure(full, load, metric))
    assert same(saving_figure(view, load), saving_figure(full, load))
    assert saving_summary(view, load) == saving_summary(full, load)
    # the overview's cards and Compare many read the token load's view
    if load == "tokens":
        assert imbalance_headline(view) == imbalance_headline(full)
        assert same(imbalance_figure([{"name": "a", "id": 1, "results": {"imbalance": view}}]),
                    imbalance_figure([{"name": "a", "id": 1, "results": {"imbalance": full}}]))  # fmt: skip
    assert result_steps(view) == result_steps(full)


def test_heatmap_draws_the_recorded_loads_at_float32():
    full = results()["imbalance"]
    fig = load_heatmap_figure(full, "cost")
    want = np.array([s["cost"]["recorded"] for s in full["steps"]], dtype=np.float64).T
    got = np.asarray(fig.data[0].customdata)
    assert got.dtype == np.float32 and np.array_equal(got, want.astype(np.float32))
    ratio = np.asarray(fig.data[0].z)
    mean = np.array([s["cost"]["mean"] for s in full["steps"]])
    assert np.allclose(ratio, want / mean[None, :], rtol=1e-6)


def test_recorded_loads_and_the_view_matrix():
    assert recorded_loads([1, None, 3]).tolist()[::2] == [1.0, 3.0] and np.isnan(recorded_loads([None])[0])
    heat = page_view("imbalance", {"steps": [{"step": s, "tokens": {"recorded": [5, 7], "mean": 6}} for s in (0, 1)]})
    assert f4_matrix(heat["load_heatmap"]["recorded"]).tolist() == [[5.0, 5.0], [7.0, 7.0]]
    with pytest.raises(ValueError, match="unknown encoding"):
        f4_matrix({"dtype": "f8", "bdata": ""})


def big_results(steps: int = 1000, ranks: int = 256) -> dict:
    """Results of the size the pages must stay small on, written directly (the figures
    read only these fields)."""
    rng = np.random.default_rng(3)
    rec = rng.integers(1_000, 100_000, (steps, ranks))
    idle = rng.uniform(0, 1, (steps, ranks))
    tokens = {"max_over_mean": 1.2, "max_over_min": 1.5, "kk_max_over_mean": 1.01, "saving": 0.1}
    return {
        "imbalance": {
            "dp_size": ranks,
            "steps": [
                {"step": s, "tokens": {"recorded": r, "mean": sum(r) / ranks, **tokens}}
                for s, r in enumerate(rec.tolist())
            ],
        },
        "longtail": {
            "engine_key": "dp_rank",
            "steps": [
                {
                    "step": s,
                    "engine_time": 10.0,
                    "idle_waiting": 2.0,
                    "engine": {"engine": list(range(ranks)), "idle_fraction": r},
                }
                for s, r in enumerate(idle.tolist())
            ],
        },
    }


def test_binned_heatmaps_stay_small_and_draw_the_view():
    """1,000 steps x 256 ranks: the full-resolution heatmaps are megabytes of figure JSON,
    the page view's are binned to 4 steps a cell, and say so."""
    full = big_results()
    imb = _json(page_view("imbalance", full["imbalance"]))
    lt = _json(page_view("longtail", full["longtail"]))
    heat_full, heat = load_heatmap_figure(full["imbalance"]), load_heatmap_figure(imb)
    eng_full, eng = longtail_engine_figure(full["longtail"]), longtail_engine_figure(lt)
    for small, whole in ((heat, heat_full), (eng, eng_full)):
        size = len(pio.to_json(small, validate=False))
        assert size < 1_000_000 and len(pio.to_json(whole, validate=False)) > 2 * size
        assert "each cell: the mean over 4 steps" in small.layout.title.text
    z = np.asarray(heat.data[0].z)
    assert z.shape == (256, 250)
    rec = np.array([s["tokens"]["recorded"] for s in full["imbalance"]["steps"]], dtype=np.float64).T
    means = np.array([s["tokens"]["mean"] for s in full["imbalance"]["steps"]])
    want = rec.reshape(256, 250, 4).mean(axis=2) / means.reshape(250, 4).mean(axis=1)[None, :]
    assert np.allclose(z, want, rtol=1e-6) and list(heat.data[0].x[:2]) == [0, 4]
    assert np.asarray(eng.data[0].z).shape == (256, 250)
    # the line charts still draw every step, as from the full result
    assert same(imbalance_ratio_figure(imb), imbalance_ratio_figure(full["imbalance"]))
    assert same(longtail_idle_figure(lt), longtail_idle_figure(full["longtail"]))


def test_longtail_figures_from_the_view_equal_the_full_ones():
    full = results()["longtail"]
    view = _json(page_view("longtail", full))
    for build in (longtail_idle_figure, longtail_finish_figure, longtail_engine_figure):
        assert same(build(view), build(full)), build.__name__
    assert rollout_idle_share(view) == rollout_idle_share(full) and view["basis"] == full["basis"]
    assert same(longtail_figure([{"name": "a", "id": 1, "results": {"longtail": view}}]),
                longtail_figure([{"name": "a", "id": 1, "results": {"longtail": full}}]))  # fmt: skip


def test_engine_heatmap_from_a_view_with_gaps():
    full = {
        "engine_key": "dp_rank",
        "steps": [
            {"step": 0, "engine": {"engine": [0, 2], "idle_fraction": [0.125, 0.5]}},
            {"step": 1, "engine": {"engine": [1], "idle_fraction": [0.335]}},
            {"step": 2},
        ],
    }
    view = _json(page_view("longtail", full))
    assert same(longtail_engine_figure(view), longtail_engine_figure(full))
    z = np.asarray(longtail_engine_figure(view).data[0].z)
    assert z[0, 0] == 12 and z[1, 1] == 34 and np.isnan(z[1, 0])


def test_pages_fetch_the_page_view_cached_apart(app, stub):
    import flask

    from dashboard.pages.distributions import fill_longtail
    from dashboard.pages.imbalance import fill
    from dashboard.server import results as cache

    full = results()
    views = {
        ("21", "page", "cost"): page_view("imbalance", full["imbalance"], load="cost"),
        ("21", "page", "tokens"): page_view("imbalance", full["imbalance"], load="tokens"),
        ("22", "page", None): page_view("longtail", full["longtail"]),
    }

    def job(request: httpx.Request) -> httpx.Response:
        job_id = request.url.path.rsplit("/", 1)[1]
        params = request.url.params
        key = (job_id, params.get("view"), params.get("load"))
        kind = "imbalance" if job_id == "21" else "longtail"
        result = views.get(key) if params.get("view") == "page" else full[kind]
        return httpx.Response(200, json={"id": int(job_id), "kind": kind, "status": "succeeded", "result": result})

    stub.routes[("GET", "/api/v1/jobs/21")] = job
    stub.routes[("GET", "/api/v1/jobs/22")] = job
    with app.server.test_request_context():
        flask.session[session.KEY_FIELD] = session.seal_key(KEY)
        cards, heatmap, *_ = fill({"job_id": 21}, "cost", "max_over_mean")
        assert same(heatmap, load_heatmap_figure(full["imbalance"], "cost"))
        idle, finish, engines = fill_longtail({"job_id": 22}, None)
        assert same(engines, longtail_engine_figure(full["longtail"]))
        asked = [dict(r.url.params) for r in stub.requests if r.url.path.startswith("/api/v1/jobs/")]
        assert asked == [{"view": "page", "load": "cost"}, {"view": "page"}]
        # the full result and the other load are other entries of the cache
        assert cache.job_result(21) == full["imbalance"]
        assert cache.job_result(21, cache.page_query("imbalance"))["view"] == {"name": "page", "load": "tokens"}
        assert cache.job_result(21, cache.page_query("imbalance", "cost"))["view"]["load"] == "cost"
        assert len([r for r in stub.requests if r.url.path.startswith("/api/v1/jobs/")]) == 4
