"""Writes a trace's truncation definition (core/analysis/truncation.py) into its stored
samples once, at ingestion, and reads it back for the API.

Samples whose reader recorded a stop reason keep it; the others are marked truncated
when their response reached the cap (one UPDATE over the (trace_id, response_len)
index: only the few samples at the cap are touched). From then on the stored
``truncated`` column is the single truth that summaries, the samples filter, the
analyses and every page count.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.engine import Connection

from backend.store.models import Sample, Trace
from core.analysis.truncation import Truncation, choose_cap


def settle_truncation(
    conn: Connection,
    trace_id: int,
    sample_columns: set[str],
    *,
    given: int | None,
    recorded: int | None,
    inferred: int | None,
    kept: Truncation | None = None,
) -> Truncation:
    """The trace's truncation, applied to its samples without a recorded stop reason.

    `sample_columns`: the columns the samples just loaded received ("truncated" there
    means their reader recorded stop reasons); "truncated" is added when the column now
    holds the definition. `kept`: what the trace had before (files attached to it keep
    its cap). A cap is inferred only when no stop reason is recorded."""
    stop_reason = "truncated" in sample_columns or (kept is not None and kept.stop_reason)
    cap: int | None
    if kept is not None and kept.cap is not None:
        cap, source = kept.cap, kept.cap_source
    else:
        cap, source = choose_cap(given, recorded, None if stop_reason else inferred)
    if cap is not None:
        conn.execute(
            update(Sample)
            .where(Sample.trace_id == trace_id, Sample.truncated.is_(None), Sample.response_len >= cap)
            .values(truncated=True)
        )
        sample_columns.add("truncated")
    # stop reasons recorded and no cap: the cap the data shows, for the "at the length cap" share
    shown = None if cap is not None or not stop_reason else ((kept.shown_cap if kept else None) or inferred)
    return Truncation(stop_reason, cap, source, shown)


def truncation_meta(t: Truncation) -> dict:
    """What a trace's `meta["truncation"]` keeps (the definition's words are made when read)."""
    return {"stop_reason": t.stop_reason, "cap": t.cap, "cap_source": t.cap_source, "shown_cap": t.shown_cap}


def trace_truncation(trace: Trace) -> Truncation:
    """A stored trace's truncation. Traces ingested before it was kept in their
    metadata: a stored ``truncated`` column was then the reader's stop reasons."""
    meta = trace.meta or {}
    kept = meta.get("truncation")
    if kept is None:
        columns = (meta.get("columns") or {}).get("samples") or ()
        kept = {"stop_reason": "truncated" in columns}
    return Truncation.from_dict(kept, trace.max_response_len)
