"""One-dimensional length distributions: lognormal and gamma fits, and KS statistics.

`fit_marginal(values, "lognorm" | "gamma")` returns a `MarginalFit` holding scipy's
parameter tuple (shape, loc, scale — the layout of PolyTrace's fitted-parameter file)
and the one-sample KS statistic of the fit against the data. Fits use at most
`max_points` values (an even subsample), which keeps them fast on million-row traces.

`ks_discrete(samples, cdf, lo, hi)` is the KS statistic of integer samples against a
continuous distribution rounded to the nearest integer and censored to [lo, hi] — the
distribution a generator that rounds and clips actually describes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

DISTRIBUTIONS = {"lognorm": stats.lognorm, "gamma": stats.gamma}


@dataclass
class MarginalFit:
    kind: str
    params: tuple[float, ...]
    ks: float
    n: int

    @property
    def dist(self) -> Any:
        # frozen scipy distributions are slow to build: keep one
        cached = self.__dict__.get("_dist")
        if cached is None or cached[0] != (self.kind, self.params):
            cached = ((self.kind, self.params), DISTRIBUTIONS[self.kind](*self.params))
            self.__dict__["_dist"] = cached
        return cached[1]

    def cdf(self, x: npt.ArrayLike) -> np.ndarray:
        return self.dist.cdf(x)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.dist.rvs(size=n, random_state=rng)

    def to_dict(self) -> dict:
        return {"type": self.kind, "parameters": [float(p) for p in self.params], "ks_statistic": self.ks, "n": self.n}

    @classmethod
    def from_dict(cls, d: dict) -> MarginalFit:
        kind = d.get("type")
        if kind not in DISTRIBUTIONS:
            raise ValueError(f"type: unknown distribution {kind!r} (known: {', '.join(DISTRIBUTIONS)})")
        return cls(
            kind,
            tuple(float(p) for p in d["parameters"]),
            float(d.get("ks_statistic", float("nan"))),
            int(d.get("n", 0)),
        )


def _subsample(v: np.ndarray, max_points: int) -> np.ndarray:
    if v.size <= max_points:
        return v
    return np.sort(v)[np.linspace(0, v.size - 1, max_points).astype(np.int64)]


def fit_marginal(values: np.ndarray, kind: str, *, max_points: int = 200_000) -> MarginalFit:
    """Maximum-likelihood fit with loc fixed at 0 (lengths are positive)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size < 2:
        raise ValueError(f"fit_marginal: need at least 2 positive values, got {v.size}")
    x = _subsample(v, max_points)
    if kind == "lognorm":
        lx = np.log(x)
        params: tuple[float, ...] = (float(max(lx.std(), 1e-6)), 0.0, float(np.exp(lx.mean())))  # closed-form MLE
    elif kind == "gamma":
        params = tuple(float(p) for p in stats.gamma.fit(x, floc=0))
    else:
        raise ValueError(f"fit_marginal: unknown distribution {kind!r}")
    ks = float(stats.kstest(x, DISTRIBUTIONS[kind](*params).cdf).statistic)
    return MarginalFit(kind, params, ks, int(v.size))


def ks_discrete(
    samples: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray], lo: int = 1, hi: int | None = None
) -> float:
    """sup |F_n − F_d| for integer samples, F_d(k) = cdf(k + 0.5) on [lo, hi), 0 below
    lo and 1 from hi on (rounding to integers and clipping to [lo, hi])."""
    s = np.sort(np.asarray(samples, dtype=np.int64))
    n = s.size
    u, counts = np.unique(s, return_counts=True)
    fn = np.cumsum(counts) / n

    def fd(k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.float64)
        out = np.asarray(cdf(k + 0.5), dtype=np.float64)
        out = np.where(k < lo, 0.0, out)
        if hi is not None:
            out = np.where(k >= hi, 1.0, out)
        return out

    d = np.abs(fn - fd(u)).max()
    d = max(d, float(fd(np.array([u[0] - 1]))[0]))
    if u.size > 1:
        d = max(d, float(np.abs(fn[:-1] - fd(u[1:] - 1)).max()))
    if hi is None:
        d = max(d, float(1.0 - np.asarray(cdf(np.array([np.inf])), dtype=np.float64)[0]))
    return float(d)


def icc_log(groups: list[np.ndarray] | np.ndarray) -> float:
    """Intra-group correlation of log lengths (one-way ANOVA estimator), in [0, 0.99]."""
    if isinstance(groups, np.ndarray):
        groups = list(groups)
    gs = [np.log(np.maximum(np.asarray(g, dtype=np.float64), 1)) for g in groups if len(g) > 1]
    if len(gs) < 2:
        return 0.0
    k = len(gs)
    sizes = np.array([g.size for g in gs], dtype=np.float64)
    means = np.array([g.mean() for g in gs])
    grand = np.concatenate(gs).mean()
    ssb = float((sizes * (means - grand) ** 2).sum())
    ssw = float(sum(((g - g.mean()) ** 2).sum() for g in gs))
    N = sizes.sum()
    msb = ssb / (k - 1)
    msw = ssw / max(N - k, 1)
    n0 = (N - (sizes**2).sum() / N) / (k - 1)
    denom = msb + (n0 - 1) * msw
    return float(np.clip((msb - msw) / denom, 0.0, 0.99)) if denom > 0 else 0.0
