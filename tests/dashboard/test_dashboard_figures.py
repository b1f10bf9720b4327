"""Figure builders of the dashboard on hand-made API payloads.

Expected values are computed here from raw numbers (numpy), independently of the
builders: a figure that draws the wrong percentile, step or rank fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from dashboard import theme
from dashboard.figures.common import log_token_axis, styled_figure, token_label
from dashboard.figures.compare import compare_cdf_figure, compare_percentiles_figure, pooled_hist
from dashboard.figures.distributions import (
    cdf_figure,
    cdf_points,
    default_cdf_steps,
    length_box_figure,
    length_heatmap_figure,
    percentile_lines_figure,
    tail_figure,
)
from dashboard.figures.gpu import (
    as_columns,
    idle_breakdown_figure,
    idle_gaps,
    kernel_gantt_figure,
    kernel_kind_figure,
    short_kernel_name,
    straggler_figure,
    temporal_breakdown_figure,
    top_kernels_rows,
)
from dashboard.figures.imbalance import imbalance_ratio_figure, load_heatmap_figure, saving_figure, saving_summary
from dashboard.figures.longtail import longtail_engine_figure, longtail_finish_figure, longtail_idle_figure
from dashboard.figures.multiturn import (
    cache_hit_figure,
    context_growth_figure,
    counts_hist_figure,
    latency_vs_tokens_figure,
    reward_latency_figure,
    reward_ranks_figure,
    tool_latency_figure,
)
from dashboard.figures.simulation import (
    accuracy_rows,
    idle_cause_figure,
    policy_names,
    predicted_vs_measured_figure,
    speedup_figure,
    summary_cards,
    timeline_arrays,
    timeline_figure,
)
from dashboard.figures.stages import stage_gantt_figure, stage_segments, stage_time_figure
from dashboard.figures.workload import fit_ks_figure, fit_rows, task_summary
from dashboard.views.formatting import (
    filter_phase,
    kineto_steps,
    latest_job,
    latest_result,
    latest_succeeded,
    step_window,
    zoom_range,
)
from dashboard.views.overview import overview_cards
from dashboard.views.replay_forms import form_defaults, parse_steps, simulation_body, workload_body

EDGES = [int(e) for e in np.unique(np.round(2.0 ** np.arange(0, 22 + 1e-9, 1 / 4)).astype(np.int64))]
PCTS = (10, 25, 50, 75, 90, 99)


def step_row(step: int, values: np.ndarray, validate: bool = False) -> dict:
    """A /summaries step row computed from raw lengths (what ingestion stores)."""
    v = np.asarray(values, dtype=np.float64)
    idx = np.clip(np.searchsorted(EDGES, np.maximum(v, 1), side="right") - 1, 0, len(EDGES) - 2)
    row = {
        "step": step,
        "validate": validate,
        "count": int(v.size),
        "mean": float(v.mean()),
        "min": float(v.min()),
        "max": float(v.max()),
        "tail_ratio": float(v.max() / v.mean()),
        "truncation_rate": float((v >= 4096).mean()),
        "hist": np.bincount(idx, minlength=len(EDGES) - 1).tolist(),
    }
    row.update({f"p{p}": float(x) for p, x in zip(PCTS, np.percentile(v, PCTS))})
    return row


@pytest.fixture
def lengths():
    rng = np.random.default_rng(7)
    return {s: np.minimum(rng.lognormal(6.0 + 0.1 * s, 0.8, size=400).round() + 1, 4096) for s in range(5)}


@pytest.fixture
def summary(lengths):
    return {
        "field": "response",
        "task": None,
        "bin_edges": EDGES,
        "tasks": [],
        "steps": [step_row(s, v, validate=(s == 4)) for s, v in lengths.items()],
    }


# -- distributions ------------------------------------------------------------------
def test_box_figure_draws_each_steps_percentiles(summary, lengths):
    fig = length_box_figure(summary)
    box = fig.data[0]
    assert box.type == "box"
    assert list(box.x) == [0, 1, 2, 3, 4]
    for i, s in enumerate(range(5)):
        p10, p25, p50, p75, p90 = np.percentile(lengths[s], [10, 25, 50, 75, 90])
        assert box.q1[i] == pytest.approx(p25)
        assert box.median[i] == pytest.approx(p50)
        assert box.q3[i] == pytest.approx(p75)
        assert box.lowerfence[i] == pytest.approx(p10)
        assert box.upperfence[i] == pytest.approx(p90)
    p99 = next(t for t in fig.data if t.name == "p99")
    assert p99.y[3] == pytest.approx(np.percentile(lengths[3], 99))
    mx = next(t for t in fig.data if t.name == "max")
    assert list(mx.y) == [pytest.approx(lengths[s].max()) for s in range(5)]
    assert fig.layout.yaxis.title.text == theme.UNITS["tokens"]
    assert fig.layout.xaxis.title.text == theme.UNITS["step"]


def test_box_figure_draws_500_steps_as_percentile_bands():
    rows = [
        {
            "step": s,
            "count": 10,
            "p10": 1,
            "p25": 2,
            "p50": 3 + s,
            "p75": 40,
            "p90": 50,
            "p99": 60,
            "max": 70 + s,
            "mean": 30,
        }
        for s in range(500)
    ]
    fig = length_box_figure({"steps": rows, "bin_edges": EDGES})
    by = {t.name: t for t in fig.data}
    # one line per percentile, not 500 boxes: the browser lays out a handful of paths
    assert "box" not in {t.type for t in fig.data} and len(fig.data) == 8
    assert list(by["p10"].y) == [1] * 500 and by["p10-p90"].fill == "tonexty" and list(by["p10-p90"].y) == [50] * 500
    assert list(by["p25"].y) == [2] * 500 and list(by["p25-p75"].y) == [40] * 500
    assert by["median"].y[-1] == 502 and by["max"].y[-1] == 569 and by["max"].mode == "lines"


def test_box_figure_log_axis_has_power_of_two_ticks(summary):
    fig = length_box_figure(summary, log_y=True)
    assert fig.layout.yaxis.type == "log"
    assert all(np.log2(v) == int(np.log2(v)) for v in fig.layout.yaxis.tickvals)


def test_heatmap_is_share_of_each_steps_samples_on_trimmed_log_bins(summary, lengths):
    fig = length_heatmap_figure(summary)
    hm = fig.data[0]
    z = np.array(hm.z, dtype=float)  # bins x steps
    assert z.shape[1] == 5
    assert np.allclose(z.sum(axis=0), 100.0)
    # y are bin edges (one more than rows), covering exactly the occupied range
    all_v = np.concatenate(list(lengths.values()))
    assert len(hm.y) == z.shape[0] + 1
    assert hm.y[0] <= all_v.min() < hm.y[1]
    assert hm.y[-2] <= all_v.max() < hm.y[-1]
    # a known cell: share of step 2 samples in the bin holding 500 tokens
    b = int(np.searchsorted(hm.y, 500, side="right") - 1)
    lo, hi = hm.y[b], hm.y[b + 1]
    expected = 100.0 * ((lengths[2] >= lo) & (lengths[2] < hi)).mean()
    assert z[b, 2] == pytest.approx(expected)
    assert fig.layout.yaxis.type == "log"


def test_percentile_lines_and_tail(summary, lengths):
    fig = percentile_lines_figure(summary)
    assert [t.name for t in fig.data] == ["p50", "p90", "p99", "max"]
    p90 = fig.data[1]
    assert p90.y[1] == pytest.approx(np.percentile(lengths[1], 90))
    tail = tail_figure(summary)
    ratio = tail.data[0]
    assert ratio.y[0] == pytest.approx(lengths[0].max() / lengths[0].mean())
    trunc = tail.data[1]
    assert trunc.y[4] == pytest.approx(100.0 * (lengths[4] >= 4096).mean())


def test_cdf_points_from_histogram():
    xs, ys = cdf_points([0, 2, 2, 0], [1, 2, 4, 8, 16])
    assert xs == [2.0, 4.0, 8.0]
    assert ys == [0.0, 0.5, 1.0]
    assert cdf_points([0, 0], [1, 2, 4]) == ([], [])


def test_cdf_figure_overlays_only_chosen_steps(summary, lengths):
    fig = cdf_figure(summary, [3, 1, 99])
    assert [t.name for t in fig.data] == ["step 1", "step 3"]
    # CDF at an edge = share of samples below it
    t = fig.data[1]
    i = len(t.x) // 2
    assert t.y[i] == pytest.approx((lengths[3] < t.x[i]).mean())
    assert t.y[-1] == pytest.approx(1.0)
    assert fig.layout.xaxis.type == "log"


def test_default_cdf_steps_spread():
    rows = [{"step": s, "count": 1} for s in range(0, 100, 10)]
    assert default_cdf_steps({"steps": rows}, 4) == [0, 30, 60, 90]


def test_filter_phase_uses_validate_flags(summary):
    assert [r["step"] for r in filter_phase(summary, None, "train")["steps"]] == [0, 1, 2, 3]
    assert [r["step"] for r in filter_phase(summary, None, "validate")["steps"]] == [4]
    rows = [{"step": 0, "count": 1}, {"step": 1, "count": 1}]
    steps = [{"step": 0, "validate": True}]
    assert [r["step"] for r in filter_phase({"steps": rows}, steps, "train")["steps"]] == [1]


def test_empty_payloads_give_titled_empty_figures():
    fig = length_box_figure({"steps": [], "bin_edges": EDGES})
    assert len(fig.data) == 0 and fig.layout.annotations[0].text.startswith("No samples")


# -- stages ---------------------------------------------------------------------------
def test_stage_time_bars_stack_named_stages_and_other():
    steps = [
        {"step": 1, "t_gen": 10.0, "t_reward": 2.0, "t_update_actor": 5.0, "t_step": 20.0},
        {"step": 2, "t_gen": 12.0, "t_reward": None, "t_update_actor": 6.0, "t_step": 18.0},
    ]
    fig = stage_time_figure(steps)
    names = [t.name for t in fig.data]
    assert names == ["generation", "reward", "actor update", "other"]
    other = fig.data[-1]
    assert list(other.y) == [pytest.approx(3.0), pytest.approx(0.0)]
    assert fig.data[0].marker.color == theme.STAGE_COLORS["gen"]
    assert fig.layout.barmode == "stack"
    assert fig.layout.yaxis.title.text == theme.UNITS["seconds"]


def test_stage_time_without_timings_says_so():
    fig = stage_time_figure([{"step": 0}])
    assert not fig.data and "no per-step stage timings" in fig.layout.annotations[0].text


def test_stage_segments_wait_for_slowest_rank():
    step = {"step": 3, "t_gen": 10.0, "t_update_actor": 4.0}
    timings = [
        {"step": 3, "rank": 0, "phase": "reward", "seconds": 2.0},
        {"step": 3, "rank": 1, "phase": "reward", "seconds": 5.0},
    ]
    segs = {(s["rank"], s["stage"]): (s["start"], s["end"]) for s in stage_segments(step, timings)}
    assert segs[(0, "gen")] == (0.0, 10.0) and segs[(1, "gen")] == (0.0, 10.0)
    assert segs[(0, "reward")] == (10.0, 12.0)
    assert segs[(1, "reward")] == (10.0, 15.0)
    assert segs[(0, "wait")] == (12.0, 15.0)
    assert (1, "wait") not in segs
    assert segs[(0, "update_actor")] == (15.0, 19.0)


def test_stage_gantt_fits_256_ranks():
    timings = [{"step": 0, "rank": r, "phase": "reward", "seconds": 1.0 + r % 7} for r in range(256)]
    fig = stage_gantt_figure(None, timings, step_no=0)
    reward = next(t for t in fig.data if t.name == "reward")
    assert len(reward.y) == 256
    wait = next(t for t in fig.data if t.name == theme.STAGE_LABELS["wait"])
    assert max(b + x for b, x in zip(wait.base, wait.x)) == pytest.approx(7.0)
    assert fig.layout.height <= 1400


# -- GPU ------------------------------------------------------------------------------
def test_idle_gaps_complement_the_union():
    gaps = idle_gaps(np.array([0.0, 5.0, 20.0, 31.0]), np.array([10.0, 12.0, 30.0, 35.0]))
    assert gaps == [(12.0, 20.0), (30.0, 31.0)]
    assert idle_gaps(np.array([0.0, 5.0]), np.array([10.0, 8.0])) == []


def test_kernel_gantt_rows_kinds_and_ms_axis():
    events = [
        {"rank": 0, "stream": 7, "step": 1, "kind": "compute", "name": "gemm", "start_us": 1000.0, "dur_us": 500.0},
        {
            "rank": 0,
            "stream": 9,
            "step": 1,
            "kind": "communication",
            "name": "ncclKernel_AllReduce",
            "start_us": 1200.0,
            "dur_us": 300.0,
        },
        {"rank": 0, "stream": 7, "step": 1, "kind": "compute", "name": "gemm", "start_us": 3000.0, "dur_us": 1000.0},
        {
            "rank": 1,
            "stream": 7,
            "step": 1,
            "kind": "memory",
            "name": "Memcpy HtoD",
            "start_us": 1000.0,
            "dur_us": 100.0,
        },
    ]
    fig = kernel_gantt_figure(events, origin_us=1000.0, origin_label="the step start")
    by_name = {t.name: t for t in fig.data}
    comp = by_name["compute"]
    assert [x for x in comp.x if x == x] == [0.0, 0.5, 2.0, 3.0]  # ms from the origin; NaN breaks segments
    assert list(fig.layout.yaxis.ticktext) == [
        "rank 0 idle",
        "rank 0 stream 7",
        "rank 0 stream 9",
        "rank 1 idle",
        "rank 1 stream 7",
    ]
    idle = by_name["idle (no stream busy)"]
    assert [x for x in idle.x if x == x] == [0.5, 2.0]  # rank 0 idle from 0.5 ms to 2 ms
    assert comp.text[0].startswith("gemm") and comp.text[1] == ""
    assert comp.type == "scatter"
    assert fig.layout.xaxis.title.text == "time (ms) from the step start"


def test_short_kernel_names():
    assert (
        short_kernel_name("void at::native::vectorized_elementwise_kernel<4, float>(int, float*)")
        == "at::native::vectorized_elementwise_kernel"
    )
    assert (
        short_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)")
        == "ncclKernel_AllReduce_RING_LL_Sum_float"
    )
    assert len(short_kernel_name("k" * 200)) == 60


def test_gpu_breakdowns_from_report_rows():
    # the gpu_timeline result stores tables as lists of row dicts (core/analysis/gpu_report.py)
    result = {
        "ranks": [0, 1],
        "temporal": [
            {
                "rank": 0,
                "kernel_time_us": 1000.0,
                "idle_us": 500.0,
                "compute_us": 300.0,
                "non_compute_us": 200.0,
                "idle_pct": 50.0,
                "compute_pct": 30.0,
                "non_compute_pct": 20.0,
            },
            {
                "rank": 1,
                "kernel_time_us": 2000.0,
                "idle_us": 200.0,
                "compute_us": 1600.0,
                "non_compute_us": 200.0,
                "idle_pct": 10.0,
                "compute_pct": 80.0,
                "non_compute_pct": 10.0,
            },
        ],
        "idle": [
            {"rank": 0, "stream": 7, "host_wait_us": 100.0, "kernel_wait_us": 20.0, "other_us": 0.0},
            {"rank": 0, "stream": 9, "host_wait_us": 50.0, "kernel_wait_us": 0.0, "other_us": 30.0},
            {"rank": 1, "stream": 7, "host_wait_us": 10.0, "kernel_wait_us": 5.0, "other_us": 0.0},
        ],
        "kernel_types": {
            "by_kind": [
                {"rank": 0, "kind": "compute", "busy_us": 300.0},
                {"rank": 0, "kind": "communication", "busy_us": 150.0},
                {"rank": 0, "kind": "memory", "busy_us": 50.0},
            ],
            "top_kernels": [
                {"kind": "compute", "name": "gemm", "count": 3, "sum_us": 200.0, "pct_of_kind": 66.7},
                {"kind": "communication", "name": "nccl", "count": 1, "sum_us": 900.0, "pct_of_kind": 100.0},
            ],
        },
        "stragglers": {
            "per_rank": [
                {"step": 5, "rank": 0, "compute_vs_median": 0.9, "is_straggler": False},
                {"step": 5, "rank": 1, "compute_vs_median": 1.3, "is_straggler": True},
            ]
        },
    }
    assert as_columns(result["temporal"])["idle_pct"] == [50.0, 10.0]
    temporal = temporal_breakdown_figure(result["temporal"])
    idle_bar = next(t for t in temporal.data if t.name == "idle")
    assert list(idle_bar.x) == [50.0, 10.0]
    idle = idle_breakdown_figure(result["idle"])
    host = next(t for t in idle.data if t.name == "host wait")
    assert list(host.x) == [pytest.approx(0.15), pytest.approx(0.01)]  # ms, streams summed
    kinds = kernel_kind_figure(result["kernel_types"]["by_kind"])
    assert next(t for t in kinds.data if t.name == "communication").x[0] == pytest.approx(0.15)
    strag = straggler_figure(result["stragglers"]["per_rank"])
    assert [list(t.x) for t in strag.data] == [[0], [1]] and strag.data[1].name == "straggler"
    top = top_kernels_rows(result["kernel_types"]["top_kernels"])
    assert [r["name"] for r in top] == ["nccl", "gemm"] and top[0]["sum_ms"] == pytest.approx(0.9)


# -- imbalance, long tail, multi-turn -------------------------------------------------
@pytest.fixture
def imbalance_result():
    def load(recorded, kk, lpt):
        mean = sum(recorded) / len(recorded)
        return {
            "recorded": recorded,
            "mean": mean,
            "recorded_max": max(recorded),
            "max_over_mean": max(recorded) / mean,
            "max_over_min": max(recorded) / min(recorded),
            "kk_max_over_mean": kk / mean,
            "lpt_max_over_mean": lpt / mean,
            "kk_saving": 1 - kk / max(recorded),
            "lpt_saving": 1 - lpt / max(recorded),
        }

    return {
        "dp_size": 2,
        "steps": [{"step": 0, "tokens": load([300, 100], 210, 220)}, {"step": 1, "tokens": load([100, 100], 100, 100)}],
        "summary": {
            "tokens": {
                "max_over_mean": {"mean": 1.25, "max": 1.5},
                "max_over_min": {"mean": 2.0},
                "kk_time_saved": 0.2625,
                "lpt_time_saved": 0.25,
            }
        },
    }


def test_imbalance_figures(imbalance_result):
    hm = load_heatmap_figure(imbalance_result).data[0]
    assert np.allclose(np.array(hm.z, dtype=float), [[1.5, 1.0], [0.5, 1.0]])  # ranks x steps, load / mean
    assert hm.customdata[0][0] == 300
    ratio = imbalance_ratio_figure(imbalance_result)
    assert [t.name for t in ratio.data] == ["recorded", "Karmarkar-Karp", "LPT"]
    assert list(ratio.data[1].y) == [pytest.approx(1.05), pytest.approx(1.0)]
    saving = saving_figure(imbalance_result)
    assert saving.data[0].y[0] == pytest.approx(30.0)  # 1 - 210/300
    s = saving_summary(imbalance_result)
    assert s["kk_time_saved"] == pytest.approx(0.2625) and s["max_over_mean"] == pytest.approx(1.25)


def test_longtail_figures():
    result = {
        "tail_fraction": 0.1,
        "engine_key": "dp_rank",
        "steps": [
            {
                "step": 0,
                "engine_time": 200.0,
                "idle_within_engines": 50.0,
                "idle_waiting": 30.0,
                "tail_time_share": 0.4,
                "tail_sample_share": 0.05,
                "tail_seconds": 12.0,
                "engine": {"engine": [0, 1], "idle_fraction": [0.25, 0.5]},
            }
        ],
    }
    idle = longtail_idle_figure(result)
    assert idle.data[0].y[0] == pytest.approx(25.0) and idle.data[1].y[0] == pytest.approx(15.0)
    finish = longtail_finish_figure(result)
    assert finish.data[0].y[0] == pytest.approx(40.0)
    eng = longtail_engine_figure(result)
    assert [row[0] for row in eng.data[0].z] == [pytest.approx(25.0), pytest.approx(50.0)]


def test_multiturn_and_latency_figures():
    mt = {
        "steps": [
            {
                "step": 0,
                "turns_mean": 2.5,
                "turns_max": 4,
                "tool_calls_mean": 1.5,
                "tool_calls_max": 3,
                "cache_hit_rate": 0.6,
            }
        ],
        "summary": {
            "turns_hist": [0, 3, 5, 2],
            "tool_calls_hist": [1, 4, 5],
            "by_turn": {
                "turn": [0, 1],
                "prompt_mean": [500.0, 900.0],
                "cached_mean": [0.0, 450.0],
                "completion_mean": [100.0, 120.0],
            },
            "latency_fit": {"a": 0.5, "b": 0.1, "c": 2.0, "r2": 0.9},
            "latency_by_prompt": {
                "bin_lo": [256, 512],
                "bin_hi": [304, 609],
                "count": [10, 5],
                "latency_mean": [1.0, 1.5],
            },
        },
    }
    counts = counts_hist_figure(mt)
    assert list(counts.data[0].y) == [0, 3, 5, 2] and list(counts.data[1].y) == [1, 4, 5]
    assert cache_hit_figure(mt).data[0].y[0] == pytest.approx(60.0)
    assert list(context_growth_figure(mt).data[0].y) == [500.0, 900.0]
    lat = latency_vs_tokens_figure(mt)
    assert lat.data[0].x[0] == pytest.approx((256 * 304) ** 0.5) and "R² 0.90" in lat.layout.title.text
    latency = {
        "reward": [
            {
                "step": 0,
                "rank": [0, 1, 2],
                "seconds": [1.0, 2.0, 6.0],
                "p50": 2.0,
                "p90": 5.2,
                "p99": 5.92,
                "max": 6.0,
                "t_reward": 6.5,
            }
        ],
        "tools": [{"step": 0, "p50": 0.2, "p90": 0.9, "p99": 1.9, "max": 2.0}],
    }
    rw = reward_latency_figure(latency)
    assert [t.name for t in rw.data] == ["p50", "p90", "p99", "max", "measured t_reward"]
    assert rw.data[3].y[0] == 6.0
    assert [row[0] for row in reward_ranks_figure(latency).data[0].z] == [1.0, 2.0, 6.0]
    assert tool_latency_figure(latency).data[2].y[0] == 1.9


# -- overview, compare, payload helpers -----------------------------------------------
def test_overview_cards(summary, lengths, imbalance_result):
    trace = {"n_steps": 5, "n_samples": 2000, "n_turns": 0}
    steps = [
        {"step": s, "prompt_tokens": 100, "response_tokens": int(v.sum()), "validate": s == 4}
        for s, v in lengths.items()
    ]
    longtail = {"summary": {"idle_fraction": {"mean": 0.42, "max": 0.6}}}
    cards = {
        c.key: c for c in overview_cards(trace, steps, summary, {"imbalance": imbalance_result, "longtail": longtail})
    }
    total = 500 + int(sum(v.sum() for v in lengths.values()))
    assert 1e6 <= total < 1e7 and cards["tokens"].value == f"{total / 1e6:.2f} M"
    tails = sorted(v.max() / v.mean() for v in lengths.values())
    assert cards["tail"].value == f"{tails[2]:.2f}x"
    assert cards["imbalance"].value == "1.25x" and "26.2%" in cards["imbalance"].hint
    assert cards["idle"].value == "42.0%"
    assert cards["steps"].hint == "1 validation"


def test_overview_cards_of_a_gpu_trace():
    trace = {
        "n_steps": 0,
        "n_samples": 0,
        "n_gpu_events": 2358,
        "metadata": {"kineto": {"steps": {"0": [[551, 0.0, 1.0], [552, 1.0, 2.0]], "1": [[551, 0.0, 1.0]]}}},
    }
    gpu = {"temporal": [{"rank": 0, "idle_pct": 53.56}, {"rank": 1, "idle_pct": 54.72}]}
    cards = {c.key: c for c in overview_cards(trace, [], None, {"gpu_timeline": gpu})}
    assert cards["steps"].value == "2"
    assert cards["samples"].hint == "2,358 GPU events"
    assert cards["idle"].value == "54.1%" and "GPU idle" in cards["idle"].hint
    assert cards["tail"].value == "—" and cards["imbalance"].value == "—"


def test_compare_figures(summary, lengths):
    other = {**summary, "steps": summary["steps"][:2]}
    fig = compare_percentiles_figure(summary, other, ("A", "B"), ("p50", "p99"))
    assert [t.name for t in fig.data] == ["A p50", "A p99", "B p50", "B p99"]
    assert fig.data[0].line.color == theme.TRACE_COLORS[0] and fig.data[2].line.color == theme.TRACE_COLORS[1]
    pooled = pooled_hist(summary)
    assert sum(pooled) == sum(len(v) for v in lengths.values())
    cdf = compare_cdf_figure(summary, other, ("A", "B"))
    all_v = np.concatenate(list(lengths.values()))
    i = len(cdf.data[0].x) // 2
    assert cdf.data[0].y[i] == pytest.approx((all_v < cdf.data[0].x[i]).mean())


def test_jobs_lookup():
    jobs = [
        {"id": 1, "kind": "imbalance", "status": "succeeded", "result": {"v": 1}, "created_at": "2026-01-01T00:00"},
        {"id": 2, "kind": "imbalance", "status": "running", "result": None, "created_at": "2026-01-02T00:00"},
        {"id": 3, "kind": "longtail", "status": "failed", "created_at": "2026-01-03T00:00"},
    ]
    assert latest_job(jobs, "imbalance")["id"] == 2
    assert latest_result(jobs, "imbalance") == {"v": 1}
    assert latest_result(jobs, "longtail") is None and latest_job(jobs, "multiturn") is None
    # lists come without results: the latest succeeded job is the one whose result to fetch
    assert latest_succeeded([{**j, "result": None} for j in jobs], "imbalance")["id"] == 1
    assert latest_succeeded(jobs, "longtail") is None


def test_kineto_metadata_helpers():
    trace = {
        "metadata": {
            "kineto": {"ranks": [0, 1], "steps": {"0": [[5, 100.0, 200.0], [6, 200.0, 300.0]], "1": [[5, 90.0, 210.0]]}}
        }
    }
    assert kineto_steps(trace) == [5, 6]
    assert step_window(trace, 5) == (90.0, 210.0)
    assert step_window(trace, 5, [0]) == (100.0, 200.0)
    assert step_window(trace, 7) is None
    assert zoom_range({"xaxis.range[0]": 1.5, "xaxis.range[1]": 2.5}) == (1.5, 2.5)
    assert zoom_range({"xaxis.autorange": True}) is None


def test_token_labels_and_log_axis_ticks():
    assert token_label(16384) == "16k" and token_label(1 << 20) == "1M" and token_label(300) == "300"
    fig = styled_figure("t", x_title="a", y_title="b")
    log_token_axis(fig, "x", 100, 9000)
    assert list(fig.layout.xaxis.tickvals) == [2.0**e for e in range(6, 15)]


# -- the theme: one colour per stage / GPU kind / policy on every page --------------------
# Payloads are what the API serves: trace rows of a synthetic trace (tests/helpers.py) and
# the results of the real core analyses and simulator on it.
def trace_colors(fig) -> dict[str, str]:
    """{trace name: its colour} (bars: marker colour, lines: line colour)."""
    out = {}
    for tr in fig.data:
        color = tr.marker.color if tr.type == "bar" else tr.line.color
        if color is None and getattr(tr, "marker", None) is not None:
            color = tr.marker.color  # legend-only marker entries
        out[tr.name] = color
    return out


def rows_of(columns: dict) -> list[dict]:
    """Column arrays as the API's row dicts."""
    return [dict(zip(columns, values)) for values in zip(*(np.asarray(v).tolist() for v in columns.values()))]


