"""The cluster-level queue of dynamic dispatch: requests not yet bound to a replica,
served in the order a policy gives.

Each request waits with a key (lower first; equal keys in the order they were queued)
and an arrival time; a replica at time t may take the first request in key order that
has arrived by t. A policy may change the keys of waiting requests while they wait
(`reorder`: e.g. a group's length estimate improves as its samples finish); entries
are replaced lazily (a stale entry is dropped when it reaches the top).
"""

from __future__ import annotations

import heapq
import math

INF = math.inf


class SharedQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, float]] = []  # (key, order, version, rid, arrival)
        self._live: dict[int, tuple[int, float, int]] = {}  # rid -> (order, arrival, version)
        self._times: list[float] = []  # arrival times still ahead (for wakes)
        self._n = 0

    def __len__(self) -> int:
        return len(self._live)

    def push(self, rids, keys, time: float) -> None:
        """Queue `rids` (in order) arriving at `time`, with their keys."""
        heap, live = self._heap, self._live
        for r, k in zip(rids, keys):
            self._n += 1
            live[r] = (self._n, time, 0)
            heapq.heappush(heap, (k, self._n, 0, r, time))
        if time > 0:
            heapq.heappush(self._times, time)

    def reorder(self, rids, keys) -> bool:
        """New keys for requests still waiting (others are ignored); True if any changed."""
        changed = False
        heap, live = self._heap, self._live
        for r, k in zip(rids, keys):
            entry = live.get(r)
            if entry is None:
                continue
            order, arrival, version = entry
            live[r] = (order, arrival, version + 1)
            heapq.heappush(heap, (k, order, version + 1, r, arrival))
            changed = True
        return changed

    def peek(self, t: float) -> int:
        """The request a replica at time `t` would take next, or -1."""
        heap, live = self._heap, self._live
        while heap:
            _, _, version, r, arrival = heap[0]
            entry = live.get(r)
            if entry is None or entry[2] != version:
                heapq.heappop(heap)  # taken or re-keyed
                continue
            return r if arrival <= t else -1
        return -1

    def take(self) -> int:
        """Remove and return the request `peek` just returned."""
        r = heapq.heappop(self._heap)[3]
        del self._live[r]
        return r

    def wake_after(self, t: float) -> float:
        """The first arrival time after `t` (inf when none is ahead)."""
        times = self._times
        while times and times[0] <= t:
            heapq.heappop(times)
        return times[0] if times else INF

    def drain(self) -> list[int]:
        """Remove and return every waiting request, in key order."""
        out = [r for *_, r, _ in sorted(e for e in self._heap if self._live.get(e[3], (0, 0.0, -1))[2] == e[2])]
        self._heap.clear()
        self._live.clear()
        return out
