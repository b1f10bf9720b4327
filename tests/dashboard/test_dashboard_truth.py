"""Figure builders show the analysis' numbers as they are: signed terms, gaps at missing
steps, definitions in captions, no negative 'saving'."""

from __future__ import annotations

import pytest

from dashboard.figures.multiturn import counts_hist_figure, fit_label, latency_vs_tokens_figure


def test_fit_label_writes_negative_terms_as_minus_and_per_thousand_tokens():
    fit = {"n": 10, "a": 1.5, "b": 0.00012, "c": -0.000024, "r2": -0.024}
    label = fit_label(fit)
    assert "+ -" not in label and "+ −" not in label
    assert label == "1.50 s + 0.120 s/k prompt − 0.024 s/k completion, R² -0.02"
    bins = {"bin_lo": [16.0], "bin_hi": [32.0], "count": [3], "latency_mean": [2.0]}
    summary = {"latency_fit": fit, "latency_by_prompt": bins}
    title = latency_vs_tokens_figure({"summary": summary}).layout.title.text
    assert "− 0.024 s/k completion" in title


def test_tool_call_histogram_states_its_definition():
    result = {"summary": {"turns_hist": [0, 2], "tool_calls_hist": [1, 1], "tool_calls_basis": "tool_calls"}}
    assert "stored tool-call rows" in counts_hist_figure(result).layout.title.text


def test_saving_figure_and_cards_never_show_a_loss_as_a_saving():
    from dashboard.figures.imbalance import saving_figure, saving_summary

    def load(recorded_max, kk_max, lpt_max):
        best = min(("recorded", recorded_max), ("kk", kk_max), ("lpt", lpt_max), key=lambda kv: kv[1])
        return {
            "recorded": [recorded_max, 1],
            "mean": 1,
            "recorded_max": recorded_max,
            "kk_saving": 1 - kk_max / recorded_max,
            "lpt_saving": 1 - lpt_max / recorded_max,
            "best_split": best[0],
            "saving": max(0.0, 1 - best[1] / recorded_max),
        }

    result = {
        "steps": [{"step": 0, "tokens": load(100, 90, 95)}, {"step": 1, "tokens": load(100, 104, 101)}],
        "summary": {"tokens": {"kk_time_saved": -0.02, "lpt_time_saved": -0.03, "time_saved": 0.05}},
    }
    fig = saving_figure(result)
    assert list(fig.data[0].y) == [pytest.approx(10.0), 0.0]
    assert list(fig.data[0].customdata) == ["Karmarkar-Karp", "recorded"]
    assert saving_summary(result)["time_saved"] == pytest.approx(0.05)
    # a result without best-split fields: the loss is clipped to 0, never drawn below
    old = {"steps": [{"step": 0, "tokens": {k: v for k, v in load(100, 104, 101).items() if k != "saving"}}]}
    assert list(saving_figure(old).data[0].y) == [0.0]
    assert saving_summary({"summary": {"tokens": {"kk_time_saved": -0.02}}})["time_saved"] == 0.0


def test_longtail_figures_name_their_basis_and_flag_ties_at_the_cap():
    from dashboard.figures.longtail import longtail_finish_figure, longtail_idle_figure

    steps = [
        {"step": 0, "tail_time_share": 0.0, "tail_sample_share": 0.15, "tail_tied": True, "engine_time": 1},
        {"step": 1, "tail_time_share": 0.3, "tail_sample_share": 0.1, "tail_tied": False, "engine_time": 1},
    ]
    title = longtail_finish_figure({"tail_fraction": 0.1, "basis": "tokens", "steps": steps}).layout.title.text
    assert "ties at the longest length (cap) in step(s) 0:" in title and "response lengths" in title
    title = longtail_idle_figure({"basis": "time", "steps": steps}).layout.title.text
    assert "measured completion times" in title


def test_tail_figure_shows_one_truncation_figure_with_its_definition():
    from dashboard.figures.distributions import TRUNCATED_NAME, tail_figure

    definition = "truncated = the engine stopped the response for length (its recorded stop reason)"
    payload = {
        "field": "response",
        "max_response_len": 3000,
        "truncation": {"basis": "stop_reason", "definition": definition},
        "steps": [{"step": 0, "count": 2048, "tail_ratio": 3.0, "truncation_rate": 3 / 2048}],
    }
    fig = tail_figure(payload)
    assert [t.name for t in fig.data] == ["max / mean", TRUNCATED_NAME]
    assert fig.data[1].y[0] == pytest.approx(100 * 3 / 2048) and list(fig.data[1].customdata[0]) == [3, 2048]
    shown = fig.layout.title.text.replace("<br>", " ")  # (wrapped between words)
    assert definition in shown and "at the cap" not in shown


def test_data_efficiency_figure_and_card_show_the_analysis_numbers():
    from helpers import dapo_run

    from core.analysis.data_efficiency import analyze_data_efficiency
    from dashboard.figures.data_efficiency import data_efficiency_figure
    from dashboard.views.overview import overview_cards
    from tests.core.analysis.test_analysis_data_efficiency import trace

    res = analyze_data_efficiency(trace(*dapo_run()))
    fig = data_efficiency_figure(res)
    assert [t.name for t in fig.data][:3] == ["generated", "kept by the filter", "used for training"]
    assert list(fig.data[2].y) == [s["groups_used"] for s in res["steps"]]
    assert list(fig.data[0].x) == [s["trainer_step"] for s in res["steps"]]
    cards = {c.key: c for c in overview_cards({}, [], None, {"data_efficiency": res})}
    card = cards["data-efficiency"]
    assert card.value == f"{100 * res['summary']['used_token_share']:.1f}%"
    assert f"{res['summary']['groups_used']} of {res['summary']['groups_generated']} groups" in card.hint


def test_per_step_lines_leave_gaps_at_missing_steps():
    from dashboard.figures.distributions import percentile_lines_figure
    from dashboard.figures.multiturn import cache_hit_figure

    rows = [{"step": s, "count": 10, "p50": 1.0 + s, "p90": 2.0, "p99": 3.0, "max": 4.0} for s in (0, 1, 5)]
    fig = percentile_lines_figure({"field": "response", "steps": rows})
    line = fig.data[0]
    assert list(line.x) == [0, 1, 2, 5] and list(line.y) == [1.0, 2.0, None, 6.0]
    fig = cache_hit_figure({"steps": [{"step": s, "cache_hit_rate": 0.5} for s in (0, 1, 5)]})
    assert None in list(fig.data[0].y)
    # regular steps: untouched
    fig = percentile_lines_figure({"field": "response", "steps": [{**r, "step": i} for i, r in enumerate(rows)]})
    assert list(fig.data[0].x) == [0, 1, 2]


def test_no_straggler_plot_for_a_one_rank_trace():
    from dashboard.figures.gpu import straggler_figure

    one = straggler_figure({"rank": [0, 0], "step": [1, 2], "compute_vs_median": [1.0, 1.0], "is_straggler": [0, 0]})
    assert not one.data and "at least two ranks" in one.layout.annotations[0].text
    two = straggler_figure({"rank": [0, 1], "step": [1, 1], "compute_vs_median": [1.0, 1.2], "is_straggler": [0, 1]})
    assert len(two.data) == 2