def simulated(kind: str) -> dict:
    """A replay result of the synthetic packed trace, as the worker stores it."""
    from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, simulate, workload_from_columns
    from core.simulator.replay import sim_dict
    from core.workload.polytrace_rows import packed_rows_to_columns
    from tests.helpers import synthetic_rows

    per_step = synthetic_rows(steps=3, groups=8, n=4)
    steps = workload_from_columns(packed_rows_to_columns([r for rows in per_step for r in rows]))
    cluster = ClusterConfig.from_dict(
        {"gpu": "H100", "n_gpus": 16, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8}
    )
    return sim_dict(simulate(steps, cluster, MODEL_PRESETS["Qwen2.5-7B"], EngineLimits(), Policy(kind=kind)))


def test_a_stage_has_the_themes_colour_on_every_page():
    from tests.helpers import synthetic_trace_tables

    tables = synthetic_trace_tables()
    steps = rows_of(tables["steps"])
    rank_timings = [r for r in rows_of(tables["rank_timings"]) if r["step"] == 0]
    stage_of = {label: stage for stage, label in theme.STAGE_LABELS.items()}

    per_step = trace_colors(stage_time_figure(steps))
    per_rank = trace_colors(stage_gantt_figure(steps[0], rank_timings, step_no=0))
    assert {stage_of[n] for n in per_step} >= set(theme.STAGES)
    assert {stage_of[n] for n in per_rank} >= {"gen", "reward", "old_log_prob", "update_actor", "wait"}
    for figure in (per_step, per_rank):
        for name, color in figure.items():
            assert color == theme.STAGE_COLORS[stage_of[name]], name
        assert len(set(figure.values())) == len(figure)  # no two stages share a colour

    # the simulated GPU timeline and its idle split: busy stages in the measured stage
    # colours (the rollout is generation), idle causes in one colour on both figures
    a, b = simulated("sync"), simulated("one_step_off")
    timeline = trace_colors(timeline_figure(a)) | trace_colors(timeline_figure(b))
    sim_stage_of = {label: stage for stage, label in theme.SIM_STAGE_LABELS.items()}
    cause_of = {f"idle: {label}": cause for cause, label in theme.SIM_IDLE_LABELS.items()}
    busy = {sim_stage_of[n]: c for n, c in timeline.items() if n in sim_stage_of}
    idle = {cause_of[n]: c for n, c in timeline.items() if n in cause_of}
    assert set(busy) >= {"rollout", "old_log_prob", "ref", "update_actor", "weight_sync"}
    assert set(idle) >= {"rollout_tail", "dp_imbalance"}
    assert set(timeline) <= set(sim_stage_of) | set(cause_of)  # every category is a stage or a cause
    assert busy["rollout"] == per_step[theme.STAGE_LABELS["gen"]]
    for stage in ("old_log_prob", "ref", "update_actor"):
        assert busy[stage] == per_step[theme.STAGE_LABELS[stage]] == theme.STAGE_COLORS[stage]
    assert busy["weight_sync"] == theme.SIM_STAGE_COLORS["weight_sync"]
    job = {
        "params": {"policy": {"kind": "sync"}, "compare_policy": {"kind": "one_step_off"}},
        "result": {"a": a, "b": b},
    }
    by_cause = {cause_of["idle: " + n]: c for n, c in trace_colors(idle_cause_figure(job)).items()}
    assert set(by_cause) >= set(idle)
    for cause, color in by_cause.items():
        assert color == theme.SIM_IDLE_COLORS[cause], cause
        assert idle.get(cause, color) == color, cause  # the same cause, the same colour on the timeline


