"""Interval arithmetic for GPU timelines: union of [start, end) intervals per group.

Vectorised: one lexsort, one running maximum and a few reductions, whatever the number of
groups (ranks, streams, (step, rank) pairs). Merging follows Holistic Trace Analysis's
`merge_kernel_intervals`: sorted by start, an interval opens a new merged block when it
starts strictly after the running maximum of the previous ends; a block ends at the largest
end in it. (So touching intervals merge, and the length of a lone interval whose end lies
before its start — which HTA's sub-microsecond rounding can produce — counts negative,
exactly as HTA counts it.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class GroupUnion:
    """Per group (indexed 0..n_groups-1): the merged timeline's extent and busy time.

    first_start: start of the first merged block; last_end: end of the last merged block
    (by start order); busy: summed length of the merged blocks (the union length);
    n_events: intervals in the group. Groups without intervals have NaN / 0.
    """

    first_start: np.ndarray
    last_end: np.ndarray
    busy: np.ndarray
    n_events: np.ndarray

    @property
    def span(self) -> np.ndarray:
        return self.last_end - self.first_start


def dense_codes(*keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Codes 0..G-1 for each distinct tuple of integer keys, plus each key's value per
    code (sorted by the keys, first key most significant)."""
    arrays = [np.asarray(k, dtype=np.int64) for k in keys]
    if len(arrays[0]) == 0:
        return np.zeros(0, dtype=np.int64), [a[:0] for a in arrays]
    # Mixed-radix packing into one int64 so a single 1-D unique does the work.
    lows = [int(a.min()) for a in arrays]
    sizes = [int(a.max()) - lo + 1 for a, lo in zip(arrays, lows)]
    if np.prod([float(x) for x in sizes]) < 2.0**62:
        packed = np.zeros(len(arrays[0]), dtype=np.int64)
        for a, lo, size in zip(arrays, lows, sizes):
            packed = packed * size + (a - lo)
        total = int(np.prod(sizes))
        if total <= max(4 * len(packed), 1 << 20):
            # small key space: a presence table and a running count, no sort
            present = np.zeros(total, dtype=bool)
            present[packed] = True
            uniq = np.flatnonzero(present)
            codes = (np.cumsum(present) - 1)[packed]
        else:
            uniq, codes = np.unique(packed, return_inverse=True)
        values = []
        for lo, size in zip(reversed(lows), reversed(sizes)):
            values.append(uniq % size + lo)
            uniq = uniq // size
        return codes.reshape(-1).astype(np.int64), values[::-1]
    stacked = np.stack(arrays, axis=1)
    uniq, codes = np.unique(stacked, axis=0, return_inverse=True)
    return codes.reshape(-1).astype(np.int64), [uniq[:, i] for i in range(len(arrays))]


def group_order(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Indices sorting by (codes, values): the same as np.lexsort((values, codes)) but
    ~4x faster — a stable sort by value (timsort: GPU timelines arrive nearly sorted)
    then a stable radix sort by group code."""
    by_value = np.argsort(values, kind="stable")
    c = codes[by_value]
    if len(c) and 0 <= c.min() and c.max() < 2**15:
        c = c.astype(np.int16)  # numpy radix-sorts 16-bit integers
    return by_value[np.argsort(c, kind="stable")]


def merge_by_group(codes: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merged blocks (code, start, end) of the intervals within each group, sorted by
    code then start. Blocks of one group never overlap each other."""
    codes = np.asarray(codes, dtype=np.int64)
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    if len(codes) == 0:
        return codes, start, end
    order = group_order(codes, start)
    g, s, e = codes[order], start[order], end[order]
    group_head = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    head_of = np.repeat(np.arange(len(group_head)), np.diff(np.r_[group_head, len(g)]))
    origin = s[group_head][head_of]  # earliest start of the element's group
    # Shift each group onto its own stretch of one axis so a single running maximum never
    # lets one group's ends swallow the next group's starts. Subtracting the group origin
    # first keeps the numbers small (and exact: both operands are close).
    rel_s = s - origin
    rel_e = e - origin
    stride = max(float(np.max(rel_e)), float(np.max(rel_s)), 0.0) + 1.0
    offset = head_of * stride
    running = np.maximum.accumulate(rel_e + offset)
    block_head = np.flatnonzero(np.r_[True, (rel_s + offset)[1:] > running[:-1]])
    block_end = np.maximum.reduceat(rel_e, block_head) + origin[block_head]
    return g[block_head], s[block_head], block_end


def union_by_group(codes: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int) -> GroupUnion:
    """Union of the intervals [start, end) within each group `codes` (0..n_groups-1)."""
    first_start = np.full(n_groups, np.nan)
    last_end = np.full(n_groups, np.nan)
    counts = np.bincount(np.asarray(codes, dtype=np.int64), minlength=n_groups)
    block_code, block_start, block_end = merge_by_group(codes, start, end)
    busy = np.bincount(block_code, weights=block_end - block_start, minlength=n_groups).astype(np.float64)
    if len(block_code):
        first = np.r_[True, block_code[1:] != block_code[:-1]]
        last = np.r_[block_code[1:] != block_code[:-1], True]
        first_start[block_code[first]] = block_start[first]
        last_end[block_code[last]] = block_end[last]
    return GroupUnion(first_start, last_end, busy, counts)
