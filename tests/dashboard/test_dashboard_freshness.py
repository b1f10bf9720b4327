"""A figure from an analysis result that is behind its growing trace says so, with its
age (dashboard.views.freshness); the overview marks such cards, the panels say that
their figures show the earlier result while a re-run goes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dashboard.views.freshness import age_text, result_steps, stale_note
from dashboard.views.overview import analysed_steps, overview_cards

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


def ago(**kw) -> str:
    return (NOW - timedelta(**kw)).isoformat().replace("+00:00", "Z")


def result(steps) -> dict:
    return {"steps": [{"step": s, "idle_fraction": 0.5} for s in steps]}


def test_a_result_behind_the_trace_says_its_age_and_steps():
    job = {"id": 4, "finished_at": ago(minutes=3)}
    note = stale_note(job, result(range(42)), list(range(45)), refreshing=True, now=NOW)
    assert note == "computed 3 min ago, steps 0–41 of 45 — refreshing"
    assert stale_note(job, result([0]), [0, 1], refreshing=False, now=NOW) == "computed 3 min ago, step 0 of 2"


def test_a_result_covering_the_trace_is_not_marked():
    job = {"finished_at": ago(seconds=5)}
    assert stale_note(job, result(range(3)), [0, 1, 2], refreshing=True, now=NOW) is None
    assert stale_note(job, {"summary": {}}, [0, 1], refreshing=True, now=NOW) is None  # no per-step entries
    assert stale_note(job, result([0, 1]), [], refreshing=True, now=NOW) is None


def test_ages_and_steps():
    assert age_text(ago(seconds=12), NOW) == "computed 12 s ago"
    assert age_text(ago(hours=2), NOW) == "computed 2 h ago"
    assert age_text(None, NOW) == "computed earlier"
    assert result_steps({"steps": [{"step": 2}, {"step": 0}]}) == [0, 2]
    steps = [
        {"step": 0, "response_tokens": 10},
        {"step": 1, "response_tokens": 12, "validate": True},  # validation: not analysed by default
        {"step": 2, "response_tokens": 0},  # a metric-only step
        {"step": 3, "response_tokens": 9},
    ]
    assert analysed_steps(steps) == [0, 3]


def test_cards_name_the_analysis_they_come_from():
    longtail = {"steps": [], "summary": {"idle_fraction": {"mean": 0.25}}, "basis": "length"}
    cards = {c.key: c for c in overview_cards({"n_steps": 1}, [], None, {"longtail": longtail, "imbalance": None})}
    assert cards["idle"].source == "longtail" and cards["imbalance"].source == "imbalance"
    assert cards["steps"].source is None


def test_the_panel_line_says_the_figures_show_the_earlier_result():
    from dashboard.views import panels

    running = {"id": 9, "status": "running", "progress": 0.4, "message": "longtail"}
    best = {"id": 7, "status": "succeeded", "finished_at": datetime.now(UTC).isoformat()}
    line = str(panels.status_line(running, best))
    assert "figures show the earlier result (computed" in line and "40%" in line
    assert "earlier result" not in str(panels.status_line(running, None))