def test_a_gpu_kind_has_the_themes_colour_on_every_gpu_figure():
    from core.analysis.gpu_timeline import KIND_NAMES
    from core.analysis.registry import run_analysis
    from core.analysis.tables import TraceData
    from tests.helpers import SYNTHETIC_GPU_NAMES, synthetic_trace_tables

    events = synthetic_trace_tables()["gpu_events"]
    result = run_analysis("gpu_timeline", TraceData.from_tables({"gpu_events": events}, gpu_names=SYNTHETIC_GPU_NAMES))
    listed = [  # GET /traces/{id}/gpu-events items
        {**e, "kind": KIND_NAMES[e["kind"]], "name": SYNTHETIC_GPU_NAMES[e["name_id"]]} for e in rows_of(events)
    ]
    by_kind = trace_colors(kernel_kind_figure(result["kernel_types"]["by_kind"]))
    gantt = trace_colors(kernel_gantt_figure(listed))
    temporal = trace_colors(temporal_breakdown_figure(result["temporal"]))
    idle = trace_colors(idle_breakdown_figure(result["idle"]))

    kinds = set(KIND_NAMES.values())
    assert set(by_kind) == kinds and kinds <= set(gantt)
    for k in kinds:
        assert by_kind[k] == gantt[k] == theme.GPU_KIND_COLORS[k], k
    assert len({by_kind[k] for k in kinds}) == len(kinds)
    assert temporal["compute"] == by_kind["compute"]
    assert temporal["idle"] == gantt["idle (no stream busy)"] == theme.GPU_KIND_COLORS["idle"]
    assert temporal["communication / memory"] == theme.GPU_KIND_COLORS["non_compute"]
    assert idle == {
        "host wait": theme.IDLE_CAUSE_COLORS["host_wait"],
        "kernel wait": theme.IDLE_CAUSE_COLORS["kernel_wait"],
        "other": theme.IDLE_CAUSE_COLORS["other"],
    }


