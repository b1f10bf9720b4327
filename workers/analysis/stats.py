"""Distribution statistics shared by ingestion summaries and the length analyses.

Pure numpy: arrays in, plain dicts out.
"""

from __future__ import annotations

import numpy as np

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
    out = {
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
