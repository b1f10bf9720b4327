"""The worker's Celery application (`celery -A workers.celery_app`): the shared queue
configuration (backend.jobs.broker) with this package's tasks registered, and the
worker's own: pool processes are replaced after `worker_max_tasks_per_child` tasks or
once their resident memory passes `worker_max_memory_per_child_mb` (checked after each
task), so memory a big ingestion or replay left behind goes back to the OS."""

from __future__ import annotations

from backend.jobs.broker import make_celery
from backend.settings import get_settings

celery_app = make_celery(include=["workers.tasks"])
_settings = get_settings()
celery_app.conf.update(
    worker_max_tasks_per_child=_settings.worker_max_tasks_per_child,
    worker_max_memory_per_child=_settings.worker_max_memory_per_child_mb * 1024,  # Celery counts KiB
)