def test_a_balancing_policy_has_the_themes_colour_on_every_imbalance_figure():
    from core.analysis.registry import run_analysis
    from core.analysis.tables import TraceData
    from dashboard.figures.imbalance import POLICY_LABELS
    from tests.helpers import synthetic_trace_tables

    result = run_analysis("imbalance", TraceData.from_tables({"samples": synthetic_trace_tables()["samples"]}))
    ratio = trace_colors(imbalance_ratio_figure(result))
    saving = trace_colors(saving_figure(result))
    assert ratio[POLICY_LABELS["recorded"]] == theme.POLICY_COLORS["measured"]
    for policy in ("kk", "lpt"):
        assert ratio[POLICY_LABELS[policy]] == theme.POLICY_COLORS[policy]
    assert len(set(ratio.values())) == 3
    # the saving is the best split's (whichever it is), drawn in the balancing colour
    assert saving == {"best split": theme.POLICY_COLORS["kk"]}


# -- simulator replays (dashboard/figures/simulation.py) ----------------------------------
def sim_payload() -> dict:
    """A hand-made simulation job: 3 steps under sync (A) and one_step_off (B), calibrated
    on step 0, with a two-lane timeline."""
    a_times, b_times = [10.0, 12.0, 8.0], [10.0, 9.0, 6.0]

    def sim(times, rollout, idle):
        steps, t = [], 0.0
        for s, (dt, r, idl) in enumerate(zip(times, rollout, idle)):
            steps.append(
                {"step": s, "start": t, "end": t + dt, "step_time": dt, "stages": {"rollout": r}, "idle_gpu_s": idl}
            )
            t += dt
        return {
            "makespan_s": t,
            "n_gpus": 4,
            "idle_fraction": 0.25,
            "steps": steps,
            "timeline": [
                {
                    "name": "replica 0 / dp 0",
                    "gpus": [0, 1],
                    "intervals": [
                        [0.0, 6.0, "busy", "rollout", 0],
                        [6.0, 7.5, "idle", "rollout_tail", 0],
                        [7.5, 10.0, "busy", "update_actor", 0],
                    ],
                },
                {"name": "unused GPUs", "gpus": [2, 3], "intervals": [[0.0, 10.0, "idle", "unused", 0]]},
            ],
            "timeline_truncated": None,
        }

    idle_a = [{"rollout_tail": 3.0, "unused": 1.0}, {"rollout_tail": 4.0}, {"dp_imbalance": 2.0}]
    result = {
        "a": sim(a_times, [6.0, 7.0, 5.0], idle_a),
        "b": sim(b_times, [6.0, 7.0, 5.0], [{"stage_serialisation": 5.0}] * 3),
        "compare": {
            "total": {"speedup": sum(a_times) / sum(b_times), "saved_s": sum(a_times) - sum(b_times)},
            "per_step": [
                {"step": s, "time_a_s": a, "time_b_s": b, "speedup": a / b, "saved_s": a - b}
                for s, (a, b) in enumerate(zip(a_times, b_times))
            ],
        },
        "accuracy": {
            "fit_steps": [0],
            "steps": [
                {
                    "step": s,
                    "rollout_s": {
                        "measured": m,
                        "predicted": p,
                        "naive": 6.5,
                        "accuracy": 1 - abs(p - m) / m,
                        "naive_accuracy": 1 - abs(6.5 - m) / m,
                    },
                }
                for s, m, p in ((1, 7.5, 7.0), (2, 5.5, 5.0))
            ],
            "mean": {
                "rollout_s_accuracy": np.mean([1 - 0.5 / 7.5, 1 - 0.5 / 5.5]),
                "rollout_s_naive_accuracy": np.mean([1 - 1.0 / 7.5, 1 - 1.0 / 5.5]),
                "p50_traj_s_accuracy": 0.9,
                "p50_traj_s_naive_accuracy": None,
                "p90_traj_s_accuracy": None,
                "p90_traj_s_naive_accuracy": None,
            },
        },
        "calibration": {"fit_steps": [0]},
    }
    return {
        "id": 5,
        "status": "succeeded",
        "result": result,
        "params": {"policy": {"kind": "sync"}, "compare_policy": {"kind": "one_step_off"}},
    }


