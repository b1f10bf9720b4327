"""rollout dumps: samples.repeat_period; sample_texts (zstd-compressed prompt and
response per sample) and sample_extras (reward_extra_infos values, typed); the text
search index: sample_text_search (tsvector + GIN) on Postgres, sample_text_fts (FTS5)
on SQLite, filled by the text-index job

Revision ID: 0010
Revises: 0008 (0009 is being written beside it; the chain is set when both are merged)
Create Date: 2026-12-02 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0008"
branch_labels = None
depends_on = None

KEY = ("trace_id", "step", "group_idx", "sample_idx")


def _key_columns() -> list:
    return [sa.Column(name, sa.Integer(), nullable=False) for name in KEY]


def upgrade() -> None:
    with op.batch_alter_table("samples") as batch:
        batch.add_column(sa.Column("repeat_period", sa.Integer(), nullable=True))
    op.create_table(
        "sample_texts",
        *_key_columns(),
        sa.Column("prompt", sa.LargeBinary(), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        sa.Column("prompt_chars", sa.Integer(), nullable=False),
        sa.Column("response_chars", sa.Integer(), nullable=False),
        sa.Column("gts", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint(*KEY),
    )
    op.create_table(
        "sample_extras",
        *_key_columns(),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("value_num", sa.Float(), nullable=True),
        sa.Column("value_text", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint(*KEY, "key"),
    )
    if op.get_bind().dialect.name == "postgresql":
        # the texts arrive zstd-compressed: TOAST stores them out of line without trying
        # its own compression again (pglz would spend CPU on every value and give up)
        for column in ("prompt", "response"):
            op.execute(f"ALTER TABLE sample_texts ALTER COLUMN {column} SET STORAGE EXTERNAL")
        op.execute(
            "CREATE TABLE sample_text_search (trace_id integer NOT NULL, step integer NOT NULL, "
            "group_idx integer NOT NULL, sample_idx integer NOT NULL, tokens tsvector NOT NULL, "
            "PRIMARY KEY (trace_id, step, group_idx, sample_idx))"
        )
        op.execute("CREATE INDEX ix_sample_text_search_tokens ON sample_text_search USING gin (tokens)")
    else:
        # the distinct words of a sample's texts (not the texts: those stay compressed);
        # detail=none: which rows hold a word, no positions (phrases are checked on the text)
        op.execute(
            "CREATE VIRTUAL TABLE sample_text_fts USING fts5(tokens, trace_id UNINDEXED, step UNINDEXED, "
            "group_idx UNINDEXED, sample_idx UNINDEXED, detail=none)"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TABLE sample_text_search")
    else:
        op.execute("DROP TABLE sample_text_fts")
    op.drop_table("sample_extras")
    op.drop_table("sample_texts")
    with op.batch_alter_table("samples") as batch:
        batch.drop_column("repeat_period")
