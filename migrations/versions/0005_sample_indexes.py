"""samples: index (trace_id, response_len) for the sample table's length filter and sort

Revision ID: 0005
Revises: 0002
Create Date: 2026-12-01 08:40:00.000000
"""
from alembic import op


revision = '0005'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_samples_trace_response_len', 'samples', ['trace_id', 'response_len'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_samples_trace_response_len', table_name='samples')
