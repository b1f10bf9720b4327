"""Deleting traces with every row of theirs.

The tables with a foreign key to traces (steps, attachments, kernel names, jobs) follow
by ON DELETE CASCADE; the bulk tables have none (backend/store/models.py says why), so
their rows are deleted here, in the same transaction.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, delete
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from backend.store.models import (
    GpuEvent,
    GpuKernelName,
    RankTiming,
    Sample,
    SampleExtra,
    SampleText,
    Step,
    ToolCall,
    Trace,
    Turn,
)
from backend.store.text_search import delete_text_index

BULK_TABLES = (Sample, Turn, ToolCall, RankTiming, GpuEvent, SampleText, SampleExtra)
# every table holding a trace's rows: the bulk ones, its kernel names and its steps
TRACE_TABLES = (*BULK_TABLES, GpuKernelName, Step)


def clear_trace_rows(conn: Connection, trace_id: int) -> None:
    """Every row of one trace, the trace itself kept (an ingestion starting over; its
    text index is built only once the trace is ready)."""
    for model in TRACE_TABLES:
        conn.execute(delete(model).where(model.trace_id == trace_id))


def delete_traces(conn: Connection | Session, *where: ColumnElement[bool]) -> list[int]:
    """Delete the traces matching `where` and all their rows; their ids."""
    ids = list(conn.execute(delete(Trace).where(*where).returning(Trace.id)).scalars())
    if ids:
        for model in BULK_TABLES:
            conn.execute(delete(model).where(model.trace_id.in_(ids)))
        delete_text_index(conn, ids)
    return ids
