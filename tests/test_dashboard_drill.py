"""Chart clicks -> sample-table filters (dashboard.views.drill), fed with the real
figures' arrays."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dashboard.views.drill import drill_params


def click(**point) -> dict:
    return {"points": [{"curveNumber": 0, **point}]}


def test_step_charts():
    assert drill_params("dist-percentiles", click(x=7)) == {"step": 7}
    assert drill_params("imb-ratio", click(x=3.0)) == {"step": 3}
    assert drill_params("dist-box", None) == {}


def test_length_bin_from_the_heatmap_edges_typed_array():
    edges = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    fig = go.Figure(go.Heatmap(x=np.array([0, 1]), y=edges, z=np.ones((4, 2)))).to_plotly_json()
    import plotly.io as pio

    payload = pio.from_json(pio.to_json(fig)).to_plotly_json()  # as the browser sends it back
    assert drill_params("dist-heatmap", click(x=1, y=5.0), payload) == {
        "step": 1,
        "response_len_min": 4,
        "response_len_max": 8,
    }
    assert drill_params("dist-heatmap", click(x=1, y=5.0), payload, field="prompt") == {"step": 1}


def test_rank_and_turns():
    assert drill_params("imb-heatmap", click(x=2, y=5)) == {"step": 2, "dp_rank": 5}
    assert drill_params("mt-counts", click(x=3)) == {"num_turns": 3}
    assert drill_params("mt-counts", {"points": [{"curveNumber": 1, "x": 3}]}) == {}


def test_cdf_curve_step_and_length():
    fig = {"data": [{"name": "step 0"}, {"name": "step 4"}]}
    point = {"points": [{"curveNumber": 1, "x": 300.0}]}
    assert drill_params("dist-cdf", point, fig) == {"step": 4, "response_len_max": 301}
    assert drill_params("longtail-finish", click(x=2)) == {"step": 2}
