"""How a job ends, the same for every runner: its result stored, or the reason it failed.

`with job_outcome(engine, job_id, "simulation") as outcome:` runs a job's body;
`outcome.succeed(result, message)` stores the result. A `JobFailed` or a user error
(`ValueError` by default: bad parameters, data the job cannot use) fails the job with its
message; a database or broker outage (`OperationalError`) and `Abandoned` (another worker
owns the job now) propagate, so the task is retried or let go; anything else is a crash,
logged with its traceback, and fails the job naming the exception instead of hanging.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from backend.jobs.fence import Abandoned
from backend.jobs.state import mark_failed, mark_succeeded

log = logging.getLogger(__name__)

NOT_READY = "the trace is not ready (deleted, failed or still ingesting)"


class JobFailed(Exception):
    """The job cannot run (its message says why, in the user's terms)."""


@dataclass
class Outcome:
    engine: Engine
    job_id: int

    def succeed(self, result: dict, message: str) -> None:
        mark_succeeded(self.engine, self.job_id, result, message)


@contextmanager
def job_outcome(
    engine: Engine, job_id: int, what: str, user_errors: tuple[type[Exception], ...] = (ValueError,)
) -> Iterator[Outcome]:
    failures: tuple[type[Exception], ...] = (JobFailed, *user_errors)
    try:
        yield Outcome(engine, job_id)
    except (OperationalError, Abandoned):
        raise
    except failures as exc:
        mark_failed(engine, job_id, str(exc))
    except Exception as exc:
        log.exception("%s job %s failed", what, job_id)
        mark_failed(engine, job_id, f"{type(exc).__name__}: {exc}")
