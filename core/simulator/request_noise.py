"""One Monte-Carlo run's perturbation of the engine's requests, for replaying any policy
under the calibrated noise (`uncertainty.NoiseModel`).

The batch-rollout Monte-Carlo (`uncertainty.monte_carlo`) multiplies the latencies of
one deterministic replay; a streaming policy's schedule depends on when requests finish,
so it is replayed itself, once per run, with every request's length in decode
iterations multiplied by its factor (the time a request occupies the engine scales with
them, and the engine's batch reacts to it). Training still sees the trace's tokens.

Factors are drawn per request from a counter-based hash of (seed, run, the request's
owner, position in its batch and lengths), not from a shared generator: a policy that
computes rollouts ahead in forked processes, or adds requests in another order, draws
the same factor for the same request. A request's noise bin is chosen by its decode
tokens: `token_edges` holds, for each latency edge of the noise model, the decode-token
count at the same quantile in a deterministic replay (`token_edges`), since a request's
latency grows with its length. The factor common to a step's requests
(`NoiseModel.step_sd`) is drawn once per run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.simulator.policies.base import Env
from core.simulator.requests import step_request_arrays
from core.simulator.uncertainty import NoiseModel, request_latencies
from core.simulator.workload import StepWorkload

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
# steps replayed deterministically to map latency bins onto decode tokens
EDGE_STEPS = 4


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _unit(h: np.ndarray) -> np.ndarray:
    """Uniform (0, 1] from 64 hashed bits."""
    return ((h >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53


@dataclass(frozen=True)
class RequestNoise:
    """Per-request multiplicative factors of one run (`scale_decode`)."""

    mu: np.ndarray
    sd: np.ndarray
    token_edges: np.ndarray  # inner bin edges in decode tokens (ascending)
    key: int  # the run's hash key
    common: float  # log-factor common to every request of the run

    def factors(self, arr: dict[str, np.ndarray], owner: np.ndarray) -> np.ndarray:
        decode = np.asarray(arr["decode"], dtype=np.int64)
        h = np.full(decode.size, np.uint64(self.key), dtype=np.uint64)
        fields = (owner, np.arange(decode.size), arr["context"], decode, arr["prefill"])
        for f in fields:
            h = _mix(h ^ (np.asarray(f).astype(np.int64).astype(np.uint64) + _GOLDEN))
        u1, u2 = _unit(_mix(h ^ np.uint64(1))), _unit(_mix(h ^ np.uint64(2)))
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller
        b = np.searchsorted(self.token_edges, decode)
        return np.exp(self.mu[b] + self.sd[b] * z + self.common)

    def scale_decode(self, arr: dict[str, np.ndarray], owner: np.ndarray) -> np.ndarray:
        """The requests' decode lengths times their factors (at least one token)."""
        scaled = np.rint(np.asarray(arr["decode"], dtype=np.float64) * self.factors(arr, owner))
        return np.maximum(1, scaled).astype(np.int64)


def token_edges(noise: NoiseModel, env: Env, steps: list[StepWorkload]) -> np.ndarray:
    """The noise model's latency edges carried onto decode tokens by quantile, on a
    deterministic batch rollout of (up to `EDGE_STEPS` of) `steps` under `env`."""
    if not noise.edges:
        return np.zeros(0)
    lats, decodes = [], []
    for w in steps[:EDGE_STEPS]:
        lat, _, _, _ = request_latencies(env, w)
        lats.append(lat)
        decodes.append(np.asarray(step_request_arrays(w)["decode"], dtype=np.float64))
    lat, dec = np.concatenate(lats), np.concatenate(decodes)
    share = np.array([np.mean(lat < e) for e in noise.edges])
    return np.maximum.accumulate(np.quantile(dec, np.clip(share, 0.0, 1.0)))


def request_noise(noise: NoiseModel, edges: np.ndarray, seed: int, run: int) -> RequestNoise:
    """Run `run`'s factors (seeded: the same seed and run give the same factors)."""
    key = int(_mix(np.array([seed * 1_000_003 + run], dtype=np.int64).astype(np.uint64))[0])
    rng = np.random.default_rng([seed, run])
    common = noise.step_sd * float(rng.standard_normal()) if noise.step_sd > 0 else 0.0
    return RequestNoise(np.asarray(noise.mu), np.asarray(noise.sd), np.asarray(edges), key, common)
