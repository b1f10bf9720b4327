"""Chart clicks -> sample-table filters and sort (dashboard.views.drill), fed with the
real figures' arrays: what was clicked (the sample, the bin, the rank, a truncation bar)
travels into the filters, and the clicked sample is the table's first row."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.distributions import TRUNCATED_NAME, length_box_figure, tail_figure
from dashboard.views.drill import FOCUS, LONGEST_FIRST, drill_params, focused

FOCUSED = {**LONGEST_FIRST, FOCUS: True}


def click(**point) -> dict:
    return {"points": [{"curveNumber": 0, **point}]}


def test_step_charts():
    assert drill_params("imb-ratio", click(x=3.0)) == {"step": 3}
    assert drill_params("longtail-finish", click(x=2)) == {"step": 2}
    assert drill_params("dist-box", None) == {}
    # a unified hover names every curve at the step: the step, longest first
    both = {"points": [{"curveNumber": 0, "x": 7, "y": 10}, {"curveNumber": 3, "x": 7, "y": 90}]}
    assert drill_params("dist-percentiles", both, {"data": []}) == {"step": 7, **FOCUSED}


def test_a_max_or_percentile_marker_focuses_that_sample():
    payload = {
        "field": "response",
        "steps": [{"step": s, "count": 8, "p10": 1, "p25": 2, "p50": 3, "p75": 4, "p90": 5, "p99": 15.6, "max": 16000}
                  for s in (1, 2)],
    }  # fmt: skip
    fig = length_box_figure(payload).to_plotly_json()
    names = [t.get("name") for t in fig["data"]]
    at = {"points": [{"curveNumber": names.index("max"), "x": 2, "y": 16000.0}]}
    assert drill_params("dist-box", at, fig) == {"step": 2, **FOCUSED}
    p99 = {"points": [{"curveNumber": names.index("p99"), "x": 1, "y": 15.6}]}
    assert drill_params("dist-box", p99, fig) == {"step": 1, "response_len_max": 16, **FOCUSED}
    assert drill_params("dist-box", p99, fig, field="prompt") == {"step": 1}


def test_a_truncation_bar_opens_the_truncated_samples_of_its_step():
    payload = {
        "field": "response",
        "steps": [{"step": 21, "count": 512, "tail_ratio": 9.0, "truncation_rate": 2 / 512}],
    }
    fig = tail_figure(payload).to_plotly_json()
    bar = [t.get("name") for t in fig["data"]].index(TRUNCATED_NAME)
    got = drill_params("dist-tail", {"points": [{"curveNumber": bar, "x": 21, "y": 0.39}]}, fig)
    assert got == {"step": 21, "truncated": "true", **FOCUSED}
    line = drill_params("dist-tail", {"points": [{"curveNumber": 0, "x": 21, "y": 9.0}]}, fig)
    assert "truncated" not in line and line["step"] == 21


def test_focus_puts_the_first_sample_in_the_link():
    seen = []

    def first(trace_id, params):
        seen.append((trace_id, params))
        return "2.17.3"

    assert focused(5, {"step": 2, **FOCUSED}, first) == {"step": 2, **LONGEST_FIRST, "sample": "2.17.3"}
    assert seen == [(5, {"step": 2, **LONGEST_FIRST})]
    assert focused(5, {"step": 2}, first) == {"step": 2} and len(seen) == 1  # no focus: no lookup


def test_length_bin_from_the_heatmap_edges_typed_array():
    edges = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    fig = go.Figure(go.Heatmap(x=np.array([0, 1]), y=edges, z=np.ones((4, 2)))).to_plotly_json()
    import plotly.io as pio

    payload = pio.from_json(pio.to_json(fig)).to_plotly_json()  # as the browser sends it back
    assert drill_params("dist-heatmap", click(x=1, y=5.0), payload) == {
        "step": 1,
        "response_len_min": 4,
        "response_len_max": 8,
        **LONGEST_FIRST,
    }
    assert drill_params("dist-heatmap", click(x=1, y=5.0), payload, field="prompt") == {"step": 1}


def test_rank_and_turns():
    assert drill_params("imb-heatmap", click(x=2, y=5)) == {"step": 2, "dp_rank": 5, **LONGEST_FIRST}
    assert drill_params("mt-counts", click(x=3)) == {"num_turns": 3}
    assert drill_params("mt-counts", {"points": [{"curveNumber": 1, "x": 3}]}) == {}


def test_cdf_curve_step_and_length():
    fig = {"data": [{"name": "step 0"}, {"name": "step 4"}]}
    point = {"points": [{"curveNumber": 1, "x": 300.0}]}
    assert drill_params("dist-cdf", point, fig) == {"step": 4, "response_len_max": 301, **FOCUSED}
