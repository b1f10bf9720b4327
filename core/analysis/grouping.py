"""Grouping kernels the analyses share, done the numpy way.

Rows are put in key order once (`group_rows`, a stable argsort skipped when the rows
already arrive sorted, as they do from the database) and per-group reductions use
`np.add.reduceat` / `np.maximum.reduceat` on the sorted columns, so an analysis costs
about one sort of its columns, whatever the step count. `sorted_run_starts` finds groups
without any sort when the rows are already in key order; `sort_within_groups` orders the
values inside each group (for order statistics) without an argsort, by counting for
narrow integer ranges such as lengths; and `group_blocks` cuts big arrays into ~1M-row
runs of whole groups so temporaries stay cache-sized.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from core.analysis.tables import TraceData


def composite_key(*cols: np.ndarray) -> np.ndarray:
    """One int64 per row that orders rows like the tuple of integer `cols` does."""
    if not cols:
        raise ValueError("composite_key needs at least one column")
    n = len(cols[0])
    key = np.zeros(n, dtype=np.int64)
    if n == 0:
        return key
    span = 1
    for col in cols:
        c = np.asarray(col).astype(np.int64, copy=False)
        lo, hi = int(c.min()), int(c.max())
        width = hi - lo + 1
        span *= width
        if span >= 2**62:
            # too wide to pack: rank the tuples instead (slower, always correct)
            _, inverse = np.unique(
                np.stack([np.asarray(x, dtype=np.int64) for x in cols], axis=1), axis=0, return_inverse=True
            )
            return inverse.reshape(-1).astype(np.int64)
        key = key * width + (c - lo)
    return key


@dataclass
class Groups:
    """Rows grouped by an integer key: `order` sorts rows by key (None: already sorted)."""

    order: np.ndarray | None
    keys: np.ndarray
    starts: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)

    def sort(self, col: np.ndarray) -> np.ndarray:
        col = np.asarray(col)
        return col if self.order is None else col[self.order]

    def sum(self, col: np.ndarray) -> np.ndarray:
        s = self.sort(col)
        return np.add.reduceat(s, self.starts) if len(s) else np.zeros(0, dtype=s.dtype)

    def max(self, col: np.ndarray) -> np.ndarray:
        s = self.sort(col)
        return np.maximum.reduceat(s, self.starts) if len(s) else np.zeros(0, dtype=s.dtype)

    def min(self, col: np.ndarray) -> np.ndarray:
        s = self.sort(col)
        return np.minimum.reduceat(s, self.starts) if len(s) else np.zeros(0, dtype=s.dtype)

    def code(self) -> np.ndarray:
        """Group number of each row in sorted order."""
        return np.repeat(np.arange(len(self.keys)), self.counts)

    def slices(self) -> Iterator[tuple[int, slice]]:
        for i in range(len(self.keys)):
            yield i, slice(int(self.starts[i]), int(self.starts[i] + self.counts[i]))


def group_rows(key: np.ndarray) -> Groups:
    """Group rows by an integer key (use `composite_key` for several columns)."""
    key = np.asarray(key)
    if len(key) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Groups(None, key[:0], empty, empty)
    order = None
    if len(key) > 1 and np.any(key[1:] < key[:-1]):
        order = np.argsort(key, kind="stable")
        key = key[order]
    boundary = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate([[0], boundary]).astype(np.int64)
    counts = np.diff(np.concatenate([starts, [len(key)]])).astype(np.int64)
    return Groups(order, key[starts], starts, counts)


def group_blocks(counts: np.ndarray, rows: int = 1 << 20) -> Iterator[tuple[int, int]]:
    """[a, b) ranges of consecutive groups holding about `rows` rows each (at least one
    group): for working through big arrays in cache-sized blocks, so temporaries stay
    small and are reused instead of faulting in fresh pages for every full-size array."""
    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
    a = 0
    while a < len(ends):
        base = int(ends[a - 1]) if a else 0
        b = max(int(np.searchsorted(ends, base + rows, side="right")), a + 1)
        yield a, b
        a = b


def sorted_run_starts(*cols: np.ndarray) -> np.ndarray | None:
    """Where each run of equal (col0, col1, ...) tuples starts, if the rows are sorted by
    that tuple (as rows from the database are by their key); None when they are not.
    Cheaper than `group_rows(composite_key(...))`: a few diffs, no packing or sort."""
    n = len(cols[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    bad = np.zeros(n - 1, dtype=bool)
    tie = np.ones(n - 1, dtype=bool)
    for col in cols:
        c = np.asarray(col)
        bad |= tie & (c[1:] < c[:-1])  # comparisons, not diffs: no integer overflow
        tie &= c[1:] == c[:-1]
    if bad.any():
        return None
    return np.concatenate([[0], np.flatnonzero(~tie) + 1]).astype(np.int64)


def order_within_groups(group_key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Permutation sorting rows by (group_key, value): for per-group order statistics."""
    group_key = np.asarray(group_key, dtype=np.int64)
    values = np.asarray(values)
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    if np.issubdtype(values.dtype, np.integer):
        lo, hi = int(values.min()), int(values.max())
        gspan = int(group_key.max()) - int(group_key.min()) + 1
        if gspan * (hi - lo + 1) < 2**62:
            packed = (group_key - group_key.min()) * (hi - lo + 1) + (values.astype(np.int64) - lo)
            return np.argsort(packed, kind="stable")
    groups = group_rows(group_key)
    if len(groups) * 64 > len(values):
        return np.lexsort((values, group_key))
    # few large groups (e.g. one per step): sorting each group's slice is several times
    # faster than a two-key lexsort
    by_key = np.arange(len(values)) if groups.order is None else groups.order
    out = np.empty(len(values), dtype=np.int64)
    for _, sl in groups.slices():
        rows = by_key[sl]
        out[sl] = rows[np.argsort(values[rows], kind="stable")]
    return out


