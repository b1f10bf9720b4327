"""Partition algorithms for DP load balancing: one small pure function per algorithm.

Items are anything with a non-negative weight -- samples, or whole prompt groups (weight
= the group's summed load), so a caller that passes groups keeps them together. Each
function returns `k` lists of item indices (some may be empty when there are fewer items
than partitions); every index appears exactly once.

- `karmarkar_karp(weights, k, equal_size=True)`: the largest differencing method, as in
  verl's seqlen_balancing.py. Each item starts as a k-set state (equal_size: sorted items
  are cut into chunks of k, one item per set); the two states with the largest spread
  (max - min set sum) are merged by pairing the largest set of one with the smallest of
  the other, until one state is left. With equal_size and a count not divisible by k,
  the list is padded with zero-weight dummies that are dropped again, so sizes differ by
  at most one.
- `lpt(weights, k)`: longest processing time first -- items in decreasing weight, each to
  the currently least loaded partition.

Guarantees (tested in tests/test_balancing_properties.py):

- Both: spread = max load - min load <= the largest item weight, hence
  max load <= total / k + largest item. For LPT this is the list-scheduling argument
  (the last item put on the fullest partition went to the least loaded one). For KK,
  merging two states never makes the spread larger than the larger of their two
  spreads, and a starting state's spread is at most one item's weight.
- LPT: max load <= (4/3 - 1/(3k)) * optimum (Graham 1969).
- KK without size constraint: max load <= (4/3 - 1/(3k)) * optimum (Michiels, Korst,
  Aarts, van Leeuwen, Spieksma 2007).
- KK equal_size: partition sizes are floor(n/k) or ceil(n/k).

Neither heuristic is guaranteed to beat an arbitrary given assignment; what follows from
the spread bound is that it does whenever that assignment's max exceeds mean + largest
item.
"""

from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np


def partition_loads(weights: Sequence[float], partitions: list[list[int]]) -> list[float]:
    """Summed weight of each partition."""
    w = np.asarray(weights)
    return [w[np.asarray(part, dtype=np.int64)].sum().item() if part else 0 for part in partitions]


def lpt(weights: Sequence[float], k: int) -> list[list[int]]:
    """Longest processing time first: heaviest item to the least loaded partition."""
    if k < 1:
        raise ValueError("k must be >= 1")
    w = np.asarray(weights, dtype=np.float64)
    parts: list[list[int]] = [[] for _ in range(k)]
    # (load, item count, partition index): ties go to the emptier, then lower-numbered one
    heap = [(0.0, 0, j) for j in range(k)]
    order = np.lexsort((np.arange(len(w)), -w))  # heaviest first, ties by index
    for i, wi in zip(order.tolist(), w[order].tolist()):
        load, count, j = heap[0]
        parts[j].append(i)
        heapq.heapreplace(heap, (load + wi, count + 1, j))
    return parts


class _State:
    """k sets: sums (descending) and the item indices of each set."""

    __slots__ = ("sums", "items", "tiebreak")

    def __init__(self, sums: np.ndarray, items: list[list[int]], tiebreak: int, presorted: bool = False):
        if not presorted:
            order = np.argsort(-sums, kind="stable")
            sums = sums[order]
            items = [items[j] for j in order.tolist()]
        self.sums, self.items, self.tiebreak = sums, items, tiebreak

    def key(self):
        # heapq pops the smallest key: largest spread first, then largest top set
        return (-float(self.sums[0] - self.sums[-1]), -float(self.sums[0]), self.tiebreak)

    def merge(self, other: "_State") -> "_State":
        """Largest set of one with the smallest of the other; both inputs are consumed."""
        k = len(self.sums)
        for j in range(k):
            self.items[j].extend(other.items[k - 1 - j])
        return _State(self.sums + other.sums[::-1], self.items, min(self.tiebreak, other.tiebreak))


def karmarkar_karp(weights: Sequence[float], k_partitions: int, equal_size: bool = True) -> list[list[int]]:
    """Largest differencing method into k partitions (see module docstring)."""
    k = int(k_partitions)
    if k < 1:
        raise ValueError("k_partitions must be >= 1")
    w = np.asarray(weights, dtype=np.float64)
    n = len(w)
    if n == 0:
        return [[] for _ in range(k)]
    order = np.lexsort((np.arange(n), w))  # ascending weight, ties by index
    states: list[_State] = []
    if equal_size:
        pad = (-n) % k
        # dummies (index -1, weight 0) go first so they all share the first chunk and so
        # land in different sets: no partition gets two of them
        idx = np.concatenate([np.full(pad, -1, dtype=np.int64), order])
        val = np.concatenate([np.zeros(pad), w[order]])
        for c in range(0, len(idx), k):
            # a chunk is ascending; reversed it is the descending state
            ids = idx[c:c + k][::-1].tolist()
            states.append(_State(val[c:c + k][::-1].copy(), [[i] if i >= 0 else [] for i in ids], c, presorted=True))
    else:
        zeros = [0.0] * (k - 1)
        for rank, i in enumerate(order.tolist()):
            states.append(_State(np.array([w[i]] + zeros), [[i]] + [[] for _ in range(k - 1)], rank, presorted=True))
    heap = [(s.key(), s) for s in states]
    heapq.heapify(heap)
    while len(heap) > 1:
        _, a = heapq.heappop(heap)
        _, b = heapq.heappop(heap)
        m = a.merge(b)
        heapq.heappush(heap, (m.key(), m))
    return [sorted(part) for part in heap[0][1].items]
