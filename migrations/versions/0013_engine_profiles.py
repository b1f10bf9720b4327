"""engine profiles: the simulator's iteration-time coefficients fitted on a real engine's
batch x context sweep, with the engine, device, architecture, TP and fit quality

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 05:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "engine_profiles",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
        sa.Column("engine", sa.String(100), nullable=False),
        sa.Column("device", sa.String(300), nullable=False),
        sa.Column("arch", sa.String(300), nullable=False),
        sa.Column("tp", sa.Integer(), nullable=False),
        sa.Column("coefficients", sa.JSON(), nullable=False),
        sa.Column("fit", sa.JSON(), nullable=False),
        sa.Column("limits", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_engine_profiles_team_id", "engine_profiles", ["team_id"])
    op.create_index("ix_engine_profiles_lookup", "engine_profiles", ["team_id", "engine", "device", "arch"])


def downgrade() -> None:
    op.drop_index("ix_engine_profiles_lookup", table_name="engine_profiles")
    op.drop_index("ix_engine_profiles_team_id", table_name="engine_profiles")
    op.drop_table("engine_profiles")
