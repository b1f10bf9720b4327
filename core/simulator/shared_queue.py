"""The cluster-level queue of dynamic dispatch: requests not yet bound to a replica,
served in the order a policy gives.

Requests are queued in runs: `push(rids, key, time)` queues `rids`, served in that
order, under one key (lower first; equal keys in the order they were pushed), arriving
at `time`. A replica at time t takes the next request of the lowest-keyed run among
those that have arrived by t and have one left. A policy may change a run's key while it waits
(`reorder`: e.g. a group's length estimate improves as its samples finish); the old
heap entry is dropped lazily when it reaches the top. A policy with one key per request
sorts its requests and pushes them as one run, or pushes one run per request.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable

INF = math.inf


class SharedQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []  # runs arrived: (key, run, version)
        self._future: list[tuple[float, int]] = []  # runs still to arrive: (arrival, run)
        self._key: list[float] = []
        self._arrived: list[bool] = []
        self._runs: list[deque[int]] = []
        self._version: list[int] = []
        self._arrival: list[float] = []
        self._times: list[float] = []  # arrival times still ahead (for wakes)
        self._n = 0  # requests waiting

    def __len__(self) -> int:
        return self._n

    def push(self, rids: Iterable[int], key: float, time: float) -> int:
        """Queue `rids` (served in this order) under `key`, arriving at `time`; returns
        the run's id."""
        run = len(self._runs)
        self._runs.append(deque(rids))
        self._version.append(0)
        self._arrival.append(time)
        self._key.append(key)
        self._arrived.append(False)
        self._n += len(self._runs[run])
        heapq.heappush(self._future, (time, run))
        if time > 0:
            heapq.heappush(self._times, time)
        return run

    def remaining(self, run: int) -> int:
        return len(self._runs[run])

    def reorder(self, run: int, key: float) -> bool:
        """A new key for a run with requests still waiting; True if it had some."""
        if not self._runs[run]:
            return False
        self._key[run] = key
        if self._arrived[run]:
            self._version[run] += 1
            heapq.heappush(self._heap, (key, run, self._version[run]))
        return True

    def peek(self, t: float) -> int:
        """The request a replica at time `t` would take next, or -1."""
        heap, future = self._heap, self._future
        while future and future[0][0] <= t:
            run = heapq.heappop(future)[1]
            self._arrived[run] = True
            heapq.heappush(heap, (self._key[run], run, self._version[run]))
        while heap:
            _, run, version = heap[0]
            if version == self._version[run] and self._runs[run]:
                return self._runs[run][0] if self._arrival[run] <= t else -1
            heapq.heappop(heap)  # re-keyed or used up
        return -1

    def take(self) -> int:
        """Remove and return the request `peek` just returned."""
        self._n -= 1
        return self._runs[self._heap[0][1]].popleft()

    def wake_after(self, t: float) -> float:
        """The first arrival time after `t` (inf when none is ahead)."""
        times = self._times
        while times and times[0] <= t:
            heapq.heappop(times)
        return times[0] if times else INF

    def drain(self) -> list[int]:
        """Remove and return every waiting request, in the order they would be served."""
        live = sorted((self._key[run], run) for run, q in enumerate(self._runs) if q)
        out = [r for _, run in live for r in self._runs[run]]
        for q in self._runs:
            q.clear()
        self._heap.clear()
        self._future.clear()
        self._n = 0
        return out
