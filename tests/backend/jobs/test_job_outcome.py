"""How every runner's job ends (workers/runners/outcome.py): the result stored, the
reason a job failed in the user's terms, a crash named, an outage re-raised for retry."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from backend.jobs.fence import Abandoned
from workers.runners import outcome as oc


@pytest.fixture()
def ended(monkeypatch):
    seen: list[tuple] = []
    monkeypatch.setattr(oc, "mark_failed", lambda engine, job_id, message: seen.append(("failed", job_id, message)))
    monkeypatch.setattr(
        oc, "mark_succeeded", lambda engine, job_id, result, message: seen.append(("ok", job_id, result, message))
    )
    return seen


def test_success_stores_the_result(ended):
    with oc.job_outcome(None, 7, "simulation") as outcome:
        outcome.succeed({"x": 1}, "done")
    assert ended == [("ok", 7, {"x": 1}, "done")]


@pytest.mark.parametrize(
    "exc,message",
    [
        (oc.JobFailed(oc.NOT_READY), oc.NOT_READY),
        (ValueError("steps: no training steps"), "steps: no training steps"),
        (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    ],
)
def test_failures_say_why_and_nothing_is_stored(ended, exc, message):
    with oc.job_outcome(None, 7, "simulation"):
        raise exc
    assert ended == [("failed", 7, message)]


def test_user_errors_are_the_runners_choice(ended):
    class BadFile(Exception):
        pass

    with oc.job_outcome(None, 3, "workload", user_errors=(ValueError, BadFile)):
        raise BadFile("run.jsonl, line 2: bad")
    assert ended == [("failed", 3, "run.jsonl, line 2: bad")]


@pytest.mark.parametrize("exc", [OperationalError("SELECT 1", {}, Exception("down")), Abandoned("taken over")])
def test_outages_and_takeovers_propagate_untouched(ended, exc):
    with pytest.raises(type(exc)), oc.job_outcome(None, 7, "simulation"):
        raise exc
    assert ended == []
