"""How to reach the job queue: the Celery configuration both sides share, and a
producer that sends jobs by task name (the backend never imports the workers).

Embedded default: kombu's filesystem transport in the data folder (our atomic variant,
`fs_transport`), consumed by a real worker process, so jobs cross a process boundary
exactly as they do with Redis. Job state lives in the database (the Job table), not in a
Celery result backend.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from backend.jobs import fs_transport
from backend.settings import Settings, get_settings

fs_transport.register()

APP_NAME = "rlvr_explorer"


def broker_url(settings: Settings) -> str:
    """The configured broker; the embedded filesystem one uses our atomic variant."""
    url = settings.celery_broker
    if url.startswith("filesystem://"):
        return fs_transport.SCHEME + url[len("filesystem") :]
    return url


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings for producer and worker alike."""
    broker = broker_url(settings)
    conf: dict[str, Any] = {
        "broker_url": broker,
        "task_default_queue": settings.queue_name,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        # A job is acknowledged only after it ran, so a worker killed mid-job leaves it
        # to be redelivered to another worker.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": 6 * 3600,
        "task_soft_time_limit": 6 * 3600 - 60,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
    }
    if broker.startswith(fs_transport.SCHEME):
        queue = str(settings.queue_dir)
        conf["broker_transport_options"] = {
            "data_folder_in": queue,
            "data_folder_out": queue,
            "control_folder": str(settings.queue_dir / "control"),
            # The folder is polled; a short interval keeps job pickup prompt.
            "polling_interval": 0.1,
        }
        (settings.queue_dir / "control").mkdir(parents=True, exist_ok=True)
        conf["worker_enable_remote_control"] = False
    else:
        # Redis: a job a dead worker held (unacknowledged) goes back to the queue once
        # it is older than the visibility timeout; workers look for such jobs this often.
        timeout = settings.visibility_timeout_s
        conf["broker_transport_options"] = {
            "visibility_timeout": timeout,
            "unacked_restore_interval": min(10, max(1, timeout // 2)),
            "unacked_restore_throttle": 1,
        }
    return conf


def make_celery(settings: Settings | None = None, include: list[str] | None = None) -> Celery:
    settings = settings or get_settings()
    conf = celery_config(settings)
    app = Celery(APP_NAME, broker=conf["broker_url"], include=include or [])
    app.conf.update(conf)
    return app


_producers: dict[tuple[str, str, str], Celery] = {}


def producer() -> Celery:
    """A Celery app for sending jobs with the current settings (tests switch brokers
    within one process, so there is one per broker, queue folder and queue name)."""
    settings = get_settings()
    key = (broker_url(settings), str(settings.queue_dir), settings.queue_name)
    if key not in _producers:
        _producers[key] = make_celery(settings)
    return _producers[key]
