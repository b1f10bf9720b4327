"""named API keys and storage quotas: a team has several keys (named, revocable, with
when each was last used) in api_keys, its one key of before becoming the first of them;
a per-team quota override and each trace's stored bytes; ingest jobs name their upload
folder instead of carrying its path on the server

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 12:00:00
"""

import json
from pathlib import PurePath

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

FIRST_KEY_NAME = "first key"

teams = sa.table(
    "teams",
    sa.column("id", sa.Integer),
    sa.column("api_key_hash", sa.String),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
api_keys = sa.table(
    "api_keys",
    sa.column("id", sa.Integer),
    sa.column("team_id", sa.Integer),
    sa.column("name", sa.String),
    sa.column("key_hash", sa.String),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("revoked_at", sa.DateTime(timezone=True)),
)
jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("kind", sa.String), sa.column("params", sa.JSON))


def _ingest_params(fix) -> None:
    conn = op.get_bind()
    for job_id, params in conn.execute(sa.select(jobs.c.id, jobs.c.params).where(jobs.c.kind == "ingest")):
        if isinstance(params, str):
            params = json.loads(params)
        if isinstance(params, dict):
            new = fix(params)
            if new != params:
                conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(params=new))


def _to_upload(params: dict) -> dict:
    """{"folder": "/data/uploads/<hex>"} -> {"upload": "<hex>"} (the folder's name under
    the data folder's uploads/, where every process of a deployment finds it)."""
    if "folder" not in params:
        return params
    out = {k: v for k, v in params.items() if k != "folder"}
    out["upload"] = PurePath(str(params["folder"])).name
    return out


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("prefix", sa.String(20), nullable=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_keys_team_id", "api_keys", ["team_id"])
    conn = op.get_bind()
    rows = conn.execute(sa.select(teams.c.id, teams.c.api_key_hash, teams.c.created_at)).all()
    if rows:
        op.bulk_insert(
            api_keys,
            [{"team_id": i, "name": FIRST_KEY_NAME, "key_hash": h, "created_at": t} for i, h, t in rows],
        )
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("api_key_hash")
        batch.add_column(sa.Column("quota_bytes", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("traces") as batch:
        batch.add_column(sa.Column("stored_bytes", sa.BigInteger(), nullable=False, server_default=sa.text("0")))
    conn.execute(sa.text("UPDATE traces SET stored_bytes = size_bytes"))
    _ingest_params(_to_upload)


def downgrade() -> None:
    """The oldest key each team still has becomes its one key again; the other keys, the
    quotas and the stored bytes are dropped. Ingest jobs queued meanwhile keep the name
    of their upload folder (the code of before cannot find it: run them before)."""
    with op.batch_alter_table("traces") as batch:
        batch.drop_column("stored_bytes")
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("quota_bytes")
        batch.add_column(sa.Column("api_key_hash", sa.String(64), nullable=True))
    conn = op.get_bind()
    first = (
        sa.select(api_keys.c.key_hash)
        .where(api_keys.c.team_id == teams.c.id, api_keys.c.revoked_at.is_(None))
        .order_by(api_keys.c.id)
        .limit(1)
        .scalar_subquery()
    )
    conn.execute(sa.update(teams).values(api_key_hash=first))
    # a team left without a key gets an unusable one (no key's SHA-256 looks like this)
    unusable = sa.literal("revoked-") + sa.cast(teams.c.id, sa.String)
    conn.execute(sa.update(teams).where(teams.c.api_key_hash.is_(None)).values(api_key_hash=unusable))
    op.drop_index("ix_api_keys_team_id", table_name="api_keys")
    op.drop_table("api_keys")
    with op.batch_alter_table("teams") as batch:
        batch.alter_column("api_key_hash", existing_type=sa.String(64), nullable=False)
        batch.create_unique_constraint("uq_teams_api_key_hash", ["api_key_hash"])
