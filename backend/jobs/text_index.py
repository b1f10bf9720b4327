"""The text-index job from the API's side: queued when a trace with sample texts (a
verl rollout dump) becomes ready or gets more of them, run by a worker
(workers/runners/text_index.py). Until it has run, text search reads every sample in
scope (backend/store/text_search.py); the trace's metadata says which
(``metadata.rollouts.indexed``)."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from backend.jobs.contracts import TEXT_INDEX_KIND
from backend.jobs.dispatch import QueueUnavailable, dispatch
from backend.jobs.state import create_job
from backend.store.models import Trace

log = logging.getLogger(__name__)


def has_texts(trace: Trace) -> bool:
    return bool(((trace.meta or {}).get("rollouts") or {}).get("samples"))


def queue_text_index(session: Session, trace: Trace) -> None:
    """Queue (re)building the trace's index when it has texts not indexed yet."""
    rollouts = (trace.meta or {}).get("rollouts") or {}
    if not has_texts(trace) or rollouts.get("indexed") == rollouts.get("samples"):
        return
    job = create_job(session, team_id=trace.team_id, trace_id=trace.id, kind=TEXT_INDEX_KIND, params={})
    session.commit()
    try:
        dispatch(job.id, TEXT_INDEX_KIND)
    except QueueUnavailable as exc:  # searching still works (by reading the texts); the outbox sends it
        log.warning("text index of trace %s waits for the job queue: %s", trace.id, exc)
