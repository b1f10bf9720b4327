"""The metric explorer's and the many-trace compare's pure helpers, checked against
values written out by hand."""

from __future__ import annotations

import pytest

from dashboard.figures.compare_many import diff_rows, longtail_figure, stage_means
from dashboard.figures.metrics import metrics_figure, parse_offsets, plotted, smooth, with_gaps


def test_ema_skips_missing_values():
    assert smooth([1.0, None, 3.0, 5.0], "ema", 0.5) == [1.0, None, 2.0, 3.5]


def test_window_is_trailing_over_logged_values():
    assert smooth([1.0, 2.0, None, 6.0, 10.0], "window", 2) == [1.0, 1.5, None, 4.0, 8.0]


def test_none_keeps_values():
    assert smooth([1.0, None], "none", None) == [1.0, None]


def test_gaps_break_where_steps_jump():
    xs, ys = with_gaps([0, 1, 2, 5, 6], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert xs == [0, 1, 2, None, 5, 6] and ys == [1.0, 2.0, 3.0, None, 4.0, 5.0]
    # logged every 10 steps: one line
    xs, _ = with_gaps([0, 10, 20, 30], [1.0, 1.0, 1.0, 1.0])
    assert None not in xs
    # a missing value is a gap too (against the series' own median spacing)
    xs, ys = with_gaps([0, 1, 2, 3, 4, 5], [1.0, None, 3.0, 4.0, 5.0, 6.0])
    assert xs == [0, None, 2, 3, 4, 5]


def test_offsets_parse_and_shift():
    assert parse_offsets("12:5, #13:-2, bad, 14:x") == {12: 5, 13: -2}
    payloads = [{"trace_id": 7, "name": "a", "steps": [0, 1], "series": {"k": [1.0, 3.0]}}]
    rows = plotted(payloads, ["k"], {7: 10}, "ema", 0.5)
    assert [(r["step"], r["raw"], r["value"]) for r in rows] == [(10, 1.0, 1.0), (11, 3.0, 2.0)]
    fig = metrics_figure(payloads, ["k"], offsets={7: 10})
    assert list(fig.data[0].x) == [10, 11]


def test_diff_rows_delta_and_ratio_against_the_first_run():
    runs = [
        {"id": 1, "name": "a", "steps": [{"step": 0, "t_step": 10.0}, {"step": 1, "t_step": 12.0}]},
        {"id": 2, "name": "b", "steps": [{"step": 0, "t_step": 33.0}]},
    ]
    assert stage_means(runs[0]["steps"]) == {"step": 11.0}
    row = next(r for r in diff_rows(runs) if r["key"] == "t_step")
    assert row["runs"][0] == {"value": 11.0, "delta": 0.0, "ratio": 1.0}
    assert row["runs"][1]["delta"] == pytest.approx(22.0) and row["runs"][1]["ratio"] == pytest.approx(3.0)


def test_compare_idle_share_leaves_a_gap_for_a_step_without_one():
    # a step whose idle_fraction is null is left out (it raised a TypeError: 100 * None)
    steps = [{"step": s, "idle_fraction": f} for s, f in ((0, 0.25), (1, None), (2, 0.5))]
    fig = longtail_figure([{"id": 3, "name": "a", "results": {"longtail": {"steps": steps}}}])
    assert (list(fig.data[0].x), list(fig.data[0].y)) == ([0, 2], [25.0, 50.0])
