"""The Celery application.

Embedded default: kombu's filesystem transport in the data folder, consumed by a real
worker process (`rlvr-explorer worker`), so jobs cross a process boundary exactly as
they do with Redis. Job state lives in the database (the Job table), not in a Celery
result backend.
"""

from __future__ import annotations

from celery import Celery

from backend.settings import get_settings
from workers import fs_transport

fs_transport.register()


def broker_url(settings) -> str:  # noqa: ANN001
    """The configured broker; the embedded filesystem one uses our atomic variant."""
    url = settings.celery_broker
    if url.startswith("filesystem://"):
        return fs_transport.SCHEME + url[len("filesystem") :]
    return url


def make_celery() -> Celery:
    settings = get_settings()
    broker = broker_url(settings)
    app = Celery("rlvr_explorer", broker=broker, include=["workers.tasks"])
    app.conf.update(
        task_default_queue=settings.queue_name,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        # A job is acknowledged only after it ran, so a worker killed mid-job leaves it
        # to be redelivered to another worker.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=6 * 3600,
        task_soft_time_limit=6 * 3600 - 60,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if broker.startswith(fs_transport.SCHEME):
        queue = str(settings.queue_dir)
        app.conf.broker_transport_options = {
            "data_folder_in": queue,
            "data_folder_out": queue,
            "control_folder": str(settings.queue_dir / "control"),
            # The folder is polled; a short interval keeps job pickup prompt.
            "polling_interval": 0.1,
        }
        (settings.queue_dir / "control").mkdir(parents=True, exist_ok=True)
        app.conf.worker_enable_remote_control = False
    else:
        # Redis: a job a dead worker held (unacknowledged) goes back to the queue once
        # it is older than the visibility timeout; workers look for such jobs this often.
        timeout = settings.visibility_timeout_s
        app.conf.broker_transport_options = {
            "visibility_timeout": timeout,
            "unacked_restore_interval": min(10, max(1, timeout // 2)),
            "unacked_restore_throttle": 1,
        }
    return app


celery_app = make_celery()


_producers: dict[tuple[str, str, str], Celery] = {}


def producer() -> Celery:
    """A Celery app for sending jobs with the current settings (tests switch brokers
    within one process; a deployment always gets `celery_app` itself)."""
    settings = get_settings()
    key = (broker_url(settings), str(settings.queue_dir), settings.queue_name)
    current = (
        celery_app.conf.broker_url,
        celery_app.conf.broker_transport_options.get("data_folder_in", key[1]),
        celery_app.conf.task_default_queue,
    )
    if key == current:
        return celery_app
    if key not in _producers:
        _producers[key] = make_celery()
    return _producers[key]
