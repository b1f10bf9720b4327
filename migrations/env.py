"""Alembic environment: the URL comes from the project's settings (or the Config)."""

from __future__ import annotations

import re

from alembic import context

from backend.settings import get_settings
from backend.store.models import Base

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().db_url
# The text-search index differs per database (a tsvector table on Postgres, an FTS5 table
# and its shadow tables on SQLite; migration 0010): made by the migration, not modelled.
_SEARCH_INDEX = re.compile(r"^sample_text_(search|fts)(_\w+)?$")


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    table = name if type_ == "table" else getattr(getattr(obj, "table", None), "name", "")
    return not _SEARCH_INDEX.match(table or "")


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True, include_object=include_object)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    from backend.store.db import make_engine

    connectable = config.attributes.get("connection")
    if connectable is None:
        engine = make_engine(url)
        with engine.connect() as connection:
            _run(connection)
        engine.dispose()
    else:
        _run(connectable)


def _run(connection) -> None:
    if connection.dialect.name == "sqlite":
        # SQLite alters a table by copying it into a new one and dropping the old: with
        # foreign keys enforced, that drop would delete the rows referencing it (a team's
        # traces, jobs and keys). Off for the migration (outside a transaction, or it is a no-op).
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
