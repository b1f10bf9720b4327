"""How to reach the job queue: the Celery configuration both sides share, and a
producer that sends jobs by task name (the backend never imports the workers).

Embedded default: kombu's filesystem transport in the data folder (our atomic variant,
`fs_transport`), consumed by a real worker process, so jobs cross a process boundary
exactly as they do with Redis. Job state lives in the database (the Job table), not in a
Celery result backend.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any

from celery import Celery

from backend.jobs import fs_transport
from backend.settings import Settings, get_settings

fs_transport.register()

APP_NAME = "rlvr_explorer"

log = logging.getLogger(__name__)


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


# --------------------------------------------------------------------------- inspection

# kombu's Redis transport: a queue is a list per priority step ("<queue>\x06\x16<step>"
# above 0), fetched-but-unacknowledged messages a hash of [payload, exchange, routing key].
_REDIS_PRIORITY_SEP = "\x06\x16"
_REDIS_PRIORITY_STEPS = (0, 3, 6, 9)
_REDIS_UNACKED = "unacked"
_REDIS_UNACKED_INDEX = "unacked_index"  # delivery tag -> when a worker fetched it


def _job_ids_of(payload: dict) -> set[int]:
    """The job ids a task message carries (its first argument: an id or a list of ids)."""
    body = payload["body"]
    if (payload.get("properties") or {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args = json.loads(body)[0]  # Celery message protocol 2: [args, kwargs, embed]
    first = args[0] if args else None
    ids = first if isinstance(first, list) else [first]
    return {int(i) for i in ids if isinstance(i, int) and not isinstance(i, bool)}


def queued_job_ids(settings: Settings | None = None) -> set[int] | None:
    """Ids of the jobs that have a message in this deployment's queue (waiting, or
    fetched by a worker and not yet acknowledged, on Redis), or None when the broker
    cannot be inspected. A job queued in the database with no message here lost it.

    On Redis a fetched message counts only while it was fetched less than `job_lease_s`
    ago: a worker claims a job as soon as it starts it, so a queued job's message
    fetched before that went with a worker killed before it started the job (Redis
    would hand it out again only after the visibility timeout, an hour)."""
    settings = settings or get_settings()
    queue = settings.queue_name
    try:
        payloads: list[dict] = []
        url = broker_url(settings)
        if url.startswith(fs_transport.SCHEME):
            for path in settings.queue_dir.glob(f"*.{queue}.msg"):
                try:
                    payloads.append(json.loads(path.read_bytes()))
                except FileNotFoundError:
                    continue  # fetched meanwhile
        elif url.startswith(("redis://", "rediss://")):
            import redis

            client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
            try:
                for step in _REDIS_PRIORITY_STEPS:
                    key = queue if not step else f"{queue}{_REDIS_PRIORITY_SEP}{step}"
                    payloads.extend(json.loads(m) for m in client.lrange(key, 0, -1))
                fresh = time.time() - settings.job_lease_s
                for tag, entry in client.hgetall(_REDIS_UNACKED).items():
                    payload, _exchange, routing_key = json.loads(entry)
                    fetched = client.zscore(_REDIS_UNACKED_INDEX, tag)
                    if routing_key == queue and (fetched is None or fetched > fresh):
                        payloads.append(payload)
            finally:
                client.close()
        else:
            return None
        ids: set[int] = set()
        for payload in payloads:
            try:
                ids |= _job_ids_of(payload)
            except (ValueError, KeyError, IndexError, TypeError):
                continue  # not one of our task messages
        return ids
    except Exception as exc:
        log.warning("could not inspect the job queue: %s", exc)
        return None
