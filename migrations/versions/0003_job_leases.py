"""job leases: who runs a job and until when, and when its message was sent

A running job holds a lease (`lease_until`, renewed by its worker's heartbeat, and the
`worker` holding it); a job whose lease expired is queued again by the sweeper. A queued
job with no `dispatched_at` is in the outbox: committed, but its message not yet sent
(the broker was down), so the sweeper sends it when the broker is back; `queue` is the
Celery queue it goes to (its deployment's), where the sweeper re-sends it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 07:45:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("worker", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("queue", sa.String(length=200), nullable=True))
        batch_op.create_index("ix_jobs_status", ["status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_status")
        batch_op.drop_column("queue")
        batch_op.drop_column("dispatched_at")
        batch_op.drop_column("worker")
        batch_op.drop_column("lease_until")
