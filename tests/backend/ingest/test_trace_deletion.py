"""Deleting a trace removes the rows of every table, the bulk tables included (they have
no foreign key to traces), and an ingestion whose trace was deleted meanwhile commits
nothing (both databases)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, insert, select

from backend.ingest.service import ingest_stored
from backend.jobs.fence import Abandoned
from backend.settings import get_settings
from backend.store.db import get_engine, session_scope
from backend.store.deletion import BULK_TABLES, delete_traces
from backend.store.models import (
    GpuEvent,
    RankTiming,
    Sample,
    SampleExtra,
    SampleText,
    Step,
    ToolCall,
    Trace,
    TraceStatus,
    Turn,
)
from tests.helpers import synthetic_rows, write_packed_dir

ROWS = {
    Sample: {"step": 0, "group_idx": 0, "sample_idx": 0, "prompt_len": 1, "response_len": 2},
    Turn: {"step": 0, "group_idx": 0, "sample_idx": 0, "turn": 0},
    ToolCall: {"step": 0, "group_idx": 0, "sample_idx": 0, "call_idx": 0},
    RankTiming: {"step": 0, "rank": 0, "phase": "gen"},
    GpuEvent: {
        "event_idx": 0,
        "rank": 0,
        "stream": 7,
        "step": 0,
        "kind": 0,
        "name_id": 0,
        "start_us": 0.0,
        "dur_us": 1.0,
    },
    SampleText: {
        "step": 0,
        "group_idx": 0,
        "sample_idx": 0,
        "prompt": b"p",
        "response": b"r",
        "prompt_chars": 1,
        "response_chars": 1,
    },
    SampleExtra: {"step": 0, "group_idx": 0, "sample_idx": 0, "key": "acc", "value_num": 1.0},
}


def _trace(session, team_id: int, name: str) -> int:
    trace = Trace(team_id=team_id, name=name, status=TraceStatus.READY, content_hash=name, size_bytes=0, meta={})
    session.add(trace)
    session.flush()
    return trace.id


def _count(model, trace_id: int) -> int:
    with session_scope() as s:
        return s.scalar(select(func.count()).select_from(model).where(model.trace_id == trace_id))


@pytest.fixture()
def team_id(env) -> int:
    import uuid

    from backend.auth import create_team

    with session_scope() as s:
        team, _key = create_team(s, f"deletion-{uuid.uuid4().hex[:8]}")
        return team.id


def test_every_bulk_table_is_covered():
    assert set(BULK_TABLES) == set(ROWS)
    for model in BULK_TABLES:  # no foreign key left on the bulk tables, all kept elsewhere
        assert not model.__table__.c.trace_id.foreign_keys
    assert Step.__table__.c.trace_id.foreign_keys


def test_delete_traces_removes_their_bulk_rows_only(team_id):
    with session_scope() as s:
        gone, kept = _trace(s, team_id, "gone"), _trace(s, team_id, "kept")
        for model, row in ROWS.items():
            s.execute(insert(model), [{"trace_id": gone, **row}, {"trace_id": kept, **row}])
    with session_scope() as s:
        assert delete_traces(s, Trace.id == gone) == [gone]
    for model in BULK_TABLES:
        assert (_count(model, gone), _count(model, kept)) == (0, 1), model.__tablename__
    with session_scope() as s:
        assert delete_traces(s, Trace.id == gone) == []  # nothing matches: nothing deleted


def test_an_ingestion_of_a_deleted_trace_commits_nothing(team_id, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=3, groups=4, n=2, seed=5))
    with session_scope() as s:
        trace_id = _trace(s, team_id, "deleted meanwhile")
    with get_engine().begin() as conn:
        delete_traces(conn, Trace.id == trace_id)
    with pytest.raises(Abandoned, match="deleted during its ingestion"):
        ingest_stored(trace_id, sorted(folder.iterdir()), get_settings(), None, None)
    for model in (*BULK_TABLES, Step):
        assert _count(model, trace_id) == 0
