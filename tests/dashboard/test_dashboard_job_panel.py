"""The job panel of the pages that start jobs (views/job_panel.py) and the pager of the
listed pages (views/pager.py), without a browser: which job a page opens with, what the
follow callback writes as its job runs and finishes, and how the pager turns."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from dash import no_update

from dashboard.views import job_panel
from dashboard.views.job_panel import JobPanel, rerun_job, shown_job
from dashboard.views.pager import pager_state, turned

HISTORY = [
    {"id": 9, "status": "running", "params": {}},
    {"id": 8, "status": "succeeded", "params": {}},
    {"id": 7, "status": "failed", "params": {}, "error": "boom"},
]


@pytest.fixture
def panel(monkeypatch):
    """A panel whose jobs come from a dict and whose history is HISTORY."""
    jobs: dict[int, dict] = {}
    monkeypatch.setattr(job_panel.results, "job", lambda job_id: jobs[int(job_id)])
    monkeypatch.setattr(job_panel.results, "prefetch", lambda job_id: None)
    monkeypatch.setattr(job_panel.session, "api", lambda: None)
    listed: list = []

    def history(api, trace_id):
        listed.append(trace_id)
        return HISTORY

    p = JobPanel("tst", "Replay", "replay", "tst-message", history=history, describe=lambda j: f"job {j['id']}")
    return SimpleNamespace(panel=p, jobs=jobs, listed=listed)


def trigger(monkeypatch, element_id: str) -> None:
    monkeypatch.setattr(job_panel, "ctx", SimpleNamespace(triggered_id=element_id))


def test_a_page_opens_the_job_asked_for_else_the_latest_that_succeeded(panel):
    assert shown_job(HISTORY, "7")["id"] == 7
    assert shown_job(HISTORY, "99")["id"] == 8  # not one of the trace's: the latest succeeded
    assert shown_job(HISTORY[:1])["id"] == 9  # none succeeded: the latest
    assert shown_job([]) is None
    assert rerun_job(HISTORY, 8)["id"] == 8 and rerun_job(HISTORY, None) is None


def test_the_stores_follow_a_running_job_and_draw_a_succeeded_one(panel):
    p = panel.panel
    job, done, poll = p.stores(HISTORY[0])
    assert (job.id, job.data, done.id, done.data, poll.id, poll.disabled) == (
        "tst-job",
        9,
        "tst-done",
        None,
        "tst-poll",
        False,
    )
    _, done, poll = p.stores(HISTORY[1])
    assert done.data == 8 and poll.disabled is True
    rows = str(p.history_box(HISTORY, HISTORY[1]))
    assert "tst-history" in rows and "'type': 'tst-open', 'index': 9" in rows and "'index': 8" not in rows  # shown


def test_follow_writes_progress_then_the_result_store_and_the_finished_banner(panel, monkeypatch):
    p, jobs = panel.panel, panel.jobs
    jobs[5] = {"id": 5, "status": "running", "progress": 0.4, "message": "step 1"}
    started = p.banner(jobs[5]).to_plotly_json()  # as the page holds it
    trigger(monkeypatch, "tst-job")
    out = p.follow(5, None, None, 3, started)
    assert "replay 5: step 1 40%" in str(out["progress"]) and out["stopped"] is False
    assert out["done"] is None and out["banner"] is no_update and panel.listed == [3]  # another job shown
    trigger(monkeypatch, "tst-poll")
    out = p.follow(5, 1, None, 3, started)
    assert out["history"] is no_update and panel.listed == [3]  # progress only while it runs
    jobs[5] = {"id": 5, "status": "succeeded", "message": "done"}
    out = p.follow(5, 2, None, 3, started)
    assert out["done"] == 5 and out["stopped"] is True and panel.listed == [3, 3]
    assert out["banner"].children == "Replay 5 finished: its results are below."
    assert p.follow(5, 3, 5, 3, None)["done"] is no_update  # already drawn
    jobs[6] = {"id": 6, "status": "failed", "error": "out of memory"}
    out = p.follow(6, None, 5, 3, None)
    assert out["done"] is None and "replay 6 failed: out of memory" in str(out["progress"])


def test_an_identical_finished_job_is_said_as_such():
    p = JobPanel("tst", "Replay", "replay", "tst-message", identical="Identical to replay {id}: shown below.")
    assert p.banner({"id": 4, "status": "succeeded"}).children == "Identical to replay 4: shown below."
    assert p.banner({"id": 4, "status": "queued"}).children == "Replay 4 started: its progress is below."


def test_the_pager_turns_and_goes_back_to_the_first_page_on_a_filter():
    assert turned("jobs", "jobs-next", None, 25) == 25
    assert turned("jobs", "jobs-prev", 10, 25) == 0
    assert turned("jobs", "jobs-prev", 50, 25) == 25
    assert turned("jobs", "jobs-status", 50, 25) == 0
    assert turned("jobs", None, 50, 25) is no_update
    assert pager_state("jobs 1–25", 0, True) == ("jobs 1–25", True, False)
    assert pager_state("26–30 of 30", 25, False) == ("26–30 of 30", False, True)
