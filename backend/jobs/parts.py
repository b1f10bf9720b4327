"""Jobs split into parts that run as a Celery group over the fleet (an analysis's step
ranges, the advisor's rollout layouts): the bookkeeping every such job shares.

`open_parts` records the parts when the job is planned (planning again starts the count
over); each part task stores its partial result with `complete_part`, which counts a
part once however often it is delivered (a redelivered part never counts twice) and
records the host that ran it; the part that completes the count gets every part's
result back, in index order, to reduce into the job's result (no result backend
needed). Progress is the share of parts done.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from sqlalchemy import delete, select, update

from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobPart, JobStatus


@dataclass(frozen=True)
class Done:
    """Every part of a job, in index order: its partial result and the host that ran it."""

    results: list
    workers: list[str | None]


def open_parts(job_ids: list[int], spans: list[tuple[int, int]]) -> None:
    """The jobs' parts, one per span [lo, hi) (of steps, or of whatever the job splits),
    none done yet."""
    with new_session() as session:
        for job_id in job_ids:
            session.execute(delete(JobPart).where(JobPart.job_id == job_id))
            session.add_all(
                JobPart(job_id=job_id, idx=i, step_lo=lo, step_hi=hi, done=False) for i, (lo, hi) in enumerate(spans)
            )
            session.execute(update(Job).where(Job.id == job_id).values(parts_total=len(spans), parts_done=0))
        session.commit()


def part_span(job_id: int, idx: int) -> tuple[int, int]:
    """The span [lo, hi) part `idx` of the job covers."""
    with new_session() as session:
        part = session.get_one(JobPart, (job_id, idx))
        return part.step_lo, part.step_hi


def complete_part(job_id: int, idx: int, result: dict, what: str = "parts") -> Done | None:
    """Store part `idx`'s result and count it (once); every part's result when this one
    completed the count and the job has not failed meanwhile, else None."""
    with get_engine().begin() as conn:
        first_time = conn.execute(
            update(JobPart)
            .where(JobPart.job_id == job_id, JobPart.idx == idx, JobPart.done.is_(False))
            .values(done=True, result=result, worker=socket.gethostname())
        ).rowcount
        if not first_time:
            return None
        done, total = conn.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(parts_done=Job.parts_done + 1, progress=(Job.parts_done + 1) * 1.0 / Job.parts_total)
            .returning(Job.parts_done, Job.parts_total)
        ).one()
        conn.execute(update(Job).where(Job.id == job_id).values(message=f"{done} of {total} {what} done"))
    if done < total:
        return None
    with new_session() as session:
        rows = session.execute(
            select(JobPart.result, JobPart.worker).where(JobPart.job_id == job_id).order_by(JobPart.idx)
        ).all()
        status = session.scalar(select(Job.status).where(Job.id == job_id))
    if status == JobStatus.FAILED:
        return None
    return Done([r.result for r in rows], [r.worker for r in rows])
