"""Run the Alembic migrations in migrations/ (the only way the schema is created).

`migrations` is an importable package with its versions as package data, so this works
from a source checkout, an editable install and a regular (non-editable) install alike."""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(files("migrations")))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str | None = None, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)
