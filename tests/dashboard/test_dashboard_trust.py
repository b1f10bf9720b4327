"""Words and numbers the dashboard shows (issue: one truth, keeping your place): plain
numbers, the replay's gaps, partial steps and slowdowns, the Compare page's default
pair, URL state parsing, the advisor's configuration labels."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure
from dashboard.figures.simulation import predicted_vs_measured_figure, saved_words, speedup_figure, summary_cards
from dashboard.views.formatting import compare_pair, human_number
from dashboard.views.url_state import apply_zoom, query_value, zoom_state


def test_numbers_are_never_scientific():
    assert [human_number(v) for v in (10750.3, 4608, 41.26, 0.0123, 2.0, 1e-5)] == [
        "10,750",
        "4,608",
        "41.3",
        "0.012",
        "2",
        "0.00001",
    ]
    assert human_number(-3.5, signed=True) == "-3.5" and human_number(1.075e4, signed=True) == "+10,750"
    assert human_number(None) == "—" and human_number(float("nan")) == "—"


def _replay(steps=(0, 1, 5), saved=-650.4):
    a = [{"step": s, "step_time": 100.0 + s, "stages": {"rollout": 80.0 + s}} for s in steps]
    b = [{"step": s, "step_time": 110.0 + s, "stages": {"rollout": 90.0 + s}} for s in steps]
    return {
        "params": {"policy": {"kind": "sync"}, "compare_policy": {"kind": "partial"}},
        "result": {
            "a": {"steps": a, "makespan_s": 300.0},
            "b": {"steps": b, "makespan_s": 330.0},
            "compare": {
                "total": {"speedup": 300 / 330, "saved_s": saved},
                "per_step": [{"step": s, "speedup": 0.9, "saved_s": -10.0} for s in steps],
            },
            "accuracy": {
                "partial_steps": [5],
                "steps": [
                    {"step": 1, "partial": False, "n_samples": 2048, "rollout_s": {"measured": 80.0}},
                    {"step": 5, "partial": True, "n_samples": 47, "rollout_s": {"measured": 9.0}},
                ],
            },
        },
    }


def test_replay_breaks_lines_at_missing_steps_and_flags_partial_steps():
    job = _replay()
    fig = predicted_vs_measured_figure(job)
    line = next(t for t in fig.data if t.name == "predicted rollout")
    assert list(line.x) == [0, 1, 2, 5] and line.y[2] is None  # no line drawn across 2-4
    notes = [a.text for a in fig.layout.annotations]
    assert any("step 5: partial (47 samples), not in the means" in n for n in notes)
    speed = speedup_figure(job)
    assert any("partial" in a.text for a in speed.layout.annotations if a.text)
    assert "costs 10.0 s more" in list(speed.data[0].customdata)


def test_a_slowdown_is_never_a_negative_saving():
    assert saved_words(-650.4) == "costs 650.4 s more" and saved_words(12.0) == "saves 12.0 s"
    hint = next(c for c in summary_cards(_replay()) if c["key"] == "speedup")["hint"]
    assert "costs 650.4 s more" in hint and "saves -" not in hint


def test_compare_opens_on_the_newest_pair_that_shares_data():
    traces = [  # newest first, as the API lists them
        {"id": 9, "n_gpu_events": 100, "n_samples": 0},  # Kineto
        {"id": 8, "n_samples": 512, "n_gpu_events": 0},  # synthetic
        {"id": 7, "n_samples": 64, "n_gpu_events": 0},
        {"id": 6, "n_gpu_events": 50, "n_samples": 0},
    ]
    assert compare_pair(traces) == (6, 9)
    assert compare_pair(traces, 8) == (8, 7)
    assert compare_pair([{"id": 2}, {"id": 1}]) == (1, 2)  # nothing shared: the newest two


def test_url_state_reads_back_controls_and_zoom():
    q = {"field": "prompt", "log": "log", "cdf": "0,2", "phase": "bogus", "z.dist-box": "0.5,2.5", "z.dist-cdf": "x"}
    assert query_value(q, "field", "response", choices=("response", "prompt")) == "prompt"
    assert query_value(q, "phase", "train", choices=("train", "all")) == "train"  # invalid: the default
    assert query_value(q, "cdf", [], kind=int) == [0, 2] and query_value(q, "log", [], choices=("log",)) == ["log"]
    assert query_value({}, "offset", 0, kind=int) == 0
    zoom = zoom_state(q)
    assert zoom == {"dist-box": {"x": [0.5, 2.5]}}
    fig = go.Figure(go.Scatter(x=[0, 1, 2, 3], y=[1, 2, 3, 4]))
    shown = apply_zoom(fig, zoom["dist-box"])
    assert list(shown.layout.xaxis.range) == [0.5, 2.5] and fig.layout.xaxis.range is None  # a copy
    assert apply_zoom(fig, None) is fig


def test_empty_figure_lines_keep_their_spaces():
    message = "No stage timings: upload the run's verl metric log (JSON lines with timing_s/*), see docs/formats.md"
    text = empty_figure(message).layout.annotations[0].text
    assert text.replace(" <br>", " ").replace("<br>", "") == message


def test_advisor_labels_say_what_the_concurrency_is():
    from core.simulator.advisor import label

    c = {"policy": "sync", "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8, "balancing": "kk"}
    assert label({**c, "max_running_seqs": None}).endswith("kk balancing | running seqs as calibrated")
    assert label({**c, "max_running_seqs": 256}).endswith("max 256 running seqs")
    assert "seqs cal" not in label({**c, "max_running_seqs": None})
