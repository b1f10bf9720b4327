"""The heartbeat: one thread per process that runs jobs, renewing every
`job_lease_s / 3` seconds the leases it holds (and touching `traces.updated_at` of the
ingestions it runs inline, without a job; on SQLite the ingestion also touches it in each
commit of its own, as this thread cannot write while the ingestion holds the write lock)."""

from __future__ import annotations

import logging
import os
import threading
from datetime import timedelta

from sqlalchemy import update

from backend.jobs.lease_terms import at_least, fanout_lease_s, jobs_engine, lease_length
from backend.settings import get_settings
from backend.store.models import Job, JobStatus, Trace, utcnow

log = logging.getLogger(__name__)


class Heartbeat:
    """One thread per process renewing the leases it holds."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.jobs: dict[int, str | None] = {}  # job id -> the claimant, None: shared
        self.traces: set[int] = set()
        self.lost: set[int] = set()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def _ensure_thread(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._run, name="job-lease-heartbeat", daemon=True)
            # it sleeps and renews leases in the database; a child forked beside it for pure
            # work (core.forking) never uses the database, so none of its locks
            self.thread.fork_safe = True  # type: ignore[attr-defined]
            self.thread.start()

    def hold(self, job_ids: list[int], owner: str | None) -> None:
        with self.lock:
            for job_id in job_ids:
                self.jobs[job_id] = owner
                self.lost.discard(job_id)
            if job_ids:
                self._ensure_thread()

    def drop(self, job_ids: list[int]) -> None:
        with self.lock:
            for job_id in job_ids:
                self.jobs.pop(job_id, None)
                self.lost.discard(job_id)

    def hold_trace(self, trace_id: int) -> None:
        with self.lock:
            self.traces.add(trace_id)
            self._ensure_thread()
        # touched at once, then every job_lease_s / 3 from now (not at the end of a wait
        # begun when nothing was held, or under other settings)
        self.wake.set()

    def drop_trace(self, trace_id: int) -> None:
        with self.lock:
            self.traces.discard(trace_id)

    def _run(self) -> None:
        while True:
            self.wake.wait(max(0.2, get_settings().job_lease_s / 3))
            self.wake.clear()
            try:
                self.renew()
            except Exception as exc:
                log.warning("lease heartbeat failed: %s", exc)

    def renew(self) -> None:
        with self.lock:
            owned = {j: o for j, o in self.jobs.items() if o is not None}
            shared = [j for j, o in self.jobs.items() if o is None]
            traces = list(self.traces)
        if not (owned or shared or traces):
            return
        now = utcnow()
        until = now + lease_length(get_settings())
        shared_until = now + timedelta(seconds=fanout_lease_s())
        with jobs_engine().begin() as conn:
            kept: set[int] = set()
            for owner in set(owned.values()):
                kept.update(
                    conn.execute(
                        update(Job)
                        .where(
                            Job.id.in_([j for j, o in owned.items() if o == owner]),
                            Job.status == JobStatus.RUNNING,
                            Job.worker == owner,
                        )
                        .values(lease_until=at_least(until))
                        .returning(Job.id)
                    ).scalars()
                )
            gone = set(owned) - kept
            if gone:
                log.warning("lost the lease of jobs %s (taken over or finished)", sorted(gone))
                with self.lock:
                    self.lost.update(j for j in gone if j in self.jobs)
            if shared:
                conn.execute(
                    update(Job)
                    .where(Job.id.in_(shared), Job.status == JobStatus.RUNNING)
                    .values(lease_until=at_least(shared_until))
                )
            if traces:
                # never back in time: on SQLite this update may have waited for the
                # ingestion's own write lock, whose commit touched the trace later than `now`
                conn.execute(update(Trace).where(Trace.id.in_(traces), Trace.updated_at < now).values(updated_at=now))


_heartbeats: dict[int, Heartbeat] = {}
_heartbeats_lock = threading.Lock()


def heartbeat() -> Heartbeat:
    """This process's heartbeat (a forked pool child gets its own: threads do not fork)."""
    pid = os.getpid()
    with _heartbeats_lock:
        if pid not in _heartbeats:
            _heartbeats.clear()
            _heartbeats[pid] = Heartbeat()
        return _heartbeats[pid]
