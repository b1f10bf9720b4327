"""live traces: a live flag on traces and a per-trace record of attached content

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 09:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("traces") as batch:
        batch.add_column(sa.Column("live", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "trace_attachments",
        sa.Column("trace_id", sa.Integer(), sa.ForeignKey("traces.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("content_hash", sa.String(64), primary_key=True),
        sa.Column("names", sa.JSON(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("tables", sa.JSON(), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("trace_attachments")
    with op.batch_alter_table("traces") as batch:
        batch.drop_column("live")
