"""The column data the analyses read, and the grouping helpers they share.

`TraceData` holds one column dataclass per table (see backend/formats/base.py for the
tables): `SampleColumns`, `TurnColumns`, `ToolCallColumns`, `RankTimingColumns`,
`StepColumns`. Each field is a numpy array with one value per row (strings as numpy
str/object arrays); optional columns are None when the trace does not have them.
The worker builds it with `TraceData.from_tables({"samples": {"step": arr, ...}, ...})`,
reading only the columns `registry.ANALYSES[kind].tables` names.

Grouping is done the numpy way: rows are put in key order once (`group_rows`, a stable
argsort skipped when the rows already arrive sorted, as they do from the database) and
per-group reductions use `np.add.reduceat` / `np.maximum.reduceat` on the sorted
columns, so an analysis costs about one sort of its columns, whatever the step count.
`sorted_run_starts` finds groups without any sort when the rows are already in key
order; `sort_within_groups` orders the values inside each group (for order statistics)
without an argsort, by counting for narrow integer ranges such as lengths; and
`group_blocks` cuts big arrays into ~1M-row runs of whole groups so temporaries stay
cache-sized.

`json_safe` turns a result into plain JSON values: numpy scalars become Python
numbers, NaN and infinities become None.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- tables


def _present(x) -> bool:
    return x is not None


@dataclass
class _Columns:
    """Base for one table: equal-length arrays, optional ones None."""

    def __len__(self) -> int:
        first = getattr(self, fields(self)[0].name)
        return 0 if first is None else len(first)

    @classmethod
    def from_columns(cls, columns: dict[str, Any]):
        """Build from a column dict, keeping known columns and ignoring the rest."""
        kwargs = {}
        for f in fields(cls):
            value = columns.get(f.name)
            if value is None:
                if f.default is dataclasses.MISSING:
                    raise ValueError(f"table for {cls.__name__} lacks required column '{f.name}'")
                continue
            kwargs[f.name] = np.asarray(value)
        out = cls(**kwargs)
        lengths = {len(getattr(out, f.name)) for f in fields(cls) if _present(getattr(out, f.name))}
        if len(lengths) > 1:
            raise ValueError(f"{cls.__name__}: columns have different lengths {sorted(lengths)}")
        return out

    def take(self, index):
        """Rows selected by a boolean mask or an index array (optional columns stay None)."""
        return type(self)(
            **{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name)[index]) for f in fields(self)}
        )

    def columns(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


@dataclass
class SampleColumns(_Columns):
    step: np.ndarray
    group_idx: np.ndarray
    sample_idx: np.ndarray
    prompt_len: np.ndarray
    response_len: np.ndarray
    dp_rank: np.ndarray | None = None
    rank: np.ndarray | None = None
    tp_rank: np.ndarray | None = None
    task_id: np.ndarray | None = None
    validate: np.ndarray | None = None
    truncated: np.ndarray | None = None
    num_turns: np.ndarray | None = None
    num_tool_calls: np.ndarray | None = None
    latency_s: np.ndarray | None = None


@dataclass
class TurnColumns(_Columns):
    step: np.ndarray
    group_idx: np.ndarray
    sample_idx: np.ndarray
    turn: np.ndarray
    prompt_tokens: np.ndarray
    cached_tokens: np.ndarray | None = None
    completion_tokens: np.ndarray | None = None
    engine_latency_s: np.ndarray | None = None
    tool_call_count: np.ndarray | None = None
    finish_reason: np.ndarray | None = None


@dataclass
class ToolCallColumns(_Columns):
    step: np.ndarray
    group_idx: np.ndarray
    sample_idx: np.ndarray
    latency_s: np.ndarray
    tool_name: np.ndarray | None = None
    call_idx: np.ndarray | None = None
    turn: np.ndarray | None = None
    response_tokens: np.ndarray | None = None
    status: np.ndarray | None = None


@dataclass
class RankTimingColumns(_Columns):
    step: np.ndarray
    rank: np.ndarray
    phase: np.ndarray
    seconds: np.ndarray
    dp_rank: np.ndarray | None = None
    tp_rank: np.ndarray | None = None
    batch_size: np.ndarray | None = None
    validate: np.ndarray | None = None


@dataclass
class StepColumns(_Columns):
    step: np.ndarray
    t_gen: np.ndarray | None = None
    t_reward: np.ndarray | None = None
    t_old_log_prob: np.ndarray | None = None
    t_ref: np.ndarray | None = None
    t_adv: np.ndarray | None = None
    t_update_actor: np.ndarray | None = None
    t_step: np.ndarray | None = None
    validate: np.ndarray | None = None

    def timing(self, name: str, steps: np.ndarray) -> np.ndarray:
        """Column `name` looked up for each of `steps` (NaN where unknown)."""
        out = np.full(len(steps), np.nan)
        col = getattr(self, name, None)
        if col is None or len(self.step) == 0:
            return out
        order = np.argsort(self.step, kind="stable")
        s, v = self.step[order], np.asarray(col, dtype=np.float64)[order]
        pos = np.clip(np.searchsorted(s, steps), 0, len(s) - 1)
        hit = s[pos] == steps
        out[hit] = v[pos[hit]]
        return out


TABLE_CLASSES: dict[str, type[_Columns]] = {
    "samples": SampleColumns,
    "turns": TurnColumns,
    "tool_calls": ToolCallColumns,
    "rank_timings": RankTimingColumns,
    "steps": StepColumns,
}


@dataclass
class TraceData:
    """Column arrays per table for one trace (or one step range of it)."""

    samples: SampleColumns | None = None
    turns: TurnColumns | None = None
    tool_calls: ToolCallColumns | None = None
    rank_timings: RankTimingColumns | None = None
    steps: StepColumns | None = None
    # trace-level facts: the rollout's max response length, task id -> task name
    max_response_len: int | None = None
    task_names: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_tables(
        cls,
        tables: dict[str, dict[str, Any]],
        *,
        max_response_len: int | None = None,
        task_names: dict[int, str] | None = None,
    ) -> "TraceData":
        """From {table: {column: array}}; unknown tables and columns are ignored."""
        kwargs = {
            name: klass.from_columns(tables[name])
            for name, klass in TABLE_CLASSES.items()
            if tables.get(name) is not None
        }
        return cls(**kwargs, max_response_len=max_response_len, task_names=dict(task_names or {}))

    def tables(self) -> dict[str, _Columns]:
        return {name: getattr(self, name) for name in TABLE_CLASSES if getattr(self, name) is not None}

    def step_values(self) -> np.ndarray:
        """Sorted distinct steps over all tables."""
        parts = [t.step for t in self.tables().values() if len(t)]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def select_steps(self, lo: int, hi: int) -> "TraceData":
        """The rows with lo <= step < hi, in every table."""
        chosen = {name: t.take((t.step >= lo) & (t.step < hi)) for name, t in self.tables().items()}
        return TraceData(**chosen, max_response_len=self.max_response_len, task_names=self.task_names)

    def split_steps(self, n_chunks: int) -> list["TraceData"]:
        """Up to `n_chunks` pieces with disjoint step ranges and about equal step counts."""
        return [self.select_steps(lo, hi) for lo, hi in step_ranges(self.step_values(), n_chunks)]


def step_ranges(steps: np.ndarray, n_chunks: int) -> list[tuple[int, int]]:
    """Half-open [lo, hi) step ranges covering `steps` (sorted distinct) in n_chunks pieces."""
    steps = np.asarray(steps)
    if len(steps) == 0:
        return []
    n_chunks = max(1, min(int(n_chunks), len(steps)))
    cuts = [steps[i * len(steps) // n_chunks] for i in range(n_chunks)]
    bounds = [int(c) for c in cuts] + [int(steps[-1]) + 1]
    return [(bounds[i], bounds[i + 1]) for i in range(n_chunks)]


# --------------------------------------------------------------------------- grouping


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
            _, inverse = np.unique(np.stack([np.asarray(x, dtype=np.int64) for x in cols], axis=1), axis=0,
                                   return_inverse=True)
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

    def slices(self):
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


def group_blocks(counts: np.ndarray, rows: int = 1 << 20):
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


def group_percentiles(sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray,
                      qs: tuple[float, ...]) -> np.ndarray:
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


def validation_trajectory_filter(data: TraceData, step, group_idx, sample_idx) -> np.ndarray:
    """Mask of rows (of turns/tool calls) whose trajectory is not a validation sample.

    Uses samples.validate when the trace has it; rows without a matching sample are kept.
    """
    s = data.samples
    n = len(step)
    if s is None or s.validate is None or not np.any(s.validate):
        return np.ones(n, dtype=bool)
    allkey = composite_key(
        np.concatenate([s.step, step]), np.concatenate([s.group_idx, group_idx]),
        np.concatenate([s.sample_idx, sample_idx]),
    )
    val_keys = allkey[: len(s.step)][np.asarray(s.validate, dtype=bool)]
    return ~np.isin(allkey[len(s.step):], val_keys)


# --------------------------------------------------------------------------- results


def json_safe(obj):
    """Plain JSON values: numpy scalars/arrays to Python, NaN/inf to None."""
    # exact built-in types first: results hold hundreds of thousands of plain numbers
    t = type(obj)
    if t is float:
        return obj if obj - obj == 0.0 else None  # inf - inf and nan - nan are nan
    if t is int or t is str or t is bool or obj is None:
        return obj
    if t is list or t is tuple:
        return _json_safe_list(obj)
    if t is dict:
        return {k if type(k) is str else str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return _json_safe_list(obj)
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.str_):
        return str(obj)
    return obj


def _json_safe_list(items) -> list:
    out = []
    append = out.append
    for v in items:
        t = type(v)
        if t is float:
            append(v if v - v == 0.0 else None)
        elif t is int or t is str or t is bool or v is None:
            append(v)
        else:
            append(json_safe(v))
    return out


def ratio(a, b):
    """a / b as a float, None when b is zero or either is unknown."""
    if a is None or b is None:
        return None
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return None
    return a / b


def trend(x, y) -> dict:
    """Least-squares line through (x, y) and the change it implies.

    slope (per unit of x), intercept, r2, first/last (the observed y at the smallest and
    largest x), relative_change = (last - first) / first, and fitted_relative_change =
    (fit(x_last) - fit(x_first)) / fit(x_first), less sensitive to one noisy step.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    out = {"n": int(len(x)), "slope": None, "intercept": None, "r2": None, "first": None, "last": None,
           "relative_change": None, "fitted_relative_change": None}
    if len(x) == 0:
        return out
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    out["first"], out["last"] = float(y[0]), float(y[-1])
    out["relative_change"] = ratio(y[-1] - y[0], y[0])
    if len(x) < 2 or x[-1] == x[0]:
        return out
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum() / sxx)
    intercept = float(ym - slope * xm)
    resid = y - (intercept + slope * x)
    syy = float(((y - ym) ** 2).sum())
    out.update(slope=slope, intercept=intercept, r2=(1.0 - float((resid**2).sum()) / syy) if syy > 0 else None)
    f0, f1 = intercept + slope * x[0], intercept + slope * x[-1]
    out["fitted_relative_change"] = ratio(f1 - f0, f0) if f0 > 0 else None
    return out
