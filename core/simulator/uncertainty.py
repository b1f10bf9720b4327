"""Calibrated uncertainty: what the deterministic engine model does not explain, and a
seeded Monte-Carlo replay of it.

The deterministic replay gives every generation request the latency of the mean engine.
Real requests scatter around it (scheduling order, stragglers, host jitter), and a
step's rollout time is the finishing time of its slowest trajectory — a maximum over
thousands — so a replay of means predicts the maximum of the means, systematically
below the mean of the maxima.

`fit_noise(steps, calibration, model)` measures, on the calibration steps only, the
log-ratio r = log(measured / simulated) of every request's engine latency and keeps
its mean and standard deviation per bin of simulated latency (quantile bins: the
relative scatter of a 2 s request is larger than that of a 300 s one). The bins' mean
log-ratio is applied too: the least-squares fit of relative errors is not the
conditional mean (it sits below it when measurements scatter), and the synthetic-truth
test shows coverage falls from ~80 % to ~30 % without that correction. The Monte-Carlo
replay draws, per request, a multiplicative lognormal factor exp(mu_b + sd_b · z) for
its bin (times a factor common to the step's requests, exp(step_sd · z), when
several fit steps show the engine's speed varying between steps), adds the step's
recorded tool latencies, and sums per trajectory: the
trajectory completion times of one run. Per run: rollout time (slowest trajectory),
median and p90 trajectory completion. Over runs: mean and the P10–P90 interval.

The factors perturb the request latencies after the deterministic replay (the engine's
batch is not replayed per run): exact for an engine whose iteration time does not
depend on which requests are still running, and a first-order approximation otherwise.
`n_runs=None` picks the number of runs by a convergence check (batches of
`MC_BATCH` runs until the standard error of every mean is below `MC_REL_SE` of it, at
least `MC_MIN_RUNS`, at most `MC_MAX_RUNS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.simulator.policies.base import Env
from core.simulator.workload import StepWorkload

MC_BATCH = 100
MC_MIN_RUNS = 200
MC_MAX_RUNS = 2000
MC_REL_SE = 1e-3  # standard error of the MC mean <= 0.1 % of it
MIN_PER_BIN = 50
FIGURES = ("rollout_s", "p50_traj_s", "p90_traj_s")


@dataclass
class NoiseModel:
    """Lognormal multiplicative noise per request, by bin of simulated latency.

    `edges`: inner bin edges (seconds of simulated latency, ascending; len(mu) - 1 of
    them); request with simulated latency x is in bin searchsorted(edges, x)."""

    edges: list[float]
    mu: list[float]
    sd: list[float]
    counts: list[int]
    fit_steps: list[int] = field(default_factory=list)
    # sd of the per-step mean log-ratio over the fit steps (a factor common to all of
    # a step's requests: the engine faster or slower that step); 0 with one fit step
    step_sd: float = 0.0

    def factors(self, lat: np.ndarray, rng: np.random.Generator, n_runs: int) -> np.ndarray:
        """(n_runs, len(lat)) multiplicative factors."""
        b = np.searchsorted(np.asarray(self.edges), lat)
        mu, sd = np.asarray(self.mu)[b], np.asarray(self.sd)[b]
        z = mu + sd * rng.standard_normal((n_runs, lat.size))
        if self.step_sd > 0:
            z += self.step_sd * rng.standard_normal((n_runs, 1))
        return np.exp(z)

    def to_dict(self) -> dict:
        return {
            "edges": list(self.edges),
            "mu": list(self.mu),
            "sd": list(self.sd),
            "counts": list(self.counts),
            "fit_steps": list(self.fit_steps),
            "step_sd": self.step_sd,
        }

    @classmethod
    def from_dict(cls, d: dict) -> NoiseModel:
        return cls(
            [float(x) for x in d["edges"]],
            [float(x) for x in d["mu"]],
            [float(x) for x in d["sd"]],
            [int(x) for x in d["counts"]],
            [int(x) for x in d.get("fit_steps", [])],
            float(d.get("step_sd", 0.0)),
        )


def noise_from_residuals(sim: np.ndarray, meas: np.ndarray, n_bins: int = 10) -> NoiseModel | None:
    """The binned lognormal model of meas / sim (None without enough usable requests)."""
    ok = np.isfinite(sim) & np.isfinite(meas) & (sim > 0) & (meas > 0)
    sim, meas = sim[ok], meas[ok]
    if sim.size < 2 * MIN_PER_BIN // 2:
        return None
    n_bins = max(1, min(n_bins, sim.size // MIN_PER_BIN))
    r = np.log(meas / sim)
    edges = np.quantile(sim, np.linspace(0, 1, n_bins + 1))[1:-1] if n_bins > 1 else np.zeros(0)
    edges = np.unique(edges)
    b = np.searchsorted(edges, sim)
    mu, sd, counts = [], [], []
    for k in range(edges.size + 1):
        rk = r[b == k]
        mu.append(float(rk.mean()) if rk.size else 0.0)
        sd.append(float(rk.std(ddof=1)) if rk.size > 1 else 0.0)
        counts.append(int(rk.size))
    return NoiseModel([float(e) for e in edges], mu, sd, counts)


def request_latencies(env: Env, w: StepWorkload) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Deterministic replay of one step's rollout: per request simulated latency, tool
    latency after it and owning sample; and the rollout time."""
    from core.simulator.policies.base import rollout_batch

    ro = rollout_batch(env, w, keep_store=True)
    st: Any = ro.store
    lat = np.asarray(st.end) - np.asarray(st.arrive)
    return lat, np.nan_to_num(np.asarray(st.gap, dtype=np.float64)), np.asarray(st.owner, dtype=np.int64), ro.duration