def test_predicted_vs_measured_draws_each_series():
    job = sim_payload()
    trace_steps = [{"step": 0, "t_gen": 6.2, "t_step": 10.5}, {"step": 1, "t_gen": None, "t_step": 11.0}]
    fig = predicted_vs_measured_figure(job, trace_steps)
    by = {t.name: t for t in fig.data}
    # measured rollout: the trace's t_gen where logged, the accuracy report's measurement elsewhere
    assert list(by["measured rollout"].x) == [0, 1, 2]
    assert list(by["measured rollout"].y) == [6.2, 7.5, 5.5]
    assert list(by["predicted rollout"].y) == [6.0, 7.0, 5.0]
    assert list(by["naive rollout (mean of fitted steps)"].y) == [6.5, 6.5]
    assert list(by["measured step"].y) == [10.5, 11.0]
    assert list(by["predicted step (sync)"].y) == [10.0, 12.0, 8.0]
    assert list(by["predicted step (one_step_off)"].y) == [10.0, 9.0, 6.0]
    assert fig.layout.shapes[0].x0 == -0.5 and fig.layout.shapes[0].x1 == 0.5  # the fitted step is shaded
    assert fig.layout.yaxis.title.text == theme.UNITS["seconds"]


def test_accuracy_rows_and_cards_report_the_api_figures():
    job = sim_payload()
    rows = {r["metric"]: r for r in accuracy_rows(job["result"])}
    assert rows["rollout_s"]["calibrated"] == pytest.approx(1 - (0.5 / 7.5 + 0.5 / 5.5) / 2)
    assert rows["rollout_s"]["naive"] == pytest.approx(1 - (1 / 7.5 + 1 / 5.5) / 2)
    assert rows["rollout_s"]["steps"] == 2
    assert rows["p50_traj_s"]["naive"] is None and "p90_traj_s" not in rows
    cards = {c["key"]: c for c in summary_cards(job)}
    assert cards["speedup"]["value"] == f"{30 / 25:.3f}x" and "sync" in cards["speedup"]["hint"]
    assert cards["makespan-a"]["value"] == "30.0 s" and cards["makespan-b"]["value"] == "25.0 s"
    assert cards["accuracy-rollout"]["value"] == f"{100 * rows['rollout_s']['calibrated']:.1f}%"
    no_b = {
        **job,
        "params": {"policy": {"kind": "partial"}},
        "result": {**job["result"], "b": None, "compare": None, "accuracy": None},
    }
    keys = [c["key"] for c in summary_cards(no_b)]
    assert keys == ["makespan-a", "accuracy-rollout"]
    assert policy_names({"params": {"policy": {"kind": "sync"}, "compare_policy": {"kind": "sync"}}}) == (
        "sync (A)",
        "sync (B)",
    )


