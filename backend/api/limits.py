"""At most N API requests in progress per process, and of those at most R reads; the
others wait for a slot, holding nothing but their socket.

Why a bound at all: a request takes a database connection in its first dependency (the
API key's team) and keeps it while it waits for a worker thread for its next step (the
trace, the endpoint). With more requests in progress than connections, the threads can
all be taken by requests waiting for a connection while the connections are held by
requests waiting for a thread: nothing moves until the pool's timeout, then 500s.
Keeping the number in progress below both the pool (size + overflow) and the thread
pool (40) rules that out.

Why a small lane for reads: reads are short and CPU-bound in Python, and threads of
one process share the GIL. Many at once only add switching (bench/load.py, 50 readers
on 2 CPUs, 2 API processes: 16 reads in progress per process gave 139 req/s and 9.9 ms
of API CPU per request, 4 gave 228 req/s and 5.6 ms). Writes (uploads, job requests)
have their own slots, so a slow upload body never takes a reader's place.
"""

from __future__ import annotations

import asyncio

THREADPOOL_TOKENS = 40  # anyio's default, which runs the sync endpoints and dependencies


def request_limit(pool_size: int, max_overflow: int, wanted: int) -> int:
    """The number of API requests let in at once: as wanted, but below the connections
    and the threads (a few kept for the requests' other steps)."""
    return max(1, min(wanted, pool_size + max_overflow - 2, THREADPOOL_TOKENS - 4))


class ConcurrencyLimit:
    """ASGI middleware: HTTP requests under `prefix` wait for one of `limit` slots, and
    reads (GET, HEAD) also for one of `reads` slots (default: no separate bound)."""

    def __init__(self, app, limit: int, prefix: str = "/api/", reads: int | None = None) -> None:
        self.app, self.limit, self.prefix = app, limit, prefix
        self.reads = min(reads or limit, limit)
        self._slots: asyncio.Semaphore | None = None
        self._read_slots: asyncio.Semaphore | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix) or scope["path"].endswith("/health"):
            await self.app(scope, receive, send)
            return
        if self._slots is None or self._read_slots is None:
            self._slots = asyncio.Semaphore(self.limit)
            self._read_slots = asyncio.Semaphore(self.reads)
        if scope.get("method", "GET") in ("GET", "HEAD"):
            async with self._read_slots, self._slots:
                await self.app(scope, receive, send)
            return
        async with self._slots:
            await self.app(scope, receive, send)
