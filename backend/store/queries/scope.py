"""The team scope of a trace's rows."""

from __future__ import annotations

from sqlalchemy import ColumnElement, exists

from backend.store.models import Trace


def owned_trace(team_id: int, trace_id: int) -> ColumnElement[bool]:
    """True when trace `trace_id` is team `team_id`'s. Uncorrelated, so the database
    checks it once per query (Postgres: a one-time filter), not per row, and the plan of
    the scan it guards is unchanged."""
    return exists().where(Trace.id == trace_id, Trace.team_id == team_id)