def test_speedup_and_idle_cause_figures():
    job = sim_payload()
    fig = speedup_figure(job)
    bars = fig.data[0]
    assert list(bars.x) == [0, 1, 2]
    assert list(bars.y) == pytest.approx([1.0, 12 / 9, 8 / 6])
    overall = next(t for t in fig.data if t.name == "overall 1.200x")  # the overall line, named in the legend
    assert list(overall.y) == pytest.approx([30 / 25, 30 / 25])
    assert "1.200x overall" in fig.layout.title.text
    assert (
        "Choose a policy B"
        in speedup_figure({**job, "params": {"policy": {"kind": "sync"}}}).layout.annotations[0].text
    )

    idle = idle_cause_figure(job)
    a_traces = {t.name: t for t in idle.data if t.xaxis == "x"}
    b_traces = {t.name: t for t in idle.data if t.xaxis == "x2"}
    tail = theme.SIM_IDLE_LABELS["rollout_tail"]
    assert list(a_traces[tail].y) == [3.0, 4.0, 0.0]
    assert list(a_traces[theme.SIM_IDLE_LABELS["dp_imbalance"]].y) == [0.0, 0.0, 2.0]
    assert list(b_traces[theme.SIM_IDLE_LABELS["stage_serialisation"]].y) == [5.0, 5.0, 5.0]
    assert idle.layout.barmode == "stack"
    assert a_traces[tail].marker.color == theme.SIM_IDLE_COLORS["rollout_tail"]


