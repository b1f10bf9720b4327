"""Distribution statistics shared by ingestion summaries and the length analyses.

`distribution_stats` / `log_histogram` describe one array; `grouped_distribution_stats`
/ `grouped_log_histogram` give the same figures for every group of a grouped, sorted
array at once (per step, per (task, step)), vectorised over the groups instead of one
call per group. Pure numpy: arrays in, plain dicts out.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import numpy.typing as npt

from core.analysis.grouping import group_blocks

# Fixed log-spaced bins shared by every trace and step, so heatmaps line up across
# steps and across traces: 1 token .. 2^22 tokens, 4 bins per octave.
LOG_BIN_EDGES = np.unique(np.round(2.0 ** np.arange(0, 22 + 1e-9, 1 / 4)).astype(np.int64))
PERCENTILES = (10, 25, 50, 75, 90, 99)


def log_histogram(values: np.ndarray) -> list[int]:
    """Counts per `LOG_BIN_EDGES` bin; values below 1 land in the first bin."""
    idx = np.searchsorted(LOG_BIN_EDGES, np.maximum(values, 1), side="right") - 1
    idx = np.clip(idx, 0, len(LOG_BIN_EDGES) - 2)
    return np.bincount(idx, minlength=len(LOG_BIN_EDGES) - 1).tolist()


def distribution_stats(values: np.ndarray, cap: int | None = None) -> dict:
    """count, mean, std, cv, min, p10..p99, max, tail_ratio (max/mean), skewness and,
    when `cap` (the max response length) is known, the truncation rate (share >= cap)."""
    v = np.asarray(values, dtype=np.float64)
    n = int(v.size)
    if n == 0:
        return {"count": 0}
    mean = float(v.mean())
    std = float(v.std())
    pct = np.percentile(v, PERCENTILES)
    skew = float(((v - mean) ** 3).mean() / std**3) if std > 0 else 0.0
    out: dict[str, float | None] = {
        "count": n,
        "sum": float(v.sum()),
        "mean": mean,
        "std": std,
        "cv": std / mean if mean else 0.0,
        "min": float(v.min()),
        **{f"p{p}": float(x) for p, x in zip(PERCENTILES, pct)},
        "max": float(v.max()),
        "tail_ratio": float(v.max()) / mean if mean else 0.0,
        "skewness": skew,
    }
    out["truncation_rate"] = float((v >= cap).mean()) if cap else None
    return out


# --------------------------------------------------------------------------- grouped


def grouped_distribution_stats(
    sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray, cap: int | None = None
) -> list[dict]:
    """`distribution_stats` of every group, vectorised over the groups.

    Group i is ``sorted_values[starts[i] : starts[i] + counts[i]]``, sorted ascending
    (e.g. by `data.sort_within_groups`). Returns one dict per group with the same fields
    and values as `distribution_stats` on that slice: percentiles by numpy's 'linear'
    method exactly as `np.percentile` computes them (same index, gamma and lerp), min and
    max from the ends of the sorted slice; sums and moments agree to rounding (exactly
    for integer-valued data, whose float64 sums are exact). Empty groups give {"count": 0}.
    """
    v, starts, counts = _tiled(np.asarray(sorted_values), starts, counts)
    out: list[dict] = [{"count": 0} for _ in range(len(counts))]
    full = np.flatnonzero(counts > 0)
    if len(full) == 0:
        return out
    if len(full) < len(counts):  # reduceat needs the empty groups gone from the tiling
        v, st, n = _tiled(v, starts[full], counts[full])
    else:
        st, n = starts, counts
    # blocks of about a million rows: the float64 temporaries stay small and are reused
    # instead of faulting in fresh pages for every 10M-row array
    stats = [
        _stats_block(v[st[a] : st[b - 1] + n[b - 1]], st[a:b] - st[a], n[a:b], cap)
        for a, b in group_blocks(n, _BLOCK_ROWS)
    ]
    names = [
        "count",
        "sum",
        "mean",
        "std",
        "cv",
        "min",
        *(f"p{p}" for p in PERCENTILES),
        "max",
        "tail_ratio",
        "skewness",
        "truncation_rate",
    ]
    cols = [list(itertools.chain.from_iterable(blk[j] for blk in stats)) for j in range(len(names))]
    for j, g in enumerate(full.tolist()):
        out[g] = {name: col[j] for name, col in zip(names, cols)}
    return out


_BLOCK_ROWS = 1 << 20


def _stats_block(values: np.ndarray, st: np.ndarray, n: np.ndarray, cap: float | None) -> list[list]:
    """The distribution_stats fields (as lists, one value per group) of tiled, non-empty,
    sorted groups."""
    v = values.astype(np.float64)
    nf = n.astype(np.float64)
    total = np.add.reduceat(v, st)
    mean = total / nf
    dev = np.repeat(mean, n)
    np.subtract(v, dev, out=dev)
    sq = dev * dev
    std = np.sqrt(np.add.reduceat(sq, st) / nf)
    np.multiply(sq, dev, out=sq)
    m3 = np.add.reduceat(sq, st) / nf
    del dev, sq
    lo, hi = v[st], v[st + n - 1]
    pct = _sorted_percentiles(v, st, n, PERCENTILES)
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(std > 0, m3 / std**3, 0.0)
        cv = np.where(mean != 0, std / mean, 0.0)
        tail = np.where(mean != 0, hi / mean, 0.0)
    trunc = (count_at_least(v, st, n, cap) / nf).tolist() if cap else [None] * len(n)
    return [x.tolist() for x in (n, total, mean, std, cv, lo, *pct.T, hi, tail, skew)] + [trunc]


def count_at_least(
    sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray, threshold: npt.ArrayLike
) -> np.ndarray:
    """Per group of values sorted within groups: how many are >= `threshold` (a scalar or
    one value per group)."""
    v = np.asarray(sorted_values)
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    th = np.broadcast_to(np.asarray(threshold), counts.shape)
    if len(counts) * 64 <= len(v):  # large groups: a binary search in each
        return np.array(
            [
                c - np.searchsorted(v[s : s + c], t, side="left")
                for s, c, t in zip(starts.tolist(), counts.tolist(), th.tolist())
            ],
            dtype=np.int64,
        )
    code, rows = _group_rows(starts, counts)
    return np.bincount(code[v[rows] >= th[code]], minlength=len(counts)).astype(np.int64)


def _group_rows(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group number, row index) of every row of the groups, group after group."""
    code = np.repeat(np.arange(len(counts)), counts)
    rows = np.repeat(starts, counts) + (np.arange(len(code)) - np.repeat(np.cumsum(counts) - counts, counts))
    return code, rows


