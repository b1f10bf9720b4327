"""one truncation: a trace's stored samples hold its definition (core/analysis/truncation.py)
and its step summaries count it

Traces ingested before kept two figures: the share at the cap (truncation_rate) and, when
the reader recorded stop reasons (a stored ``truncated`` column), the flagged share
(truncation_rate_flag). Now: stop reason where recorded, else at the cap. Per trace with
samples: samples without a stop reason at or above the cap are marked truncated (the
(trace_id, response_len) index finds them), traces with stop reasons take the flagged share
as their truncation_rate (per task it was only ever at the cap: unknown until re-upload),
and ``meta["truncation"]`` records the basis. Data only; downgrading leaves it (the older
code reads the same columns).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 09:00:00
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

traces = sa.table(
    "traces",
    sa.column("id", sa.Integer),
    sa.column("n_samples", sa.BigInteger),
    sa.column("max_response_len", sa.Integer),
    sa.column("meta", sa.JSON),
)
steps = sa.table("steps", sa.column("trace_id", sa.Integer), sa.column("step", sa.Integer), sa.column("summary", sa.JSON))
samples = sa.table(
    "samples",
    sa.column("trace_id", sa.Integer),
    sa.column("response_len", sa.Integer),
    sa.column("truncated", sa.Boolean),
)


def _loaded(value):
    return json.loads(value) if isinstance(value, str) else value


def _flag_share(summary: dict) -> dict:
    response = dict(summary.get("response") or {})
    for key, stats in response.items():
        stats = dict(stats)
        flag = stats.pop("truncation_rate_flag", None)
        stats["truncation_rate"] = flag if key == "all" else None
        response[key] = stats
    return {**summary, "response": response}


def _settle(conn, trace_id: int, cap, meta: dict) -> None:
    columns = dict(meta.get("columns") or {})
    sample_columns = set(columns.get("samples") or ())
    stop_reason = "truncated" in sample_columns
    if cap and not stop_reason:
        conn.execute(
            sa.update(samples)
            .where(samples.c.trace_id == trace_id, samples.c.truncated.is_(None), samples.c.response_len >= cap)
            .values(truncated=True)
        )
        columns["samples"] = sorted(sample_columns | {"truncated"})
    if stop_reason:
        rows = conn.execute(sa.select(steps.c.step, steps.c.summary).where(steps.c.trace_id == trace_id)).all()
        for step, summary in rows:
            summary = _loaded(summary)
            if isinstance(summary, dict) and summary.get("response"):
                conn.execute(
                    sa.update(steps)
                    .where(steps.c.trace_id == trace_id, steps.c.step == step)
                    .values(summary=_flag_share(summary))
                )
    truncation = {"stop_reason": stop_reason, "cap": cap, "cap_source": None}
    conn.execute(
        sa.update(traces).where(traces.c.id == trace_id).values(meta={**meta, "columns": columns, "truncation": truncation})
    )


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(traces.c.id, traces.c.max_response_len, traces.c.meta).where(traces.c.n_samples > 0)
    ).all()
    for trace_id, cap, meta in rows:
        meta = _loaded(meta) or {}
        if isinstance(meta, dict) and "truncation" not in meta:
            _settle(conn, trace_id, cap, meta)


def downgrade() -> None:
    pass  # data only: the older code reads the same columns
