"""The worker's Celery application (`celery -A workers.celery_app`): the shared queue
configuration (backend.jobs.broker) with this package's tasks registered."""

from __future__ import annotations

from backend.jobs.broker import make_celery

celery_app = make_celery(include=["workers.tasks"])