def sort_within_groups(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A copy of `values` with each group (rows starts[i] : starts[i] + counts[i], back to
    back) sorted ascending -- the values only, no permutation, which is several times
    cheaper than an argsort. Few large groups (steps) are sorted slice by slice, by
    counting when they are integers of a narrow range (lengths); many small groups in
    one sort of (group, value) packed into int64 when the values are integers, else by
    a lexsort. The groups must cover the rows back to back from row 0."""
    values = np.asarray(values)
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    if int(counts.sum()) != len(values) or (len(starts) and int(starts[0]) != 0):
        raise ValueError("sort_within_groups: the groups must cover the rows back to back from row 0")
    out = np.empty_like(values)
    if len(values) == 0:
        return out
    integer = np.issubdtype(values.dtype, np.integer)
    if len(counts) * 256 <= len(values):
        lo = int(values.min()) if integer else 0
        span = int(values.max()) - lo + 1 if integer else 0
        if np.issubdtype(values.dtype, np.signedinteger) and span <= min(4 * len(values) // len(counts), 1 << 24):
            # lengths span a few thousand values: a counting sort per group is ~10x faster
            levels = np.arange(lo, lo + span).astype(values.dtype)
            for s, c in zip(starts.tolist(), counts.tolist()):
                out[s : s + c] = np.repeat(levels, np.bincount(values[s : s + c] - lo, minlength=span))
            return out
        for s, c in zip(starts.tolist(), counts.tolist()):
            out[s : s + c] = np.sort(values[s : s + c])
        return out
    code = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    if integer:
        lo, hi = int(values.min()), int(values.max())
        if len(counts) * (hi - lo + 1) < 2**62:
            packed = code * (hi - lo + 1) + (values.astype(np.int64) - lo)
            packed.sort()
            packed -= code * (hi - lo + 1)  # groups keep their rows: code is unchanged
            out[:] = packed + lo
            return out
    return values[np.lexsort((values, code))]


def group_percentiles(
    sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray, qs: tuple[float, ...]
) -> np.ndarray:
    """Percentiles per group of values sorted within groups, numpy's 'linear' method.

    Returns an array (n_groups, len(qs)); empty groups give NaN.
    """
    v = np.asarray(sorted_values, dtype=np.float64)
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    out = np.full((len(starts), len(qs)), np.nan)
    ok = counts > 0
    if not ok.any():
        return out
    for j, q in enumerate(qs):
        pos = q / 100.0 * (counts[ok] - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, counts[ok] - 1)
        frac = pos - lo
        a, b = v[starts[ok] + lo], v[starts[ok] + hi]
        out[ok, j] = a + (b - a) * frac
    return out


def training_mask(validate: np.ndarray | None, n: int, include_validation: bool = False) -> np.ndarray:
    """Rows to analyse: all of them, or those not flagged as validation rollouts."""
    if validate is None or include_validation:
        return np.ones(n, dtype=bool)
    return ~np.asarray(validate, dtype=bool)


def validation_trajectory_filter(
    data: TraceData, step: np.ndarray, group_idx: np.ndarray, sample_idx: np.ndarray
) -> np.ndarray:
    """Mask of rows (of turns/tool calls) whose trajectory is not a validation sample.

    Uses samples.validate when the trace has it; rows without a matching sample are kept.
    """
    s = data.samples
    n = len(step)
    if s is None or s.validate is None or not np.any(s.validate):
        return np.ones(n, dtype=bool)
    allkey = composite_key(
        np.concatenate([s.step, step]),
        np.concatenate([s.group_idx, group_idx]),
        np.concatenate([s.sample_idx, sample_idx]),
    )
    val_keys = allkey[: len(s.step)][np.asarray(s.validate, dtype=bool)]
    return ~np.isin(allkey[len(s.step) :], val_keys)
