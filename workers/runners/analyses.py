"""Running analysis jobs: read a trace's columns once, call the pure analyses, store results.

A trace with more samples than `analysis_part_samples` is split into step ranges that
run as a Celery group, one task per range; each part stores its partial results in
`job_parts`, and the part that completes the count reduces them into the job result
(backend/jobs/parts.py: no result backend needed, and a redelivered part never counts twice). Each part
records the host name of the worker that ran it; the reduced result lists them
(`part_workers`, by part index) so a deployment can see how the parts spread.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select

from backend.jobs.parts import complete_part, open_parts, part_span
from backend.jobs.state import mark_failed, mark_succeeded, set_progress
from backend.settings import get_settings
from backend.store.db import get_engine, new_session
from backend.store.models import Base, Job, JobStatus, Step, Trace, TraceStatus
from backend.store.trace_tables import load_trace_data
from core.analysis.registry import ANALYSES, reduce_results, run_analysis
from core.analysis.tables import TraceData, step_ranges
from core.jsonable import json_safe

log = logging.getLogger(__name__)

# A job run in one task reads the trace in step ranges of about this many samples,
# overlapping each read with the analysis of the previous range.
PIPELINE_CHUNK_SAMPLES = 500_000


def _jobs_and_trace(job_ids: list[int]) -> tuple[list[Job], Trace | None]:
    with new_session() as session:
        jobs = list(session.scalars(select(Job).where(Job.id.in_(job_ids)).order_by(Job.id)))
        jobs = [j for j in jobs if j.status != JobStatus.SUCCEEDED]
        trace = session.get(Trace, jobs[0].trace_id) if jobs else None
        return jobs, trace


def union_tables(kinds: list[str]) -> dict[str, tuple[str, ...]]:
    tables: dict[str, tuple[str, ...]] = {}
    for kind in kinds:
        for table, cols in ANALYSES[kind].tables.items():
            tables[table] = tuple(dict.fromkeys(tables.get(table, ()) + cols))
    return tables


def _fail_all(jobs: list[Job], message: str) -> None:
    for job in jobs:
        mark_failed(get_engine(), job.id, message)


def plan_and_run(job_ids: list[int], send_part) -> None:
    """Entry of the `run_analyses` task (the jobs claimed, backend.jobs.leases): run
    small traces here, fan big ones out."""
    jobs, trace = _jobs_and_trace(job_ids)
    if not jobs:
        return
    if trace is None or trace.status != TraceStatus.READY:
        _fail_all(jobs, "the trace is not ready (deleted, failed or still ingesting)")
        return
    step_jobs = [j for j in jobs if ANALYSES[j.kind].reduce is not None]
    for job in jobs:
        if ANALYSES[job.kind].reduce is None:
            _run_whole(job, trace)
    if not step_jobs:
        return
    steps, shared = _steps_and_shared_params(step_jobs, trace)
    n_parts = max(1, math.ceil(trace.n_samples / get_settings().analysis_part_samples))
    if n_parts == 1:
        _run_here(step_jobs, trace, steps, shared)
        return
    ranges = step_ranges(steps, n_parts)
    open_parts([j.id for j in step_jobs], ranges)
    send_part([j.id for j in step_jobs], len(ranges), shared)


def _steps_and_shared_params(jobs: list[Job], trace: Trace) -> tuple[list[int], dict[str, dict]]:
    """The trace's steps, and each job's parameters with what every step range must
    share fixed from the whole trace (each spec's `shared_params`: max(column) + 1)."""
    with new_session() as session:
        steps = list(session.scalars(select(Step.step).where(Step.trace_id == trace.id).order_by(Step.step)))
        shared = {}
        for job in jobs:
            params = dict(job.params)
            for name, (table, column) in ANALYSES[job.kind].shared_params.items():
                rows = Base.metadata.tables[table]
                top = session.scalar(select(func.max(rows.c[column])).where(rows.c.trace_id == trace.id))
                if not params.get(name) and top is not None and top >= 0:
                    params[name] = int(top) + 1
            shared[str(job.id)] = params
    return steps, shared


def _run_here(jobs: list[Job], trace: Trace, steps: list[int], shared: dict[str, dict]) -> None:
    """Run the jobs in this task, reading step-range chunks in a background thread while
    the previous chunk is analysed (so the job costs about one read), then reduce."""
    engine = get_engine()
    tables = union_tables([j.kind for j in jobs])
    ranges = step_ranges(steps, max(1, math.ceil(trace.n_samples / PIPELINE_CHUNK_SAMPLES)))

    def read(step_range: tuple[int, int]) -> TraceData:
        with engine.connect() as conn:
            return load_trace_data(conn, trace, tables, step_range)

    partials: dict[int, list[dict]] = {j.id: [] for j in jobs}
    failed: set[int] = set()
    with ThreadPoolExecutor(1) as reader:
        pending = reader.submit(read, ranges[0]) if ranges else None
        for i in range(len(ranges)):
            assert pending is not None  # a read is submitted for every range
            try:
                data = pending.result()
            except Exception as exc:
                log.exception("reading trace %s failed", trace.id)
                _fail_all([j for j in jobs if j.id not in failed], f"could not read the trace: {exc}")
                return
            pending = reader.submit(read, ranges[i + 1]) if i + 1 < len(ranges) else None
            for job in jobs:
                if job.id in failed:
                    continue
                try:
                    partials[job.id].append(json_safe(run_analysis(job.kind, data, shared[str(job.id)])))
                except Exception as exc:
                    log.exception("analysis job %s (%s) failed", job.id, job.kind)
                    mark_failed(engine, job.id, f"{job.kind} failed: {type(exc).__name__}: {exc}")
                    failed.add(job.id)
                set_progress(
                    engine,
                    job.id,
                    0.05 + 0.9 * (i + 1) / len(ranges),
                    f"{job.kind}: steps {ranges[i][0]}..{ranges[i][1] - 1}",
                )
    for job in jobs:
        if job.id in failed:
            continue
        try:
            result = json_safe(reduce_results(job.kind, partials[job.id], shared[str(job.id)]))
        except Exception as exc:
            mark_failed(engine, job.id, f"{job.kind} failed while merging: {type(exc).__name__}: {exc}")
            continue
        mark_succeeded(engine, job.id, result, "done")


def run_part(job_ids: list[int], idx: int, shared: dict) -> None:
    """Entry of the `analysis_part` task: one step range for every job of the run."""
    engine = get_engine()
    jobs, trace = _jobs_and_trace(job_ids)
    if not jobs or trace is None:
        return
    step_range = part_span(jobs[0].id, idx)
    with engine.connect() as conn:
        data = load_trace_data(conn, trace, union_tables([j.kind for j in jobs]), step_range)
    for job in jobs:
        try:
            partial = json_safe(run_analysis(job.kind, data, shared[str(job.id)]))
        except Exception as exc:
            log.exception("analysis job %s part %s failed", job.id, idx)
            mark_failed(engine, job.id, f"{job.kind} failed on steps {step_range}: {type(exc).__name__}: {exc}")
            continue
        _complete_part(job, idx, partial, shared[str(job.id)])


def _complete_part(job: Job, idx: int, partial: dict, params: dict) -> None:
    engine = get_engine()
    done = complete_part(job.id, idx, partial)
    if done is None:
        return
    try:
        result = json_safe(reduce_results(job.kind, done.results, params))
    except Exception as exc:
        mark_failed(engine, job.id, f"{job.kind} failed while merging parts: {type(exc).__name__}: {exc}")
        return
    result["parts"] = len(done.results)
    result["part_workers"] = done.workers
    mark_succeeded(engine, job.id, result, f"done in {len(done.results)} parts")


def _run_whole(job: Job, trace: Trace) -> None:
    """An analysis without step-range parts (the GPU timeline): one read, one run."""
    engine = get_engine()
    try:
        with engine.connect() as conn:
            data = load_trace_data(conn, trace, ANALYSES[job.kind].tables)
        set_progress(engine, job.id, 0.3, f"{job.kind}: computing")
        result = json_safe(run_analysis(job.kind, data, job.params))
    except Exception as exc:
        log.exception("%s job %s failed", job.kind, job.id)
        mark_failed(engine, job.id, f"{job.kind} failed: {type(exc).__name__}: {exc}")
        return
    mark_succeeded(engine, job.id, result, "done")


__all__ = ["plan_and_run", "run_part", "TraceData"]
