"""Configuration, validated at start (pydantic-settings, env prefix RLVR_).

With nothing set, everything runs embedded: a SQLite file and a filesystem Celery
transport in the data folder, with a real worker process. Setting `DATABASE_URL` and
`CELERY_BROKER_URL` (or the RLVR_ names) switches to Postgres and Redis.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLVR_", env_file=".env", extra="ignore")

    data_dir: Path = Path("data")
    database_url: str | None = Field(default=None, validation_alias=AliasChoices("RLVR_DATABASE_URL", "DATABASE_URL"))
    broker_url: str | None = Field(default=None, validation_alias=AliasChoices("RLVR_BROKER_URL", "CELERY_BROKER_URL"))
    # Uploads up to this size are ingested during the request (errors come back as 4xx),
    # at most `inline_ingest_concurrency` at a time per API process; larger ones, and
    # any beyond that number, are ingested by a worker job and the API answers 202.
    inline_ingest_max_bytes: int = 4 * 1024**2
    inline_ingest_concurrency: int = 1
    # Database connections per process: the pool, the extra connections above it, and
    # how long a request waits for one before failing.
    db_pool_size: int = 10
    db_max_overflow: int = 30
    db_pool_timeout_s: float = 30.0
    # API requests in progress at once per process (others wait their turn); kept below
    # the pool and the thread pool (backend/api/limits.py).
    api_max_concurrent_requests: int = 32
    max_upload_bytes: int = 4 * 1024**3
    max_uncompressed_bytes: int = 32 * 1024**3
    max_archive_files: int = 100_000
    max_compression_ratio: float = 200.0
    # The Celery queue jobs go to (separate deployments sharing one broker use their own).
    queue_name: str = "rlvr"
    # Analyses of traces with more samples than this run in step-range parts in parallel.
    analysis_part_samples: int = 4_000_000
    # Redis broker: seconds before a job a dead worker held is handed to another worker.
    visibility_timeout_s: int = 3600
    api_url: str = "http://127.0.0.1:8000"
    secret_key: str | None = None

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        return v.expanduser().resolve()

    @property
    def db_url(self) -> str:
        if self.database_url:
            url = self.database_url
            # Plain postgres URLs get the psycopg 3 driver (COPY support).
            for prefix in ("postgresql://", "postgres://"):
                if url.startswith(prefix):
                    return "postgresql+psycopg://" + url[len(prefix) :]
            return url
        return f"sqlite:///{self.data_dir / 'rlvr.sqlite3'}"

    @property
    def celery_broker(self) -> str:
        return self.broker_url or "filesystem://"

    @property
    def queue_dir(self) -> Path:
        return self.data_dir / "queue"

    @property
    def upload_dir(self) -> Path:
        return self.data_dir / "uploads"

    def ensure_dirs(self) -> None:
        for d in (self.data_dir, self.queue_dir, self.upload_dir):
            d.mkdir(parents=True, exist_ok=True)


@lru_cache
def get_settings() -> Settings:
    settings = Settings()
    settings.ensure_dirs()
    return settings
