"""Scores of per-request predictions against measured completion times, with seeded
bootstrap intervals over requests.

`score_requests(pred, meas, naive=..., interval=..., groups=...)` compares one
prediction per request (a turn or a trajectory) with its measured completion time:

- completion-time error: the median and the p90 of |pred − meas| / meas, and the median
  signed relative error (> 0 over-predicts);
- distributions: the Wasserstein-1 distance between the predicted and measured
  completion times over the measured mean (0: the same distribution; 0.1: on average
  10 % of a mean request apart), and the Kolmogorov-Smirnov statistic (0 to 1);
- coverage: the share of requests whose measured time lies in their own predicted
  interval, or `NO_INTERVAL` when the replay gives none;
- skill against each naive predictor: 1 − (median error of the model) / (median error of
  the naive one): 1 is exact, 0 no better than the naive rule, < 0 worse.

Each figure comes with a bootstrap interval (`LEVEL`, 90 %): the requests resampled
with replacement `n_boot` times from `seed`, the same draw for every figure (so skills
are paired); the percentile interval less the bootstrap's estimate of bias (the mean of
the replicates less the point value), clipped to the figure's range. With `groups` (e.g. each turn's trajectory) whole groups are
resampled, since the turns of one trajectory share its fate.
"""

from __future__ import annotations

import numpy as np

LEVEL = 0.9
DEFAULT_BOOT = 1000
NO_INTERVAL = "uncalibrated: no interval"
ERRORS = ("median_abs_rel_error", "p90_abs_rel_error", "median_rel_error", "w1_over_mean", "ks")


# the figures' bounds, by column of `_figures` (the errors, KS and coverage)
_RANGE = {0: (0.0, np.inf), 1: (0.0, np.inf), 3: (0.0, np.inf), 4: (0.0, 1.0), 5: (0.0, 1.0)}


def distances(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float]:
    """(Wasserstein-1, Kolmogorov-Smirnov) between the two samples' empirical
    distributions (sizes may differ)."""
    p, m = np.sort(pred), np.sort(meas)
    at = np.sort(np.concatenate([p, m]))
    fp = np.searchsorted(p, at, side="right") / p.size
    fm = np.searchsorted(m, at, side="right") / m.size
    gap = np.abs(fp - fm)
    return float(np.sum(gap[:-1] * np.diff(at))), float(gap.max())


def error_figures(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """The `ERRORS` of one sample of requests, in that order."""
    rel = (pred - meas) / meas
    err = np.abs(rel)
    w1, ks = distances(pred, meas)
    return np.array([np.median(err), np.percentile(err, 90), np.median(rel), w1 / float(np.mean(meas)), ks])


def _skill(model: float, naive: float) -> float:
    """1 − model / naive error; nan when the naive rule is exact (skill undefined)."""
    return 1.0 - model / naive if naive > 0 else float("nan")


def _figures(pred: np.ndarray, meas: np.ndarray, naive: list[np.ndarray], cover: np.ndarray | None) -> np.ndarray:
    """Every figure of one sample: the errors, coverage (nan without an interval), then
    per naive predictor its median error and the model's skill against it."""
    errs = error_figures(pred, meas)
    out = [*errs, float(np.mean(cover)) if cover is not None else float("nan")]
    for q in naive:
        e = float(np.median(np.abs(q - meas) / meas))
        out += [e, _skill(float(errs[0]), e)]
    return np.array(out)


def resample_index(n: int, groups: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """One bootstrap draw of request indices: requests, or whole groups (`groups`: each
    request's group id, requests of a group contiguous)."""
    if groups is None:
        return rng.integers(0, n, n)
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    sizes = np.diff(np.r_[starts, n])
    pick = rng.integers(0, starts.size, starts.size)
    lengths = sizes[pick]
    offsets = np.repeat(starts[pick] - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(int(lengths.sum())) + offsets


def _check(pred: np.ndarray, meas: np.ndarray) -> None:
    if pred.shape != meas.shape or meas.ndim != 1 or meas.size == 0:
        raise ValueError(f"score_requests: predictions {pred.shape} and measurements {meas.shape} must match")
    if not (np.isfinite(meas).all() and (meas > 0).all() and np.isfinite(pred).all()):
        raise ValueError("score_requests: measured times must be finite and > 0, predictions finite")


def score_requests(
    pred: np.ndarray,
    meas: np.ndarray,
    *,
    naive: dict[str, np.ndarray] | None = None,
    interval: tuple[np.ndarray, np.ndarray] | None = None,
    groups: np.ndarray | None = None,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
) -> dict:
    """The figures of the module doc, each {"value", "ci90": [lo, hi]}.

    Returns {"n", ERRORS..., "coverage" (or `NO_INTERVAL`), "naive": {name:
    {"median_abs_rel_error", "skill"}}}; a skill is None where the naive rule is exact."""
    pred, meas = np.asarray(pred, np.float64), np.asarray(meas, np.float64)
    _check(pred, meas)
    names = list(naive or {})
    naive_arrays = [np.asarray((naive or {})[k], np.float64) for k in names]
    cover = None if interval is None else (interval[0] <= meas) & (meas <= interval[1])
    point = _figures(pred, meas, naive_arrays, cover)
    rng = np.random.default_rng(seed)
    boot = np.empty((n_boot, point.size))
    for b in range(n_boot):
        i = resample_index(meas.size, groups, rng)
        boot[b] = _figures(pred[i], meas[i], [q[i] for q in naive_arrays], None if cover is None else cover[i])
    tail = 100 * (1 - LEVEL) / 2

    def fig(j: int) -> dict | None:
        if not np.isfinite(point[j]):
            return None
        col = boot[:, j][np.isfinite(boot[:, j])]
        if not col.size:
            return {"value": float(point[j]), "ci90": [float(point[j])] * 2}
        # the percentile interval less the bootstrap's bias (a resampled KS or W1 sits
        # above the sample's: the supremum / integral of a noisier difference)
        lo, hi = np.percentile(col, [tail, 100 - tail]) - (float(np.mean(col)) - point[j])
        lo, hi = np.clip([lo, hi], *_RANGE.get(j, (-np.inf, np.inf)))
        return {"value": float(point[j]), "ci90": [float(lo), float(hi)]}

    out: dict = {"n": int(meas.size)}
    out.update({k: fig(j) for j, k in enumerate(ERRORS)})
    out["coverage"] = fig(len(ERRORS)) if cover is not None else NO_INTERVAL
    base = len(ERRORS) + 1
    out["naive"] = {
        k: {"median_abs_rel_error": fig(base + 2 * j), "skill": fig(base + 2 * j + 1)} for j, k in enumerate(names)
    }
    return out