def test_timeline_draws_every_interval_in_its_lane():
    job = sim_payload()
    fig = timeline_figure(job["result"]["a"], policy="A: sync")
    by = {t.name: t for t in fig.data}
    rollout = by[theme.SIM_STAGE_LABELS["rollout"]]
    assert rollout.type == "scatter" and rollout.mode == "lines"  # a short timeline: every interval, as SVG
    x, y = np.asarray(rollout.x, dtype=float), np.asarray(rollout.y, dtype=float)
    assert list(x[:2]) == [0.0, 6.0] and np.isnan(x[2]) and list(y[:2]) == [0, 0]
    unused = by["idle: " + theme.SIM_IDLE_LABELS["unused"]]
    assert list(np.asarray(unused.x, dtype=float)[:2]) == [0.0, 10.0] and list(np.asarray(unused.y)[:2]) == [1, 1]
    assert list(fig.layout.yaxis.ticktext) == ["replica 0 / dp 0 (GPU 0-1)", "unused GPUs (GPU 2-3)"]


def test_timeline_downsampling_keeps_lanes_spread_and_the_longest_intervals():
    rng = np.random.default_rng(1)
    lanes = []
    for i in range(100):
        cuts = np.sort(rng.uniform(0, 1000, 51))
        lanes.append(
            {
                "name": f"lane {i}",
                "gpus": [i],
                "intervals": [[float(a), float(b), "busy", "rollout", 0] for a, b in zip(cuts[:-1], cuts[1:])],
            }
        )
    t = timeline_arrays({"timeline": lanes}, max_lanes=10, max_intervals=100)
    assert t["shown_lanes"] == 10 and t["total_lanes"] == 100
    assert t["lanes"][0].startswith("lane 0 ") and t["lanes"][-1].startswith("lane 99 ")
    assert t["shown_intervals"] == 100 and t["total_intervals"] == 500
    kept = np.sort(t["end"] - t["start"])
    shown_lanes = [lanes[i] for i in np.unique(np.linspace(0, 99, 10).round().astype(int))]
    every = np.sort([iv[1] - iv[0] for lane in shown_lanes for iv in lane["intervals"]])
    assert kept == pytest.approx(every[-100:])  # the longest ones
    fig = timeline_figure({"timeline": lanes, "timeline_truncated": {"last_step": 3}}, max_lanes=10, max_intervals=100)
    assert "10 of 100 lanes" in fig.layout.title.text and "steps up to 3" in fig.layout.title.text


# -- workload fit (dashboard/figures/workload.py) -----------------------------------------
def test_fit_report_rows_and_ks_figure():
    result = {
        "fit": {
            "math": {
                "n_samples": 400,
                "prompt": {"lognorm": 0.04, "gamma": 0.07},
                "response": {"lognorm": 0.03, "gamma": None},
                "joint_gmm": {"components": 3, "ks_prompt": 0.02, "ks_response": 0.05},
                "tail": {"threshold": None, "ks": None},
                "truncation_rate": 0.01,
                "intra_group_corr": 0.4,
                "trend": {"mean_tokens_per_step": 12.5},
            },
            "tool": {"n_samples": 100, "prompt": {"lognorm": 0.1}, "multiturn": {"tool_latency": 0.2}},
        }
    }
    rows = fit_rows(result)
    assert [(r["task"], r["fit"], r["ks"]) for r in rows] == [
        ("math", "prompt length, lognormal", 0.04),
        ("math", "prompt length, gamma", 0.07),
        ("math", "response length, lognormal", 0.03),
        ("math", "joint mixture (3 components), prompt", 0.02),
        ("math", "joint mixture (3 components), response", 0.05),
        ("tool", "prompt length, lognormal", 0.1),
        ("tool", "tool latency", 0.2),
    ]
    fig = fit_ks_figure(result)
    assert [t.name for t in fig.data] == ["math", "tool"]
    assert list(fig.data[0].x) == [0.04, 0.07, 0.03, 0.02, 0.05]
    assert list(fig.data[1].y) == ["tool: prompt length, lognormal", "tool: tool latency"]
    assert task_summary(result)[0] == {
        "task": "math",
        "samples": 400,
        "truncation_rate": 0.01,
        "intra_group_corr": 0.4,
        "tokens_per_step": 12.5,
    }
    assert "No fit" in fit_ks_figure({"fit": None}).layout.annotations[0].text


