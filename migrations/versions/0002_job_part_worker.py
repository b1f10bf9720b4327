"""job_parts.worker: which worker ran each step-range part

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 08:00:00.000000
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job_parts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('worker', sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job_parts', schema=None) as batch_op:
        batch_op.drop_column('worker')