def fit_noise(steps: list[StepWorkload], env: Env, fit_steps: list[int], n_bins: int = 10) -> NoiseModel | None:
    """Fit the noise on `fit_steps` (their measured per-request engine latencies)."""
    sims, meas = [], []
    for w in steps:
        if w.step not in fit_steps or w.turn_engine_latency_s is None:
            continue
        lat, _, _, _ = request_latencies(env, w)
        if lat.size != w.turn_engine_latency_s.size:
            continue
        sims.append(lat)
        meas.append(np.asarray(w.turn_engine_latency_s, dtype=np.float64))
    if not sims:
        return None
    out = noise_from_residuals(np.concatenate(sims), np.concatenate(meas), n_bins)
    if out is not None:
        out.fit_steps = sorted(set(fit_steps))
        step_means = [float(np.mean(np.log(m[(s > 0) & (m > 0)] / s[(s > 0) & (m > 0)]))) for s, m in zip(sims, meas)]
        out.step_sd = float(np.std(step_means, ddof=1)) if len(step_means) > 1 else 0.0
    return out


def _figures(completion: np.ndarray) -> np.ndarray:
    """(runs, samples) completion -> (runs, 3): rollout time, p50, p90."""
    return np.stack(
        [completion.max(axis=1), np.median(completion, axis=1), np.percentile(completion, 90, axis=1)], axis=1
    )


def monte_carlo(
    lat: np.ndarray,
    gap: np.ndarray,
    owner: np.ndarray,
    n_samples: int,
    noise: NoiseModel,
    *,
    n_runs: int | None = None,
    seed: int = 0,
) -> dict:
    """Seeded MC of one step's rollout figures. Returns {figure: {mean, p10, p90, sd}}
    plus n_runs and the per-run rollout times (`runs`, for interval checks)."""
    rng = np.random.default_rng(seed)
    # requests sorted by owner for a fast per-trajectory sum
    order = np.argsort(owner, kind="stable")
    lat, gap, owner = lat[order], gap[order], owner[order]
    starts = np.searchsorted(owner, np.arange(n_samples))
    has = np.bincount(owner, minlength=n_samples) > 0
    gap_sum = np.bincount(owner, gap, minlength=n_samples)
    chunks: list[np.ndarray] = []
    done = 0
    target = n_runs if n_runs is not None else MC_MAX_RUNS
    # memory: at most ~4M factors per batch
    batch = max(1, min(MC_BATCH if n_runs is None else target, 4_000_000 // max(1, lat.size)))
    while done < target:
        k = min(batch, target - done)
        f = noise.factors(lat, rng, k) * lat
        per = np.add.reduceat(f, np.minimum(starts, lat.size - 1), axis=1) if lat.size else np.zeros((k, n_samples))
        per = np.where(has, per, 0.0) + gap_sum
        chunks.append(_figures(per))
        done += k
        if n_runs is None and done >= MC_MIN_RUNS:
            x = np.concatenate(chunks)
            m, se = x.mean(axis=0), x.std(axis=0, ddof=1) / np.sqrt(len(x))
            if np.all(se <= MC_REL_SE * np.maximum(np.abs(m), 1e-12)):
                break
    x = np.concatenate(chunks)
    out: dict = {"n_runs": int(len(x)), "runs": x[:, 0], "figures": x}
    for j, name in enumerate(FIGURES):
        col = x[:, j]
        p10, p90 = np.percentile(col, [10, 90])
        out[name] = {"mean": float(col.mean()), "p10": float(p10), "p90": float(p90), "sd": float(col.std())}
    return out


def monte_carlo_step(env: Env, w: StepWorkload, noise: NoiseModel, *, n_runs: int | None = None, seed: int = 0) -> dict:
    """`monte_carlo` of one step's deterministic replay under `env`, plus the
    deterministic figures (`deterministic`)."""
    lat, gap, owner, duration = request_latencies(env, w)
    out = monte_carlo(lat, gap, owner, w.n_samples, noise, n_runs=n_runs, seed=seed + 7919 * int(w.step))
    comp = np.bincount(owner, lat + gap, minlength=w.n_samples)
    out["deterministic"] = {
        "rollout_s": duration,
        "p50_traj_s": float(np.median(comp)),
        "p90_traj_s": float(np.percentile(comp, 90)),
    }
    return out
