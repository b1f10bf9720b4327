"""From a stored upload to a trace: dedupe by content, then ingest now or hand to a worker."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from backend.formats.base import InputError
from backend.ingest.bounds import Bounds
from backend.ingest.naming import default_trace_name
from backend.ingest.pipeline import Progress, ingest_trace, set_trace_status
from backend.ingest.quota import QuotaExceeded, Usage, team_usage
from backend.ingest.uploads import StoredUpload, discard, upload_sources
from backend.jobs import leases
from backend.jobs.analyses import queue_default_analyses
from backend.jobs.contracts import INGEST_KIND, upload_folder
from backend.jobs.dispatch import dispatch
from backend.jobs.fence import Abandoned, Fence
from backend.jobs.lease_terms import aware
from backend.jobs.state import create_job
from backend.jobs.text_index import queue_text_index
from backend.settings import Settings, get_settings
from backend.store.db import get_engine, new_session
from backend.store.deletion import delete_traces
from backend.store.models import Job, JobStatus, Trace, TraceStatus, utcnow

log = logging.getLogger(__name__)

_inline_slots: dict[int, threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def _inline_slot(settings: Settings) -> threading.BoundedSemaphore:
    """The process' inline-ingestion slots: uploads beyond them go to a worker, so
    uploads cannot take every thread and connection the reads need."""
    n = max(0, settings.inline_ingest_concurrency)
    with _slots_lock:
        return _inline_slots.setdefault(n, threading.BoundedSemaphore(n))


class IngestionInProgress(RuntimeError):
    """The same content is being ingested inline by another request. It is not handed
    back as this upload's trace: that request may still fail (a database restart) and
    leave nothing, so the caller is asked to retry (a 503 with Retry-After) until the
    trace is ready, or is started again."""


@dataclass
class UploadOutcome:
    trace: Trace
    job: Job | None
    created: bool  # False: the team had uploaded the same content before


def _existing(session: Session, team_id: int, content_hash: str) -> Trace | None:
    """The team's trace of this content, unless it is one to start again: failed, or
    stuck (pending/ingesting with no live ingestion: its job failed or lost its worker's
    lease, or, ingested inline, its request's process stopped touching it)."""
    trace = session.scalars(select(Trace).where(Trace.team_id == team_id, Trace.content_hash == content_hash)).first()
    if trace is None or trace.status == TraceStatus.READY:
        return trace
    if trace.status == TraceStatus.FAILED or not _ingestion_alive(session, trace):
        if _discard_attempt(session, trace):
            return None
        # touched meanwhile (alive after all), or removed by another request
        return session.get(Trace, trace.id, populate_existing=True)
    return trace


def _ingest_job(session: Session, trace: Trace) -> Job | None:
    """The trace's latest ingest job (None: it is ingested inline, by a request)."""
    return session.scalars(
        select(Job).where(Job.trace_id == trace.id, Job.kind == INGEST_KIND).order_by(Job.id.desc())
    ).first()


def _ingestion_alive(session: Session, trace: Trace) -> bool:
    job = _ingest_job(session, trace)
    now = utcnow()
    if job is None:  # inline: the request's heartbeat touches updated_at
        return aware(trace.updated_at) >= now - timedelta(seconds=get_settings().job_lease_s)
    if job.status == JobStatus.QUEUED:  # sent, or in the outbox the sweeper sends
        return True
    if job.status == JobStatus.RUNNING:
        return job.lease_until is not None and aware(job.lease_until) >= now
    return False  # failed, or succeeded while the trace is not ready


def _discard_attempt(session: Session, trace: Trace) -> bool:
    """Remove a failed or stuck attempt, its rows and jobs, unless the trace was touched
    since it was read (an inline ingestion whose batch held SQLite's write lock commits
    its touch before this delete can run): False then."""
    folders = session.scalars(select(Job.params).where(Job.trace_id == trace.id, Job.kind == INGEST_KIND)).all()
    if not delete_traces(session, Trace.id == trace.id, Trace.updated_at <= trace.updated_at):
        return False
    session.flush()
    for params in folders:
        discard(upload_folder(params or {}, get_settings()))
    return True


def changed_options(
    trace: Trace, *, name: str | None, forced_format: str | None, max_response_len: int | None
) -> dict[str, str]:
    """What the options given with content the team already uploaded would change in its
    trace, upload field -> in words (empty: the same trace would result). The API answers
    409 with them, the CLI exits 1 naming them as its flags."""
    from backend.ingest.truncation import trace_truncation

    out = {}
    if name is not None and name != trace.name:
        out["name"] = f"named {name!r} instead of {trace.name!r}"
    if forced_format is not None and forced_format != trace.source_format:
        out["format"] = f"files read as {forced_format} instead of {trace.source_format or 'detected formats'}"
    if max_response_len is not None and max_response_len != trace.max_response_len:
        before = trace_truncation(trace).definition().removeprefix("truncated = ")
        out["max_response_len"] = (
            f"truncation counted at the {max_response_len:,}-token cap"
            + (" for samples without a recorded stop reason" if trace_truncation(trace).stop_reason else "")
            + f" (now: {before})"
        )
    return out


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
    if existing is not None:
        discard(stored.folder)
        if existing.status != TraceStatus.READY and _ingest_job(session, existing) is None:
            raise IngestionInProgress(f"trace {existing.id}: the same upload is being ingested by another request")
        return UploadOutcome(existing, None, created=False)
    try:  # again, now that the upload is stored: uploads of the team may have raced
        team_usage(session, team_id, settings).check_stored(stored, settings)
    except (QuotaExceeded, InputError):  # (an archive too broken to read its directory)
        discard(stored.folder)
        raise
    trace = Trace(
        team_id=team_id,
        name=name or default_trace_name(stored.files),
        source_format=forced_format,
        status=TraceStatus.PENDING,
        content_hash=stored.content_hash,
        size_bytes=stored.size_bytes,
        stored_bytes=stored.size_bytes,
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
        return _queue_ingest(session, trace, stored, forced_format, max_response_len)
    try:
        session.commit()
        with leases.touching_trace(trace.id):
            ingest_stored(
                trace.id, stored.files, settings, forced_format, max_response_len, progress, shown=stored.shown
            )
    except (InputError, QuotaExceeded):
        delete_traces(session, Trace.id == trace.id)
        session.commit()
        raise
    except DBAPIError:
        # The database went away: leave no trace behind if it is back; if it
        # is not, the trace stops being touched and a re-upload starts it again.
        _forget(trace.id)
        raise
    finally:
        if slot is not None:
            slot.release()
        discard(stored.folder)
    session.refresh(trace)
    return UploadOutcome(trace, None, created=True)


def _queue_ingest(
    session: Session, trace: Trace, stored: StoredUpload, forced_format: str | None, max_response_len: int | None
) -> UploadOutcome:
    """The trace's ingest as a worker's job."""
    job = create_job(
        session,
        team_id=trace.team_id,
        trace_id=trace.id,
        kind=INGEST_KIND,
        params={
            "upload": stored.folder.name if stored.folder is not None else None,
            "format": forced_format,
            "max_response_len": max_response_len,
        },
    )
    session.commit()
    # The job is committed: if the broker is down, QueueUnavailable (503) leaves it
    # in the outbox, sent by the workers' sweeper once the broker is back.
    dispatch(job.id, INGEST_KIND)
    return UploadOutcome(trace, job, created=True)


def _forget(trace_id: int) -> None:
    try:
        with get_engine().begin() as conn:
            delete_traces(conn, Trace.id == trace_id)
    except Exception as exc:
        log.warning("could not remove trace %s after a failed inline ingestion: %s", trace_id, exc)


def _room_for(trace_id: int, settings: Settings) -> Usage:
    """The team's usage without the trace being ingested: what the bytes read from its
    upload may reach."""
    with new_session() as session:
        trace = session.get(Trace, trace_id)
        if trace is None:  # deleted before its ingestion began: it commits nothing
            raise Abandoned(f"trace {trace_id} was deleted during its ingestion")
        return team_usage(session, trace.team_id, settings).without(int(trace.stored_bytes or 0))


def ingest_stored(
    trace_id: int,
    files: list,
    settings: Settings,
    forced_format: str | None,
    max_response_len: int | None,
    progress: Progress | None = None,
    fence: Fence | None = None,
    shown: dict | None = None,
) -> None:
    """Expand the stored files (archives, .gz) and ingest them into the trace (`fence`:
    backend.jobs.fence.Fence, for an ingestion a job's lease owns; `shown`: the files'
    names in messages, when not their own)."""
    engine = get_engine()
    try:
        sources = upload_sources(files, settings, shown)
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
        fence=fence,
        bounds=Bounds(settings, _room_for(trace_id, settings)),
    )
    with new_session() as session:
        queue_default_analyses(session, session.get_one(Trace, trace_id))
        queue_text_index(session, session.get_one(Trace, trace_id))
