"""samples: index (trace_id, response_len) for the sample table's length filter and sort,
and a partial index (trace_id, step) of truncated samples for its truncated filter

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 08:40:00.000000
"""
import sqlalchemy as sa
from alembic import op


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_samples_trace_response_len', 'samples', ['trace_id', 'response_len'], unique=False)
    op.create_index(
        'ix_samples_trace_truncated_step',
        'samples',
        ['trace_id', 'step'],
        unique=False,
        postgresql_where=sa.text('truncated IS TRUE'),
        sqlite_where=sa.text('truncated IS TRUE'),
    )


def downgrade() -> None:
    op.drop_index('ix_samples_trace_truncated_step', table_name='samples')
    op.drop_index('ix_samples_trace_response_len', table_name='samples')
