"""Celery tasks: thin wrappers that load a job, call pure code, and store the outcome.

The Job row carries status, progress and the result; a task only receives its id.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready, worker_shutting_down
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from backend.formats.base import InputError
from backend.jobs import leases
from backend.jobs.contracts import (
    ADVICE_KIND,
    ENGINE_REPLAY_KIND,
    INGEST_KIND,
    SIMULATION_KIND,
    TASK_NAMES,
    TEXT_INDEX_KIND,
    WORKLOAD_KIND,
)
from backend.jobs.fence import Abandoned
from backend.jobs.lease_terms import fanout_lease_s
from backend.jobs.state import mark_failed, mark_succeeded, set_progress
from backend.jobs.sweeper import Sweeper
from backend.settings import get_settings
from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobStatus
from workers.celery_app import celery_app

log = logging.getLogger(__name__)

# Transient database trouble (a restart, a dropped connection) is retried.
RETRY: dict[str, Any] = {"autoretry_for": (OperationalError,), "retry_backoff": 2, "max_retries": 5}


def _load_job(job_id: int) -> Job | None:
    with new_session() as session:
        return session.scalars(select(Job).where(Job.id == job_id)).first()


@celery_app.task(name=TASK_NAMES[INGEST_KIND], **RETRY)
def ingest_upload(job_id: int) -> None:
    from backend.ingest.service import ingest_stored
    from backend.ingest.uploads import discard
    from backend.jobs.contracts import upload_folder

    job_id = job_id[0] if isinstance(job_id, list) else job_id
    job = _load_job(job_id)
    if job is None or job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        return
    assert job.trace_id is not None  # an ingest job is created with its trace
    engine = get_engine()
    folder = upload_folder(job.params or {}, get_settings())

    def progress(fraction: float, message: str) -> None:
        if leases.lost(job_id):
            raise leases.LeaseLost(f"job {job_id}: another worker took over its lease")
        set_progress(engine, job_id, fraction, message)

    with leases.running([job_id], engine) as claimed:
        if not claimed:
            return
        try:
            # (files gone: the trace fails with "the upload holds no files")
            present = folder is not None and folder.is_dir()
            ingest_stored(
                job.trace_id,
                sorted(p for p in folder.iterdir() if p.is_file()) if folder is not None and present else [],
                get_settings(),
                job.params.get("format"),
                job.params.get("max_response_len"),
                progress=progress,
                fence=leases.fence(job_id),
            )
        except InputError as exc:
            mark_failed(engine, job_id, str(exc))
            discard(folder)
            return
        except (OperationalError, Abandoned):
            raise  # retried; or another worker owns the job now
        except Exception as exc:  # a crash: the job says why instead of hanging
            log.exception("ingest job %s failed", job_id)
            mark_failed(engine, job_id, f"{type(exc).__name__}: {exc}")
            discard(folder)
            return
        discard(folder)
        mark_succeeded(engine, job_id, {"trace_id": job.trace_id}, "ready")


@celery_app.task(name=TASK_NAMES["analyses"], **RETRY)
def run_analyses(job_ids: list[int]) -> None:
    """Analysis jobs of one trace; big traces fan out into `analysis_part` tasks."""
    from celery import group

    from workers.runners.analyses import plan_and_run

    def send_parts(ids: list[int], n_parts: int, shared: dict) -> None:
        group(analysis_part.s(ids, i, shared) for i in range(n_parts)).apply_async()

    with leases.running(list(job_ids) if isinstance(job_ids, list) else [job_ids]) as claimed:
        if claimed:
            plan_and_run(claimed, send_parts)
            # Jobs fanned out into parts stay running while the parts wait in the queue.
            leases.extend(get_engine(), claimed, fanout_lease_s())


@celery_app.task(name=TASK_NAMES["analysis_part"], **RETRY)
def analysis_part(job_ids: list[int], idx: int, shared: dict) -> None:
    from workers.runners.analyses import run_part

    with leases.sharing(job_ids):
        run_part(job_ids, idx, shared)


@celery_app.task(name=TASK_NAMES[SIMULATION_KIND], **RETRY)
def run_simulation(job_id: int) -> None:
    """A simulator replay of a trace (or a synthetic workload) under one or two policies."""
    from workers.runners.simulations import run_simulation_job

    job_id = job_id[0] if isinstance(job_id, list) else job_id
    with leases.running([job_id]) as claimed:
        if claimed:
            run_simulation_job(job_id)


@celery_app.task(name=TASK_NAMES[WORKLOAD_KIND], **RETRY)
def run_workload(job_id: int) -> None:
    """Fit a trace's length model and/or generate a synthetic workload, ingested as a trace."""
    from workers.runners.workloads import run_workload_job

    job_id = job_id[0] if isinstance(job_id, list) else job_id
    with leases.running([job_id]) as claimed:
        if claimed:
            run_workload_job(job_id)


