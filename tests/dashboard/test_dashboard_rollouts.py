"""The reward-vs-length figures fed with the analysis' real output, and the max marker's
drill-down (the step's samples, longest first) on the real box figure."""

from __future__ import annotations

import pytest

from core.analysis.registry import run_analysis
from dashboard.figures.distributions import length_box_figure
from dashboard.figures.reward_length import repetition_figure, reward_bucket_figure, tail_reward_figure
from dashboard.views.drill import FOCUS, LONGEST_FIRST, drill_params
from tests.core.analysis.test_analysis_reward_length import data_of, rows


@pytest.fixture(scope="module")
def result():
    return run_analysis("reward_length", data_of(rows()))


def test_tail_figure_holds_the_shares_in_percent(result):
    fig = tail_reward_figure(result)
    by_name = {t.name: t for t in fig.data}
    steps = result["steps"]
    assert list(by_name["longest 10%"].x) == [r["step"] for r in steps]
    assert list(by_name["longest 10%"].y) == pytest.approx([100 * r["tail_no_reward_share"] for r in steps])
    assert list(by_name["the rest"].y) == pytest.approx([100 * r["rest_no_reward_share"] for r in steps])
    symbols = list(by_name["longest 10%"].marker.symbol)
    assert symbols[-1] == "circle-open" and symbols[0] == "circle"  # the partial step is hollow


def test_repetition_and_bucket_figures(result):
    rep = {t.name: t for t in repetition_figure(result).data}
    assert list(rep["all responses"].y) == pytest.approx([100 * r["repetition_share"] for r in result["steps"]])
    heat = reward_bucket_figure(result).data[0]
    cells = {(b["step"], b["bucket"]): b["mean_reward"] for b in result["buckets"]}
    buckets = sorted({b["bucket"] for b in result["buckets"]})
    checked = 0
    for i, bucket in enumerate(buckets):
        for j, step in enumerate(heat.x):
            if (step, bucket) in cells:
                assert heat.z[i][j] == pytest.approx(cells[(step, bucket)])
                checked += 1
            else:
                assert heat.z[i][j] is None
    assert checked == len(cells)


def test_the_max_marker_drills_to_the_step_longest_first():
    payload = {
        "field": "response",
        "steps": [
            {
                "step": s,
                "count": 8,
                "mean": 100,
                "p10": 10,
                "p25": 40,
                "p50": 90,
                "p75": 150,
                "p90": 200,
                "p99": 400,
                "max": 900,
            }
            for s in range(3)
        ],
    }
    fig = length_box_figure(payload).to_plotly_json()
    curve = next(i for i, t in enumerate(fig["data"]) if t.get("name") == "max")
    click = {"points": [{"curveNumber": curve, "x": 1, "y": 900}]}
    assert drill_params("dist-box", click, fig) == {"step": 1, **LONGEST_FIRST, FOCUS: True}
    assert drill_params("dist-box", click, fig, field="prompt") == {"step": 1, "sort": "prompt_len", "order": "desc"}
    assert drill_params("dist-box", click, fig, field="total") == {"step": 1}
    box = {"points": [{"curveNumber": 0, "x": 1, "y": 90}]}
    assert drill_params("dist-box", box, fig) == {"step": 1}  # the box itself: the step, as before
