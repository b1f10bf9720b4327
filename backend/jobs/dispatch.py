"""Sending a job to the workers: by task name, through the shared queue configuration."""

from __future__ import annotations

from backend.jobs.broker import producer
from backend.jobs.contracts import task_name


def dispatch(job_ids: int | list[int], job_kind: str) -> None:
    """Queue the job(s) (rows already committed) on the task for `job_kind`."""
    producer().send_task(task_name(job_kind), args=[job_ids])
