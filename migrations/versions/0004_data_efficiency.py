"""data efficiency: DAPO filter marks and trainer step per sample

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 08:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("samples") as batch:
        batch.add_column(sa.Column("filter_mark", sa.SmallInteger(), nullable=True))
        batch.add_column(sa.Column("trainer_step", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("samples") as batch:
        batch.drop_column("trainer_step")
        batch.drop_column("filter_mark")
