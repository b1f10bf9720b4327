"""Migration 0011 brings traces ingested before the one truncation definition to it:
samples at the cap marked when no stop reason is recorded, summaries of stop-reason
traces counting the flag, the basis in the trace's metadata (on SQLite and Postgres)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from backend.store.migrate import alembic_config

CAP_ONLY = {"response": {"all": {"count": 4, "truncation_rate": 0.5}}}
WITH_FLAGS = {
    "response": {
        "all": {"count": 4, "truncation_rate": 0.5, "truncation_rate_flag": 0.25},
        "math": {"count": 4, "truncation_rate": 0.5},
    }
}


def _insert_trace(conn, md, team: int, trace_id: int, columns: list[str], summary: dict) -> None:
    now = datetime.now(UTC)
    counts = {c: 0 for c in ("n_steps", "n_turns", "n_tool_calls", "n_rank_timings", "n_gpu_events", "size_bytes")}
    conn.execute(
        sa.insert(md.tables["traces"]).values(
            id=trace_id, team_id=team, name=f"old {trace_id}", status="ready", content_hash=f"h{trace_id}",
            n_samples=4, max_response_len=100, tasks=[], meta={"columns": {"samples": columns}},
            created_at=now, updated_at=now, **counts,
        )
    )  # fmt: skip
    conn.execute(
        sa.insert(md.tables["steps"]).values(
            trace_id=trace_id, step=0, validate=False, n_groups=1, n_samples=4, prompt_tokens=4,
            response_tokens=0, metrics={}, summary=summary,
        )
    )  # fmt: skip


def _old_rows(engine) -> dict:
    """A cap-only trace and a trace with stop reasons, as the code before 0011 stored them
    (ids of their own: the session's database holds other tests' rows)."""
    md = sa.MetaData()
    md.reflect(engine)
    with engine.begin() as conn:
        team = (conn.scalar(sa.text("SELECT MAX(id) FROM teams")) or 0) + 1
        a = (conn.scalar(sa.text("SELECT MAX(id) FROM traces")) or 0) + 1
        b = a + 1
        conn.execute(
            sa.insert(md.tables["teams"]).values(
                id=team, name=f"migration {team}", api_key_hash=f"{team:0>64}", created_at=datetime.now(UTC)
            )
        )
        _insert_trace(conn, md, team, a, ["prompt_len", "response_len"], CAP_ONLY)
        _insert_trace(conn, md, team, b, ["prompt_len", "response_len", "truncated"], WITH_FLAGS)
        for t, flags in ((a, [None] * 4), (b, [False, False, False, True])):
            for i, flag in enumerate(flags):
                conn.execute(
                    sa.insert(md.tables["samples"]).values(
                        trace_id=t, step=0, group_idx=0, sample_idx=i, prompt_len=1,
                        response_len=100 if i < 2 else 5, truncated=flag,
                    )
                )  # fmt: skip
    return {"a": a, "b": b, "team": team}


def _read_and_remove(engine, ours: dict) -> tuple[dict, dict, dict]:
    q = "WHERE trace_id IN (:a, :b)"
    with engine.begin() as conn:
        flags = {
            (t, i): f
            for t, i, f in conn.execute(sa.text(f"SELECT trace_id, sample_idx, truncated FROM samples {q}"), ours)
        }
        meta = dict(conn.execute(sa.text("SELECT id, meta FROM traces WHERE id IN (:a, :b)"), ours).all())
        summ = dict(conn.execute(sa.text(f"SELECT trace_id, summary FROM steps {q}"), ours).all())
        for sql in (f"DELETE FROM samples {q}", f"DELETE FROM steps {q}", "DELETE FROM traces WHERE id IN (:a, :b)",
                    "DELETE FROM teams WHERE id = :team"):  # fmt: skip
            conn.execute(sa.text(sql), ours)
    return flags, meta, summ


def test_old_traces_get_the_one_definition(backend_env):
    url = backend_env["RLVR_DATABASE_URL"]
    cfg = alembic_config(url)
    before = ScriptDirectory.from_config(cfg).get_revision("0011").down_revision
    command.downgrade(cfg, before)
    engine = sa.create_engine(url)
    try:
        ours = _old_rows(engine)
        command.upgrade(cfg, "0011")
        flags, meta, summ = _read_and_remove(engine, ours)
        command.upgrade(cfg, "head")
    finally:
        engine.dispose()
    load = lambda v: json.loads(v) if isinstance(v, str) else v  # noqa: E731
    a, b = ours["a"], ours["b"]
    assert [bool(flags[(a, i)]) for i in range(4)] == [True, True, False, False]  # the cap applied
    assert [bool(flags[(b, i)]) for i in range(4)] == [False, False, False, True]  # stop reasons kept
    assert load(meta[a])["truncation"] == {"stop_reason": False, "cap": 100, "cap_source": None}
    assert "truncated" in load(meta[a])["columns"]["samples"]
    assert load(meta[b])["truncation"]["stop_reason"] is True
    assert load(summ[a])["response"]["all"]["truncation_rate"] == 0.5
    response = load(summ[b])["response"]
    assert response["all"]["truncation_rate"] == 0.25 and "truncation_rate_flag" not in response["all"]
    assert response["math"]["truncation_rate"] is None
