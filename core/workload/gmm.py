"""Gaussian mixture with full covariances: EM fit, densities, sampling, conditionals.

Pure numpy (no scikit-learn dependency). `fit_gmm(X, k)` runs EM from a k-means++
start, with a small ridge on every covariance so components never collapse, and
returns a `GaussianMixture`. `conditional_sample` draws the last dimensions given the
first ones (component posteriors times the conditional Gaussians), which keeps the
joint distribution exact when, e.g., a group's prompt is drawn first and each response
then given that prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr


@dataclass
class GaussianMixture:
    weights: np.ndarray  # (k,)
    means: np.ndarray  # (k, d)
    covariances: np.ndarray  # (k, d, d)
    log_likelihood: float = float("nan")  # total, at the fit
    n_iter: int = 0

    @property
    def k(self) -> int:
        return int(self.weights.size)

    @property
    def d(self) -> int:
        return int(self.means.shape[1])

    def log_prob_components(self, X: np.ndarray) -> np.ndarray:
        """(n, k): log w_j + log N(x | mu_j, S_j)."""
        X = np.atleast_2d(X)
        out = np.empty((X.shape[0], self.k))
        for j in range(self.k):
            L = np.linalg.cholesky(self.covariances[j])
            z = (X - self.means[j]) @ np.linalg.inv(L).T
            logdet = 2.0 * np.log(np.diag(L)).sum()
            out[:, j] = np.log(self.weights[j]) - 0.5 * (
                np.einsum("ij,ij->i", z, z) + logdet + self.d * np.log(2 * np.pi)
            )
        return out

    def score(self, X: np.ndarray) -> float:
        """Total log-likelihood of X."""
        return float(logsumexp(self.log_prob_components(X), axis=1).sum())

    def bic(self, X: np.ndarray) -> float:
        n_params = (self.k - 1) + self.k * self.d + self.k * self.d * (self.d + 1) / 2
        return float(-2.0 * self.score(X) + n_params * np.log(np.atleast_2d(X).shape[0]))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        comp = rng.choice(self.k, size=n, p=self.weights)
        out = np.empty((n, self.d))
        for j in range(self.k):
            m = comp == j
            if m.any():
                out[m] = rng.multivariate_normal(self.means[j], self.covariances[j], size=int(m.sum()))
        return out

    def marginal_cdf(self, x: np.ndarray, dim: int) -> np.ndarray:
        """CDF of one coordinate (a mixture of normal CDFs)."""
        x = np.asarray(x, dtype=np.float64)
        sd = np.sqrt(self.covariances[:, dim, dim])
        return np.sum(self.weights * ndtr((x[..., None] - self.means[:, dim]) / sd), axis=-1)

    def marginal(self, dims: list[int]) -> GaussianMixture:
        idx = np.asarray(dims)
        return GaussianMixture(
            self.weights.copy(), self.means[:, idx].copy(), self.covariances[:, idx][:, :, idx].copy()
        )

    def conditional_sample(
        self, x: np.ndarray, n_dims: int, rng: np.random.Generator, scores: np.ndarray | None = None
    ) -> np.ndarray:
        """Draw the last `n_dims` coordinates given the first ones, one row per row of x.

        `scores` (n, n_dims) optionally supplies the standard-normal innovations (to
        correlate draws, e.g. samples of one prompt group); default independent."""
        x = np.atleast_2d(x)
        p = x.shape[1]
        a, b = slice(0, p), slice(p, p + n_dims)
        post = GaussianMixture(self.weights, self.means[:, a], self.covariances[:, a, a]).log_prob_components(x)
        post = np.exp(post - logsumexp(post, axis=1, keepdims=True))
        u = rng.random(int(x.shape[0]))[:, None]  # an int size: an array, not one float
        comp = np.minimum((np.cumsum(post, axis=1) < u).sum(axis=1), self.k - 1)
        z = (
            rng.standard_normal((x.shape[0], n_dims))
            if scores is None
            else np.asarray(scores).reshape(x.shape[0], n_dims)
        )
        out = np.empty((x.shape[0], n_dims))
        for j in range(self.k):
            m = comp == j
            if not m.any():
                continue
            S = self.covariances[j]
            gain = S[b, a] @ np.linalg.inv(S[a, a])
            mean = self.means[j, b] + (x[m] - self.means[j, a]) @ gain.T
            cov = S[b, b] - gain @ S[a, b]
            L = np.linalg.cholesky(cov + 1e-12 * np.eye(n_dims))
            out[m] = mean + z[m] @ L.T
        return out

    def to_dict(self) -> dict:
        return {
            "weights": self.weights.tolist(),
            "means": self.means.tolist(),
            "covariances": self.covariances.tolist(),
            "log_likelihood": self.log_likelihood,
        }

    @classmethod
    def from_dict(cls, d: dict) -> GaussianMixture:
        w = np.asarray(d["weights"], dtype=np.float64)
        return cls(
            w / w.sum(),
            np.asarray(d["means"], dtype=np.float64),
            np.asarray(d["covariances"], dtype=np.float64),
            float(d.get("log_likelihood", float("nan"))),
        )


def logsumexp(a: np.ndarray, axis: int = 1, keepdims: bool = False) -> np.ndarray:
    m = a.max(axis=axis, keepdims=True)
    out = m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


def _kmeans_pp(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    centers = [X[rng.integers(X.shape[0])]]
    for _ in range(1, k):
        d2 = np.min(((X[:, None, :] - np.asarray(centers)[None]) ** 2).sum(-1), axis=1)
        p = d2 / d2.sum() if d2.sum() > 0 else None
        centers.append(X[rng.choice(X.shape[0], p=p)])
    return np.asarray(centers)


def fit_gmm(
    X: np.ndarray, k: int, *, seed: int = 0, max_iter: int = 300, tol: float = 1e-6, reg: float = 1e-6
) -> GaussianMixture:
    """EM for a k-component full-covariance mixture."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    n, d = X.shape
    if n < k:
        raise ValueError(f"fit_gmm: {n} points for {k} components")
    rng = np.random.default_rng(seed)
    ridge = np.diag(reg * np.maximum(X.var(axis=0), 1e-12))
    means = _kmeans_pp(X, k, rng)
    assign = np.argmin(((X[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    resp = np.eye(k)[assign]
    prev = -np.inf
    model: GaussianMixture | None = None
    for it in range(1, max_iter + 1):
        # M step
        nk = resp.sum(axis=0) + 1e-10
        weights = nk / n
        means = (resp.T @ X) / nk[:, None]
        covs = np.empty((k, d, d))
        for j in range(k):
            diff = X - means[j]
            covs[j] = (resp[:, j, None] * diff).T @ diff / nk[j] + ridge
        model = GaussianMixture(weights, means, covs)
        # E step
        lp = model.log_prob_components(X)
        norm = logsumexp(lp, axis=1)
        ll = float(norm.sum())
        resp = np.exp(lp - norm[:, None])
        model.log_likelihood, model.n_iter = ll, it
        if ll - prev <= tol * abs(ll):
            break
        prev = ll
    if model is None:
        raise ValueError(f"fit_gmm: max_iter must be at least 1, got {max_iter}")
    return model
