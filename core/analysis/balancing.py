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

Guarantees (tested in tests/core/analysis/test_balancing_properties.py):

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

Batched loads, for analyses that need only the loads of many independent instances (one
per training step): `lpt_loads(weights, k)` and `karmarkar_karp_loads(weights, k,
equal_size=True)` take a (S, n) weight matrix, one instance per row (same item count in
every row), and return the (S, k) partition loads the scalar function ends with -- the
same decisions (same heap keys and tie-breaks, the scalar code's float64 sums), so the
same loads: for integer weights exactly `partition_loads(row, scalar(row, k))` (int64),
for float weights the float64 sums the algorithm itself keeps (`partition_loads` adds up
in another order, so it can differ in the last bits). They loop over the sequential
dimension (LPT: items; KK: merges) with numpy operations across all rows at once. Rows
of `lpt_loads` are in partition order; rows of `karmarkar_karp_loads` descending, as the
scalar function orders its partitions. Weights must be finite (of either sign: the loads
match the scalar ones for negative weights too).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def partition_loads(weights: np.ndarray | Sequence[float], partitions: list[list[int]]) -> list[float]:
    """Summed weight of each partition."""
    w = np.asarray(weights)
    return [w[np.asarray(part, dtype=np.int64)].sum().item() if part else 0 for part in partitions]


def lpt(weights: np.ndarray | Sequence[float], k: int) -> list[list[int]]:
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

    def key(self) -> tuple[float, float, int]:
        # heapq pops the smallest key: largest spread first, then largest top set
        return (-float(self.sums[0] - self.sums[-1]), -float(self.sums[0]), self.tiebreak)

    def merge(self, other: _State) -> _State:
        """Largest set of one with the smallest of the other; both inputs are consumed."""
        k = len(self.sums)
        for j in range(k):
            self.items[j].extend(other.items[k - 1 - j])
        return _State(self.sums + other.sums[::-1], self.items, min(self.tiebreak, other.tiebreak))


def karmarkar_karp(
    weights: np.ndarray | Sequence[float], k_partitions: int, equal_size: bool = True
) -> list[list[int]]:
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
            ids = idx[c : c + k][::-1].tolist()
            states.append(_State(val[c : c + k][::-1].copy(), [[i] if i >= 0 else [] for i in ids], c, presorted=True))
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


# --------------------------------------------------------------------------- batched loads


def _weight_matrix(weights: npt.ArrayLike, k: int) -> np.ndarray:
    w = np.asarray(weights)
    if w.ndim != 2:
        raise ValueError("weights must be a (instances, items) matrix")
    if k < 1:
        raise ValueError("k must be >= 1")
    return w


def _is_integer(w: np.ndarray) -> bool:
    return w.dtype.kind in "iub"


def _exact_in_float(w: np.ndarray) -> bool:
    """Whether every partial sum of a row's integer weights is exact in float64, so the
    scalar code's float64 comparisons decide as the integer sums would."""
    return w.size == 0 or float(np.abs(w).sum(axis=1, dtype=np.float64).max()) < 2.0**52


def lpt_loads(weights: npt.ArrayLike, k: int) -> np.ndarray:
    """`lpt`'s final partition loads for every row of a (S, n) weight matrix: (S, k),
    partition j in column j; int64 for integer weights, else float64."""
    w = _weight_matrix(weights, k)
    if not _is_integer(w):
        # only the sequence of values decides (equal weights are interchangeable), so a
        # plain sort does what lpt's index-tied argsort does
        return _lpt_stepwise(np.sort(w.astype(np.float64), axis=1)[:, ::-1], k, None)
    w = w.astype(np.int64)
    if _exact_in_float(w):
        descending = np.sort(w, axis=1)[:, ::-1]
        if descending.size == 0 or int(descending[:, -1].min()) >= 0:
            loads = _lpt_packed(descending, k)
            if loads is not None:
                return loads
        return _lpt_stepwise(descending.astype(np.float64), k, descending)
    # float64 ties between different integers: the integers must follow lpt's order
    wf = w.astype(np.float64)
    order = np.argsort(-wf, axis=1, kind="stable")  # heaviest first, ties by index
    return _lpt_stepwise(np.take_along_axis(wf, order, axis=1), k, np.take_along_axis(w, order, axis=1))


def _lpt_packed(ws: np.ndarray, k: int) -> np.ndarray | None:
    """LPT on non-negative integer weights (rows sorted heaviest first) with the heap key
    (load, count, partition) packed into one int64, load * M + count * k + partition with
    M = (n + 1) * k, so one argmin per item picks the partition the heap would. Loads are
    kept relative to a per-row offset that is taken out every `every` items: LPT keeps
    all loads within the largest item of the smallest, so `every` items later none is
    more than (every + 1) * largest above the offset, which keeps keys below 2^63.
    None when even every = 1 could overflow."""
    s, n = ws.shape
    m = (n + 1) * k
    largest = int(ws[:, 0].max()) if ws.size else 0
    every = (2**62 // m) // max(largest, 1) - 1
    if every < 1:
        return None
    key = np.tile(np.arange(k, dtype=np.int64), (s, 1))
    # the first k items go to partitions 0, 1, ... in turn: an empty partition's key
    # (0, 0, j) is below that of any partition holding a non-negative item
    first = min(n, k)
    key[:, :first] += ws[:, :first] * m + k
    inc = (ws[:, first:] * m + k).T.copy()  # one contiguous row per remaining item
    offset = np.zeros((s, 1), dtype=np.int64)
    flat, base = key.reshape(-1), np.arange(s, dtype=np.int64) * k
    for i in range(n - first):
        if i and i % every == 0:
            low = key.min(axis=1, keepdims=True) // m
            key -= low * m
            offset += low
        j = key.argmin(axis=1)
        j += base
        flat[j] += inc[i]
    return key // m + offset


def _lpt_stepwise(wf: np.ndarray, k: int, exact: np.ndarray | None) -> np.ndarray:
    """LPT on float64 weights (rows sorted heaviest first), comparing (load, count,
    partition) in three steps; `exact`: the same weights as int64, summed alongside for
    integer results."""
    s, n = wf.shape
    load = np.zeros((s, k))
    count = np.zeros((s, k), dtype=np.int64)
    total = None if exact is None else np.zeros((s, k), dtype=np.int64)
    rows = np.arange(s)
    for i in range(n):
        tied = load == load.min(axis=1, keepdims=True)
        j = np.where(tied, count, n + 1).argmin(axis=1)  # fewest items, then lowest index
        load[rows, j] += wf[:, i]
        count[rows, j] += 1
        if total is not None and exact is not None:  # total is None exactly when exact is
            total[rows, j] += exact[:, i]
    return load if total is None else total


def karmarkar_karp_loads(weights: npt.ArrayLike, k_partitions: int, equal_size: bool = True) -> np.ndarray:
    """`karmarkar_karp`'s final set sums for every row of a (S, n) weight matrix: (S, k),
    each row descending (the order of the scalar function's partitions); int64 for
    integer weights, else float64. With equal_size=False the start states take S * n * k
    values: meant for small n."""
    k = int(k_partitions)
    w = _weight_matrix(weights, k)
    s, n = w.shape
    integer = _is_integer(w)
    if n == 0:
        return np.zeros((s, k), dtype=np.int64 if integer else np.float64)
    exact = None
    if integer and not _exact_in_float(w):
        # float64 ties between different integers: the integers must follow the scalar order
        wf = w.astype(np.float64)
        order = np.argsort(wf, axis=1, kind="stable")  # ascending, ties by index
        sums = _kk_start_states(np.take_along_axis(wf, order, axis=1), k, equal_size)
        exact = _kk_start_states(np.take_along_axis(w.astype(np.int64), order, axis=1), k, equal_size)
    else:
        # only the values decide (equal weights are interchangeable): a plain sort will do
        sums = _kk_start_states(np.sort(w, axis=1).astype(np.float64), k, equal_size)
    final = _kk_merge_all(sums, exact)
    return final.astype(np.int64) if integer else final


def _kk_start_states(ascending: np.ndarray, k: int, equal_size: bool) -> np.ndarray:
    """(S, m, k) start states, state c in slot c (c is its heap tiebreak's rank)."""
    s, n = ascending.shape
    if equal_size:
        # zero dummies in front, then chunks of k; a chunk reversed is the descending state
        padded = np.concatenate([np.zeros((s, (-n) % k), ascending.dtype), ascending], axis=1)
        return padded.reshape(s, -1, k)[:, :, ::-1].copy()
    states = np.zeros((s, n, k), ascending.dtype)
    states[:, :, 0] = ascending  # [w, 0, ..., 0], as the scalar code (not re-sorted)
    return states


def _kk_merge_all(sums: np.ndarray, exact: np.ndarray | None) -> np.ndarray:
    """Merge each row's states down to one, in the scalar heap's order: the two states
    with the largest spread (then largest top set, then lowest tiebreak) go first; the
    merged state, a + reversed b re-sorted descending, takes the lower slot (the scalar
    code's min tiebreak). `exact`: int64 sums permuted alongside."""
    s, m, _ = sums.shape
    rows = np.arange(s)
    spread = sums[:, :, 0] - sums[:, :, -1]
    top = sums[:, :, 0].copy()
    for _ in range(m - 1):
        a = _kk_first(spread, top)
        spread[rows, a] = -np.inf  # merged away (or re-set below)
        b = _kk_first(spread, top)
        spread[rows, b] = -np.inf
        merged = sums[rows, a] + sums[rows, b, ::-1]
        keep = np.minimum(a, b)
        if exact is None:
            merged = -np.sort(-merged, axis=1)
        else:
            perm = np.argsort(-merged, axis=1, kind="stable")
            merged = np.take_along_axis(merged, perm, axis=1)
            exact[rows, keep] = np.take_along_axis(exact[rows, a] + exact[rows, b, ::-1], perm, axis=1)
        sums[rows, keep] = merged
        spread[rows, keep] = merged[:, 0] - merged[:, -1]
        top[rows, keep] = merged[:, 0]
    return (sums if exact is None else exact)[:, 0]


def _kk_first(spread: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Slot of each row's smallest heap key (-spread, -top, tiebreak); retired slots hold
    spread -inf."""
    best = spread == spread.max(axis=1, keepdims=True)
    t = np.where(best, top, -np.inf)
    return (best & (t == t.max(axis=1, keepdims=True))).argmax(axis=1)