def _tiled(v: np.ndarray, starts: npt.ArrayLike, counts: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, starts, counts) with the groups back to back from row 0 (a copy only when
    the groups do not already tile `v`)."""
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    new_starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if len(counts) else counts
    if np.array_equal(starts, new_starts) and int(counts.sum()) == len(v):
        return v, starts, counts
    rows = np.repeat(starts - new_starts, counts) + np.arange(int(counts.sum()))
    return v[rows], new_starts, counts


def _sorted_percentiles(v: np.ndarray, starts: np.ndarray, counts: np.ndarray, qs: npt.ArrayLike) -> np.ndarray:
    """(groups, len(qs)) percentiles of non-empty sorted groups, as np.percentile does:
    virtual index (n-1)*q, neighbours floor/floor+1 (both the last at or past the end),
    and its lerp a + (b-a)*g, or b - (b-a)*(1-g) when g >= 0.5."""
    q = np.true_divide(np.asarray(qs, dtype=np.float64), 100)
    last = (counts - 1)[:, None]
    virtual = last * q[None, :]
    prev = np.floor(virtual)
    above = virtual >= last
    prev_i = np.where(above, last, prev.astype(np.int64))
    next_i = np.where(above, last, prev_i + 1)
    gamma = virtual - np.where(above, -1.0, prev)  # numpy's gamma uses index -1 past the end
    a = v[starts[:, None] + prev_i]
    b = v[starts[:, None] + next_i]
    diff = b - a
    res = a + diff * gamma
    high = gamma >= 0.5
    res[high] = (b - diff * (1 - gamma))[high]
    return res


def grouped_log_histogram(sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """`log_histogram` of every group of values sorted within groups: (groups, bins) int64."""
    v = np.asarray(sorted_values)
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    n_bins = len(LOG_BIN_EDGES) - 1
    # bin i holds [e_i, e_(i+1)); below 1 goes to the first bin, past the end to the last
    inner = LOG_BIN_EDGES[1:-1]
    if len(counts) * 64 <= len(v):
        # large groups: binary-search the inner edges in each sorted group
        cuts = np.zeros((len(counts), n_bins + 1), dtype=np.int64)
        cuts[:, -1] = counts
        for i, (s, c) in enumerate(zip(starts.tolist(), counts.tolist())):
            cuts[i, 1:-1] = np.searchsorted(v[s : s + c], inner, side="left")
        return np.diff(cuts, axis=1)
    code, rows = _group_rows(starts, counts)
    idx = np.searchsorted(inner, v[rows], side="right")
    return np.bincount(code * n_bins + idx, minlength=len(counts) * n_bins).reshape(len(counts), n_bins)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b as a float, None when b is zero or either is unknown."""
    if a is None or b is None:
        return None
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return None
    return a / b


def trend(x: npt.ArrayLike, y: npt.ArrayLike) -> dict:
    """Least-squares line through (x, y) and the change it implies.

    slope (per unit of x), intercept, r2, first/last (the observed y at the smallest and
    largest x), relative_change = (last - first) / first, and fitted_relative_change =
    (fit(x_last) - fit(x_first)) / fit(x_first), less sensitive to one noisy step.
    """
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[ok], ys[ok]
    out: dict[str, float | None] = {
        "n": int(len(xs)),
        "slope": None,
        "intercept": None,
        "r2": None,
        "first": None,
        "last": None,
        "relative_change": None,
        "fitted_relative_change": None,
    }
    if len(xs) == 0:
        return out
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    out["first"], out["last"] = float(ys[0]), float(ys[-1])
    out["relative_change"] = ratio(ys[-1] - ys[0], ys[0])
    if len(xs) < 2 or xs[-1] == xs[0]:
        return out
    xm, ym = xs.mean(), ys.mean()
    sxx = float(((xs - xm) ** 2).sum())
    slope = float(((xs - xm) * (ys - ym)).sum() / sxx)
    intercept = float(ym - slope * xm)
    resid = ys - (intercept + slope * xs)
    syy = float(((ys - ym) ** 2).sum())
    out.update(slope=slope, intercept=intercept, r2=(1.0 - float((resid**2).sum()) / syy) if syy > 0 else None)
    f0, f1 = intercept + slope * xs[0], intercept + slope * xs[-1]
    out["fitted_relative_change"] = ratio(f1 - f0, f0) if f0 > 0 else None
    return out
