"""Running advice jobs: the I/O around the advisor (`core.simulator.advice.advice_of`).

Decode the job's request (`AdviceRequest.from_json`), read the trace's steps, call core
with the processes the sweep may use, store the ranking (its shape: core/simulator/advice.py).
"""

from __future__ import annotations

import logging
import os

from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobStatus, Trace, TraceStatus
from core.simulator.advice import AdviceRequest, advice_of
from workers.runners.outcome import NOT_READY, JobFailed, job_outcome
from workers.runners.simulations import ThrottledProgress, load_columns, steps_of_columns

log = logging.getLogger(__name__)


def workers_for_sweep() -> int:
    """Processes for the sweep: RLVR_ADVICE_WORKERS, else the CPUs (at most 8)."""
    env = os.environ.get("RLVR_ADVICE_WORKERS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, min(8, os.cpu_count() or 1))


def run_advice_job(job_id: int) -> None:
    engine = get_engine()
    with new_session() as session:
        job = session.get(Job, job_id)
        if job is None or job.status == JobStatus.SUCCEEDED:
            return
        stored = dict(job.params)
        trace = session.get(Trace, stored["trace_id"])
    progress = ThrottledProgress(job_id)
    with job_outcome(engine, job_id, "advice") as outcome:
        request = AdviceRequest.from_json(stored)
        if trace is None or trace.status != TraceStatus.READY:
            raise JobFailed(NOT_READY)
        progress(0.01, "reading the trace")
        with engine.connect() as conn:
            columns = load_columns(conn, trace, request.steps)
        steps = steps_of_columns(columns, trace.max_response_len) if columns.get("samples") is not None else []
        if not steps:
            raise JobFailed("steps: no training steps to advise on")
        out = advice_of(steps, request, progress, workers_for_sweep())
        best = out["ranking"][0]
        outcome.succeed(out, f"{out['n_configurations']} configurations; best {best['label']}")
