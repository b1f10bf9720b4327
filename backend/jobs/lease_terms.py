"""The terms of a job lease shared by its holders (backend/jobs/leases.py), the
heartbeat that renews them (heartbeat.py) and the sweeper that ends expired ones
(sweeper.py): who holds a lease, for how long, and timestamps compared in UTC."""

from __future__ import annotations

import os
import socket
import threading
from datetime import UTC, datetime, timedelta

from sqlalchemy import case
from sqlalchemy.engine import Engine

from backend.settings import Settings, get_settings
from backend.store.models import Job


def worker_id() -> str:
    """Who holds a lease: host, process (a pool child has its own) and thread (a
    threads pool runs several jobs in one process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def lease_length(settings: Settings) -> timedelta:
    return timedelta(seconds=settings.job_lease_s)


def jobs_engine() -> Engine:
    from backend.store.db import get_engine

    return get_engine()


def fanout_lease_s() -> float:
    """The lease of a job whose step-range parts wait in the queue: no part started or
    finished for this long means they were lost (the job is then planned again)."""
    settings = get_settings()
    return max(settings.job_lease_s, settings.job_requeue_s)


def at_least(until: datetime):
    return case((Job.lease_until > until, Job.lease_until), else_=until)


def aware(t: datetime) -> datetime:
    """A timestamp read back from the database as aware UTC (SQLite returns it naive)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
