"""Running advice jobs: the I/O around the advisor (`core.simulator.advice`).

Decode the job's request (`AdviceRequest.from_json`), read the trace's steps, calibrate
and plan the sweep: a sweep of several rollout layouts runs as a Celery group of
`advice_part` tasks, one per layout, over every worker process of the fleet
(`advice_fanout`); each part reads the steps again, plans the same sweep from the
calibration the planner sent it (`sweep_from_shared`), replays its layout and stores
its rows in `job_parts`; the part that completes the count ranks every part's rows in
the parts' order (backend/jobs/parts.py), which is the result of the unsplit sweep,
plus `parts` and `part_workers` (the host of each part). Otherwise the sweep runs in
this task (shape of the result: core/simulator/advice.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from backend.jobs.parts import complete_part, open_parts
from backend.jobs.state import set_progress
from backend.settings import get_settings
from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobStatus, Trace, TraceStatus
from core.jsonable import json_safe
from core.simulator.advice import AdviceRequest, advice_of, advice_result, calibrated, sweep_from_shared, sweep_of
from core.simulator.workload import StepWorkload
from workers.runners.outcome import NOT_READY, JobFailed, job_outcome
from workers.runners.simulations import ThrottledProgress, load_columns, steps_of_columns

log = logging.getLogger(__name__)

SendParts = Callable[[int, int, dict], None]  # (job id, number of parts, what every part shares)


def workers_for_sweep() -> int:
    """Processes for a sweep run in one place: RLVR_ADVICE_WORKERS, else the CPUs (at most 8)."""
    env = os.environ.get("RLVR_ADVICE_WORKERS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, min(8, os.cpu_count() or 1))


def _open_job(job_id: int) -> tuple[dict, Trace | None] | None:
    """The job's stored request and its trace; None when the job is gone or over."""
    with new_session() as session:
        job = session.get(Job, job_id)
        if job is None or job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
            return None
        stored = dict(job.params)
        return stored, session.get(Trace, stored["trace_id"])


def _read_steps(trace: Trace | None, request: AdviceRequest) -> list[StepWorkload]:
    if trace is None or trace.status != TraceStatus.READY:
        raise JobFailed(NOT_READY)
    with get_engine().connect() as conn:
        columns = load_columns(conn, trace, request.steps)
    steps = steps_of_columns(columns, trace.max_response_len) if columns.get("samples") is not None else []
    if not steps:
        raise JobFailed("steps: no training steps to advise on")
    return steps


def _said(out: dict) -> str:
    return f"{out['n_configurations']} configurations; best {out['ranking'][0]['label']}"


def run_advice_job(job_id: int, send_parts: SendParts | None = None) -> None:
    """Entry of the `run_advice` task (the job claimed): plan, then fan out the parts
    with `send_parts` (or run them here without it, or with one part only)."""
    engine = get_engine()
    opened = _open_job(job_id)
    if opened is None:
        return
    stored, trace = opened
    progress = ThrottledProgress(job_id)
    with job_outcome(engine, job_id, "advice") as outcome:
        request = AdviceRequest.from_json(stored)
        progress(0.01, "reading the trace")
        steps = _read_steps(trace, request)
        if send_parts is None or not get_settings().advice_fanout:
            out = advice_of(steps, request, progress, workers_for_sweep())
            outcome.succeed(out, _said(out))
            return
        cal, noise = calibrated(steps, request, progress)
        sweep = sweep_of(steps, request, cal, noise)
        if len(sweep.parts) <= 1:
            out = advice_result([sweep.run()], steps, request, sweep)
            outcome.succeed(out, _said(out))
            return
        # part i is the plan's layout i (the plan is deterministic: each part plans it again)
        open_parts([job_id], [(i, i + 1) for i in range(len(sweep.parts))])
        set_progress(
            engine, job_id, 0.0, f"sweeping {sweep.n_configurations} configurations in {len(sweep.parts)} parts"
        )
        send_parts(job_id, len(sweep.parts), sweep.shared())


def run_advice_part(job_id: int, idx: int, shared: dict) -> None:
    """Entry of the `advice_part` task: the rollout layouts of part `idx`; the part that
    completes the count ranks them all and stores the job's result."""
    engine = get_engine()
    opened = _open_job(job_id)
    if opened is None:
        return
    stored, trace = opened
    with job_outcome(engine, job_id, "advice") as outcome:
        request = AdviceRequest.from_json(stored)
        steps = _read_steps(trace, request)
        sweep = sweep_from_shared(steps, request, shared)
        done = complete_part(job_id, idx, {"rows": json_safe(sweep.run(idx, idx + 1))}, "parts of the sweep")
        if done is None:
            return
        out = advice_result([part["rows"] for part in done.results], steps, request, sweep)
        out["parts"] = len(done.results)
        out["part_workers"] = done.workers
        outcome.succeed(out, f"{_said(out)} ({len(done.results)} parts)")