# -- replay and workload forms (dashboard/views/replay_forms.py) ---------------------------------
PRESETS = {
    "policies": ["sync", "one_step_off", "partial", "async"],
    "defaults": {
        "policy_kind": "sync",
        "compare_policy": "one_step_off",
        "cluster": {"gpu": "H100", "n_gpus": 8, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8, "train_tp": 1},
        "model": "Qwen2.5-7B",
        "limits": {"max_running_seqs": 256, "kv_cache_tokens": None},
        "policy": {"kind": "sync", "balancing": "none"},
    },
}


def test_form_defaults_leave_the_layout_to_the_budget():
    d = form_defaults(PRESETS, [0, 1, 5])
    assert (d["policy_a"], d["policy_b"]) == ("sync", "one_step_off")
    # one GPU budget for both policies; the API derives each policy's layout from it
    assert d["n_gpus"] == 8 and d["replicas"] is None and d["tp"] is None and d["train_dp"] is None
    assert (d["step_from"], d["step_to"]) == (0, 6)
    assert d["gpu"] == "H100" and d["model"] == "Qwen2.5-7B" and d["max_running_seqs"] == 256


def test_simulation_body_from_the_form():
    values = {
        **form_defaults(PRESETS, [0, 1, 2]),
        "calibrate": "on",
        "fit_steps": "0, 1",
        "kv_cache_tokens": 100000,
        "balancing": "kk",
        "step_to": 2,
    }
    body = simulation_body(7, values)
    assert body == {
        "trace_id": 7,
        "cluster": {"gpu": "H100", "n_gpus": 8},
        "model": "Qwen2.5-7B",
        "limits": {"max_running_seqs": 256, "kv_cache_tokens": 100000},
        "policy": {"kind": "sync", "balancing": "kk"},
        "compare_policy": {"kind": "one_step_off", "balancing": "kk"},
        "calibrate": {"fit_steps": [0, 1]},
        "steps": [0, 2],
    }
    off = simulation_body(7, {**values, "calibrate": "off", "policy_b": None, "step_from": None, "step_to": None})
    assert off["calibrate"] is False and "compare_policy" not in off and "steps" not in off
    assert "calibrate" not in simulation_body(7, {**values, "calibrate": "auto"})
    assert parse_steps(" 3;4  5 ") == [3, 4, 5]
    with pytest.raises(ValueError, match="'x' is not a step"):
        parse_steps("1, x")


def test_workload_body_from_the_form():
    assert workload_body(3, {}, fit_only=True) == {"trace_id": 3, "steps": 0, "ingest": False}
    body = workload_body(
        3,
        {
            "steps": 4,
            "groups": 16,
            "samples_per_group": None,
            "seed": 2,
            "formats": ["packed"],
            "ingest": True,
            "name": "twin",
            "task": None,
            "dp_size": 2,
        },
    )
    assert body == {
        "trace_id": 3,
        "steps": 4,
        "seed": 2,
        "ingest": True,
        "groups": 16,
        "dp_size": 2,
        "formats": ["packed"],
        "name": "twin",
    }


def test_long_timeline_is_sampled_into_one_image():
    # lane 0: rollout [0, 6), idle tail [6, 7.5), update [7.5, 10); lane 1 idle [0, 10)
    job = sim_payload()
    fig = timeline_figure(job["result"]["a"], raster_above=0, bins=20)
    heat = next(t for t in fig.data if t.type == "heatmap")
    z = np.asarray(heat.z, dtype=float)
    centres = np.asarray(heat.x, dtype=float)
    assert centres == pytest.approx((np.arange(20) + 0.5) * 0.5)
    names = [t.name for t in fig.data if t.type == "scatter"]  # the legend, in stage-then-idle order
    rollout = names.index("rollout")
    tail = names.index("idle: " + theme.SIM_IDLE_LABELS["rollout_tail"])
    update = names.index(theme.SIM_STAGE_LABELS["update_actor"])
    expected0 = np.where(centres < 6, rollout, np.where(centres < 7.5, tail, update))
    assert list(z[0]) == list(expected0)
    assert set(z[1]) == {names.index("idle: " + theme.SIM_IDLE_LABELS["unused"])}
    assert heat.text[0][0] == "rollout" and heat.text[0][13] == "idle: rollout tail"
    assert "sampled at 20 times" in fig.layout.title.text
    # the colour of each category's band is its theme colour
    scale = {round(float(v), 6): c for v, c in heat.colorscale}
    assert scale[round(rollout / len(names), 6)] == theme.SIM_STAGE_COLORS["rollout"]


def test_many_steps_draw_as_areas_not_thousands_of_bars():
    few = [{"step": s, "t_gen": 1.0 + s, "t_update_actor": 2.0, "t_step": 5.0 + s} for s in range(10)]
    many = [{"step": s, "t_gen": 1.0 + s, "t_update_actor": 2.0, "t_step": 5.0 + s} for s in range(500)]
    assert {t.type for t in stage_time_figure(few).data} == {"bar"}
    fig = stage_time_figure(many)
    assert {t.type for t in fig.data} == {"scatter"} and {t.stackgroup for t in fig.data} == {"one"}
    gen = next(t for t in fig.data if t.name == theme.STAGE_LABELS["gen"])
    assert list(gen.y) == [1.0 + s for s in range(500)]
    other = next(t for t in fig.data if t.name == theme.STAGE_LABELS["other"])
    assert list(other.y)[:2] == [2.0, 2.0]  # t_step minus the named stages, as for bars
    # replay per-step figures likewise
    job = sim_payload()
    steps = [
        {
            "step": s,
            "start": 0,
            "end": 1,
            "step_time": 1.0,
            "stages": {"rollout": 0.5},
            "idle_gpu_s": {"rollout_tail": 2.0},
        }
        for s in range(300)
    ]
    long_job = {
        **job,
        "result": {
            **job["result"],
            "a": {**job["result"]["a"], "steps": steps},
            "b": {**job["result"]["b"], "steps": steps},
            "compare": {
                "total": {"speedup": 1.0},
                "per_step": [{"step": s, "speedup": 1.0 + s / 1000, "saved_s": 0.0} for s in range(300)],
            },
        },
    }
    assert {t.type for t in speedup_figure(long_job).data} == {"scatter"}
    idle = idle_cause_figure(long_job)
    assert {t.stackgroup for t in idle.data} == {"a", "b"}  # one stack per policy panel
