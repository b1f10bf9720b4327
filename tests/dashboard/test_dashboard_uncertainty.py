"""The Simulate page's prediction chart shows the Monte-Carlo mean with its P10-P90."""

from __future__ import annotations

from dashboard.figures.simulation import predicted_vs_measured_figure


def _result():
    step = {"step": 1, "stages": {"rollout": 10.0}, "step_time": 12.0, "rollout": {}}
    return {
        "a": {"steps": [step], "config": {"policy": {"kind": "sync"}}},
        "b": None,
        "accuracy": None,
        "uncertainty": {"steps": [{"step": 1, "rollout_s": {"mean": 11.0, "p10": 10.5, "p90": 12.0}}]},
        "forecast": {
            "steps": [
                {
                    "step": 1,
                    "partial": False,
                    "rollout_s": {
                        "predicted": 11.5,
                        "interval": [10.0, 13.0],
                        "measured": 12.0,
                        "accuracy": 0.958,
                        "rel_error": -0.042,
                    },
                }
            ]
        },
    }


def test_mc_mean_and_interval_are_drawn():
    fig = predicted_vs_measured_figure({"result": _result(), "params": {"policy": {"kind": "sync"}}})
    by = {t.name: t for t in fig.data}
    mc = by["predicted rollout, Monte-Carlo mean (P10-P90)"]
    assert list(mc.y) == [11.0] and list(mc.error_y.array) == [1.0] and list(mc.error_y.arrayminus) == [0.5]
    assert list(by["predicted rollout"].y) == [10.0]
