"""From a stored upload to a trace: dedupe by content, then ingest now or hand to a worker."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from backend.formats.base import InputError
from backend.ingest.pipeline import Progress, ingest_trace, set_trace_status
from backend.ingest.uploads import StoredUpload, discard, upload_sources
from backend.jobs.analyses import queue_default_analyses
from backend.jobs.contracts import INGEST_KIND
from backend.jobs.dispatch import dispatch
from backend.jobs.state import create_job
from backend.settings import Settings
from backend.store.db import get_engine, new_session
from backend.store.models import Job, Trace, TraceStatus

_inline_slots: dict[int, threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def _inline_slot(settings: Settings) -> threading.BoundedSemaphore:
    """The process' inline-ingestion slots: uploads beyond them go to a worker, so
    uploads cannot take every thread and connection the reads need."""
    n = max(0, settings.inline_ingest_concurrency)
    with _slots_lock:
        return _inline_slots.setdefault(n, threading.BoundedSemaphore(n))


@dataclass
class UploadOutcome:
    trace: Trace
    job: Job | None
    created: bool  # False: the team had uploaded the same content before


def _existing(session: Session, team_id: int, content_hash: str) -> Trace | None:
    return session.scalars(select(Trace).where(Trace.team_id == team_id, Trace.content_hash == content_hash)).first()


def accept_upload(
    session: Session,
    settings: Settings,
    *,
    team_id: int,
    stored: StoredUpload,
    name: str | None,
    forced_format: str | None,
    max_response_len: int | None,
    inline: bool | None = None,
    progress: Progress | None = None,
) -> UploadOutcome:
    """Create the trace for an upload and ingest it (inline when small, else by a job).

    Inline failures raise InputError and leave nothing behind: no rows, no trace.
    """
    existing = _existing(session, team_id, stored.content_hash)
    if existing is not None and existing.status != TraceStatus.FAILED:
        discard(stored.folder)
        return UploadOutcome(existing, None, created=False)
    if existing is not None:  # a failed earlier attempt: replace it
        session.execute(delete(Trace).where(Trace.id == existing.id))
    trace = Trace(
        team_id=team_id,
        name=name or stored.files[0].name,
        source_format=forced_format,
        status=TraceStatus.PENDING,
        content_hash=stored.content_hash,
        size_bytes=stored.size_bytes,
        meta={},
    )
    session.add(trace)
    session.flush()
    slot = None
    if inline is None:  # the API: small, and a free slot
        slot = _inline_slot(settings)
        inline = stored.size_bytes <= settings.inline_ingest_max_bytes and slot.acquire(blocking=False)
        if not inline:
            slot = None
    if not inline:
        job = create_job(
            session,
            team_id=team_id,
            trace_id=trace.id,
            kind=INGEST_KIND,
            params={
                "folder": str(stored.folder),
                "format": forced_format,
                "max_response_len": max_response_len,
            },
        )
        session.commit()
        dispatch(job.id, INGEST_KIND)
        return UploadOutcome(trace, job, created=True)
    try:
        session.commit()
        ingest_stored(trace.id, stored.files, settings, forced_format, max_response_len, progress)
    except InputError:
        session.execute(delete(Trace).where(Trace.id == trace.id))
        session.commit()
        raise
    finally:
        if slot is not None:
            slot.release()
        discard(stored.folder)
    session.refresh(trace)
    return UploadOutcome(trace, None, created=True)


def ingest_stored(
    trace_id: int,
    files: list,
    settings: Settings,
    forced_format: str | None,
    max_response_len: int | None,
    progress: Progress | None = None,
) -> None:
    """Expand the stored files (archives, .gz) and ingest them into the trace."""
    engine = get_engine()
    try:
        sources = upload_sources(files, settings)
    except InputError as exc:
        set_trace_status(engine, trace_id, TraceStatus.FAILED, str(exc))
        raise
    ingest_trace(
        engine,
        trace_id,
        sources,
        forced_format=forced_format,
        max_response_len=max_response_len,
        progress=progress,
    )
    with new_session() as session:
        queue_default_analyses(session, session.get(Trace, trace_id))