@celery_app.task(name=TASK_NAMES[ENGINE_REPLAY_KIND], **RETRY)
def run_engine_replay(job_id: int) -> None:
    """A trace replayed on real inference engines beside the simulator's prediction (sent
    to the `engine` queue: run by a worker of the engine environment)."""
    from workers.runners.engine_replay import run_engine_replay_job

    job_id = job_id[0] if isinstance(job_id, list) else job_id
    with leases.running([job_id]) as claimed:
        if claimed:
            run_engine_replay_job(job_id)


@celery_app.task(name=TASK_NAMES[ADVICE_KIND], **RETRY)
def run_advice(job_id: int) -> None:
    """The configuration advisor's sweep over one trace; fans out into `advice_part` tasks."""
    from celery import group

    from workers.runners.advice import run_advice_job

    def send_parts(job: int, n_parts: int, shared: dict) -> None:
        group(advice_part.s(job, i, shared) for i in range(n_parts)).apply_async()

    job_id = job_id[0] if isinstance(job_id, list) else job_id
    with leases.running([job_id]) as claimed:
        if claimed:
            run_advice_job(job_id, send_parts)
            # A sweep fanned out into parts stays running while the parts wait in the queue.
            leases.extend(get_engine(), claimed, fanout_lease_s())


@celery_app.task(name=TASK_NAMES["advice_part"], **RETRY)
def advice_part(job_id: int, idx: int, shared: dict) -> None:
    from workers.runners.advice import run_advice_part

    with leases.sharing([job_id]):
        run_advice_part(job_id, idx, shared)


@celery_app.task(name=TASK_NAMES[TEXT_INDEX_KIND], **RETRY)
def index_texts(job_id: int) -> None:
    """The full-text index of a trace's sample texts (rollout dumps)."""
    from workers.runners.text_index import build_text_index

    job_id = job_id[0] if isinstance(job_id, list) else job_id
    job = _load_job(job_id)
    if job is None or job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        return
    assert job.trace_id is not None  # a text index job is created with its trace
    trace_id = job.trace_id
    engine = get_engine()
    with leases.running([job_id], engine) as claimed:
        if not claimed:
            return
        try:
            n = build_text_index(engine, trace_id, lambda f, m: set_progress(engine, job_id, f, m))
        except OperationalError:
            raise
        except Exception as exc:
            log.exception("text index job %s failed", job_id)
            mark_failed(engine, job_id, f"{type(exc).__name__}: {exc}")
            return
        mark_succeeded(engine, job_id, {"trace_id": job.trace_id, "indexed": n}, "indexed")


# The sweeper runs in every worker's main process (backend.jobs.leases).
_sweeper: list[Sweeper] = []


@worker_ready.connect
def _start_sweeper(**_kwargs) -> None:
    _sweeper.append(Sweeper().start())


@worker_shutting_down.connect
def _stop_sweeper(**_kwargs) -> None:
    for sweeper in _sweeper:
        sweeper.stop()
