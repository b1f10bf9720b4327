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


def _insert_trace(conn, md, trace_id: int, cap, columns: list[str], summary: dict) -> None:
    now = datetime.now(UTC)
    counts = {c: 0 for c in ("n_steps", "n_turns", "n_tool_calls", "n_rank_timings", "n_gpu_events", "size_bytes")}
    conn.execute(
        sa.insert(md.tables["traces"]).values(
            id=trace_id, team_id=1, name=f"old {trace_id}", status="ready", content_hash=f"h{trace_id}",
            n_samples=4, max_response_len=cap, tasks=[], meta={"columns": {"samples": columns}},
            created_at=now, updated_at=now, **counts,
        )
    )  # fmt: skip
    conn.execute(
        sa.insert(md.tables["steps"]).values(
            trace_id=trace_id, step=0, validate=False, n_groups=1, n_samples=4, prompt_tokens=4,
            response_tokens=0, metrics={}, summary=summary,
        )
    )  # fmt: skip


def test_old_traces_get_the_one_definition(backend_env):
    url = backend_env["RLVR_DATABASE_URL"]
    cfg = alembic_config(url)
    before = ScriptDirectory.from_config(cfg).get_revision("0011").down_revision
    command.downgrade(cfg, before)
    engine = sa.create_engine(url)
    try:
        md = sa.MetaData()
        md.reflect(engine)
        with engine.begin() as conn:
            conn.execute(sa.insert(md.tables["teams"]).values(id=1, name="t", api_key_hash="x" * 64,
                                                                created_at=datetime.now(UTC)))  # fmt: skip
            # 1: cap only (at-cap share in the summary); 2: stop reasons and a cap
            _insert_trace(conn, md, 101, 100, ["prompt_len", "response_len"],
                          {"response": {"all": {"count": 4, "truncation_rate": 0.5}}})  # fmt: skip
            _insert_trace(conn, md, 102, 100, ["prompt_len", "response_len", "truncated"],
                          {"response": {"all": {"count": 4, "truncation_rate": 0.5, "truncation_rate_flag": 0.25},
                                        "math": {"count": 4, "truncation_rate": 0.5}}})  # fmt: skip
            rows = [(101, 0, i, 100 if i < 2 else 5, None) for i in range(4)]
            rows += [(102, 0, i, 100 if i < 2 else 5, i == 3) for i in range(4)]
            for t, s, i, r, flag in rows:
                conn.execute(sa.insert(md.tables["samples"]).values(
                    trace_id=t, step=s, group_idx=0, sample_idx=i, prompt_len=1, response_len=r, truncated=flag))  # fmt: skip
        command.upgrade(cfg, "0011")
        with engine.connect() as conn:
            flags = dict(
                conn.execute(
                    sa.text("SELECT trace_id * 10 + sample_idx, truncated FROM samples WHERE trace_id > 100")
                ).all()
            )
            meta = {i: m for i, m in conn.execute(sa.text("SELECT id, meta FROM traces WHERE id > 100")).all()}
            summ = {i: s for i, s in conn.execute(sa.text("SELECT trace_id, summary FROM steps WHERE trace_id > 100"))}
            conn.execute(sa.text("DELETE FROM samples WHERE trace_id > 100"))
            conn.execute(sa.text("DELETE FROM steps WHERE trace_id > 100"))
            conn.execute(sa.text("DELETE FROM traces WHERE id > 100"))
            conn.execute(sa.text("DELETE FROM teams WHERE id = 1"))
            conn.commit()
        command.upgrade(cfg, "head")
    finally:
        engine.dispose()
    load = lambda v: json.loads(v) if isinstance(v, str) else v  # noqa: E731
    assert [bool(flags[1010 + i]) for i in range(4)] == [True, True, False, False]  # the cap applied
    assert [bool(flags[1020 + i]) for i in range(4)] == [False, False, False, True]  # stop reasons kept
    assert load(meta[101])["truncation"] == {"stop_reason": False, "cap": 100, "cap_source": None}
    assert "truncated" in load(meta[101])["columns"]["samples"]
    assert load(meta[102])["truncation"]["stop_reason"] is True
    assert load(summ[101])["response"]["all"]["truncation_rate"] == 0.5
    response = load(summ[102])["response"]
    assert response["all"]["truncation_rate"] == 0.25 and "truncation_rate_flag" not in response["all"]
    assert response["math"]["truncation_rate"] is None
