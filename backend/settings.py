"""Configuration, validated at start (pydantic-settings, env prefix RLVR_).

With nothing set, everything runs embedded: a SQLite file and a filesystem Celery
transport in the data folder, with a real worker process. Setting `DATABASE_URL` and
`CELERY_BROKER_URL` (or the RLVR_ names) switches to Postgres and Redis.
"""

from __future__ import annotations

import os
import secrets
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

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
    # ... of which reads (GET): few, since they share one process's GIL (backend/api/limits.py).
    api_max_concurrent_reads: int = 4
    max_upload_bytes: int = 4 * 1024**3
    max_uncompressed_bytes: int = 32 * 1024**3
    max_archive_files: int = 100_000
    max_compression_ratio: float = 200.0
    # The Celery queue jobs go to (separate deployments sharing one broker use their own).
    queue_name: str = "rlvr"
    # Analyses of traces with more samples than this run in step-range parts in parallel.
    analysis_part_samples: int = 4_000_000
    # An advisor sweep with several rollout layouts runs as a Celery group, one task per
    # layout, over every worker process; off: in the one task that plans it (on
    # RLVR_ADVICE_WORKERS processes of its own where it may fork).
    advice_fanout: bool = True
    # `rlvr-explorer ingest` of a GPU trace with at most this many GPU events runs its
    # analyses in its own process instead of leaving them to a worker (a second
    # interpreter and its imports cost more than they do).
    inline_analyses_max_gpu_events: int = Field(default=500_000, ge=0)
    # Redis broker: seconds before a job a dead worker held is handed to another worker.
    visibility_timeout_s: int = 3600
    # Job leases (backend.jobs.leases): a running job's worker renews its lease every
    # `job_lease_s / 3` seconds; a job whose lease expired is queued again by the sweeper
    # that runs in every worker every `job_sweep_s` seconds, at most `job_max_attempts`
    # times, then it fails with the reason. A queued job whose message is gone (lost with
    # a killed worker) is sent again: found by looking into the queue (embedded folder,
    # Redis), or, where that is not possible, once it was sent over `job_requeue_s` ago; a
    # queued job never sent (the broker was down) is sent once the broker is back.
    job_lease_s: float = Field(default=30.0, gt=0)
    job_sweep_s: float = Field(default=10.0, gt=0)
    job_requeue_s: float = Field(default=120.0, gt=0)
    job_max_attempts: int = Field(default=3, ge=1)
    # API keys found are kept this long per API process: a key revoked on one process is
    # refused by every other within this time (backend/auth.py).
    key_cache_s: float = Field(default=2.0, gt=0, le=60)
    # Storage per team (its traces' uploaded bytes, or what they expanded to when
    # larger; backend/ingest/quota.py), 0 = no limit; `rlvr-explorer quota` sets a
    # team's own. Uploads beyond it are refused (413) before they are stored.
    team_quota_bytes: int = Field(default=100 * 1024**3, ge=0)
    # What an upload may expand to, checked while it is read (backend/ingest/bounds.py):
    # bytes per file once decompressed, samples per file and per step. With the
    # defaults an ingesting process stays under INGEST_MEMORY_CEILING_MB (1 GiB).
    max_file_bytes: int = Field(default=384 * 1024**2, ge=1)
    max_samples_per_file: int = Field(default=20_000_000, ge=1)
    max_samples_per_step: int = Field(default=8_000_000, ge=1)
    # Worker pool processes are replaced after this many tasks, or once their resident
    # memory passes this many MiB (Celery's worker_max_tasks_per_child and
    # worker_max_memory_per_child): memory a big job left behind goes back to the OS.
    worker_max_tasks_per_child: int = Field(default=100, ge=1)
    worker_max_memory_per_child_mb: int = Field(default=1024, ge=64)
    # Origins (scheme://host[:port]) whose pages may make state-changing dashboard
    # requests, besides the one the request was sent to; comma-separated. Set it behind
    # a proxy that changes the Host header (rlvr_explorer/server.py).
    trusted_origins: str = ""
    # The URL users open the dashboard at (https://rlvr.example.com): its origin may make
    # state-changing dashboard requests, and its host is one the deployment answers to.
    public_url: str = ""
    api_url: str = "http://127.0.0.1:8000"
    # Signs the dashboard's session cookies and seals the API key in them. Unset: one is
    # made on first start and kept in the data folder (`session_secret`).
    secret_key: str | None = None

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        parts = urlsplit(v.strip())
        if v.strip() and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise ValueError(f"RLVR_PUBLIC_URL must be an http(s) URL such as https://rlvr.example.com, not {v!r}")
        return v.strip()

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

    @property
    def secret_key_file(self) -> Path:
        return self.data_dir / "secret_key"

    def session_secret(self) -> str:
        """`secret_key` (RLVR_SECRET_KEY) when set; else the secret kept in the data folder,
        created on first start (mode 0600, atomically: concurrent first starts agree), so
        restarts and the several processes of a deployment share it."""
        if self.secret_key:
            return self.secret_key
        path = self.secret_key_file
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".secret_key.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(48) + "\n")
            try:
                os.link(tmp, path)  # fails if another process got there first: use theirs
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
        secret = path.read_text().strip()
        if len(secret) < 32:
            raise RuntimeError(f"{path}: the session secret is too short (delete the file to make a new one)")
        return secret

    @property
    def trusted_origin_list(self) -> list[str]:
        """`trusted_origins` and `public_url`'s origin, normalised (lower case, no path)."""
        given = [o for o in (*self.trusted_origins.split(","), self.public_url) if o.strip()]
        return [_origin(o) for o in given]

    def ensure_dirs(self) -> None:
        # The queue folder is only for the embedded filesystem broker (not with Redis).
        queue = (self.queue_dir,) if self.celery_broker.startswith("filesystem://") else ()
        for d in (self.data_dir, *queue, self.upload_dir):
            d.mkdir(parents=True, exist_ok=True)


def _origin(url: str) -> str:
    """scheme://host[:port] of a URL, lower case (a path or trailing slash dropped)."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.netloc else url.strip().rstrip("/").lower()


@lru_cache
def get_settings() -> Settings:
    settings = Settings()
    settings.ensure_dirs()
    return settings
