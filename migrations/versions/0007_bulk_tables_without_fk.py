"""bulk tables without a foreign key to traces: samples, turns, tool_calls, rank_timings,
gpu_events (Postgres checked it with a trigger per COPY-ed row; their rows are now
deleted beside their trace, backend/store/deletion.py)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 11:30:00
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = ("samples", "turns", "tool_calls", "rank_timings", "gpu_events")
# SQLite's reflected foreign keys have no name: batch mode names them by this convention
NAMING = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}


def _fk_name(table: str) -> str:
    if op.get_bind().dialect.name == "postgresql":
        return f"{table}_trace_id_fkey"  # Postgres's own name for the unnamed constraint
    return f"fk_{table}_trace_id_traces"


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, naming_convention=NAMING) as batch:
            batch.drop_constraint(_fk_name(table), type_="foreignkey")


def downgrade() -> None:
    # rows whose trace is gone would refuse the constraint: remove them first
    for table in TABLES:
        op.execute(f"DELETE FROM {table} WHERE trace_id NOT IN (SELECT id FROM traces)")
        with op.batch_alter_table(table, naming_convention=NAMING) as batch:
            batch.create_foreign_key(_fk_name(table), "traces", ["trace_id"], ["id"], ondelete="CASCADE")
