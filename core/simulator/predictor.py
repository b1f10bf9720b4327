"""Execution-time predictor of one rollout replica (swappable, Vidur style).

Iteration times (seconds), the fitted form of DistServe's simulator:

- decode iteration with B running sequences holding ΣKV cached tokens:
  ``decode_a + decode_b · ΣKV + decode_c · B``
- prefill iteration over new requests with p uncached prompt tokens each:
  ``prefill_a + prefill_b · Σp + prefill_c · Σp²``

`roofline_coefficients` derives them from the hardware: a decode iteration reads the
weights once (memory bound), reads every cached KV token, and spends 2·N FLOPs per
sequence; prefill spends 2·N FLOPs per token plus the causal attention term
2·L·h per token pair. `calibrate` (calibration.py) fits them to measured latencies.

Between events the batch is constant and ΣKV grows by B per iteration, so the time of m
consecutive decode iterations is an arithmetic series, solved in closed form both ways
(`decode_series`, `iterations_until`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from core.simulator.config import ClusterConfig, ModelConfig

COEFFICIENT_FIELDS = ("decode_a", "decode_b", "decode_c", "prefill_a", "prefill_b", "prefill_c")


@dataclass(frozen=True)
class EngineCoefficients:
    """Iteration-time coefficients of one replica (seconds, per token, per sequence)."""

    decode_a: float
    decode_b: float
    decode_c: float
    prefill_a: float
    prefill_b: float
    prefill_c: float

    def scaled(self, factor: float) -> EngineCoefficients:
        return EngineCoefficients(*(getattr(self, f) * factor for f in COEFFICIENT_FIELDS))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EngineCoefficients:
        if not isinstance(d, dict):
            raise ValueError(f"coefficients: expected an object, got {type(d).__name__}")
        unknown = set(d) - set(COEFFICIENT_FIELDS)
        if unknown:
            raise ValueError(f"coefficients.{sorted(unknown)[0]}: unknown field")
        out = {}
        for f in COEFFICIENT_FIELDS:
            if f not in d:
                raise ValueError(f"coefficients.{f}: required")
            v = d[f]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"coefficients.{f}: must be a finite number >= 0, got {v!r}")
            out[f] = float(v)
        return cls(**out)


def roofline_coefficients(cluster: ClusterConfig, model: ModelConfig) -> EngineCoefficients:
    """Coefficients of one replica (TP = `cluster.rollout_tp`) from peak numbers."""
    tp = cluster.rollout_tp
    bw = cluster.gpu.mem_bandwidth * cluster.bandwidth_efficiency * tp
    flops = cluster.gpu.peak_flops * cluster.rollout_mfu * tp
    # a fixed per-iteration overhead (scheduling, kernel launches, TP all-reduces)
    overhead = 0.004 + 0.001 * math.log2(tp)
    return EngineCoefficients(
        decode_a=overhead + model.weight_bytes / bw,
        decode_b=model.kv_bytes_per_token / bw,
        decode_c=2.0 * model.params / flops,
        prefill_a=overhead + model.weight_bytes / bw,
        prefill_b=2.0 * model.params / flops,
        prefill_c=2.0 * model.layers * model.hidden / flops,
    )


def decode_series(m: int, alpha: float, beta: float) -> float:
    """Time of m decode iterations whose first takes `alpha` and each next `beta` more."""
    return m * alpha + beta * (m * (m - 1) * 0.5)


def iterations_until(delta: float, alpha: float, beta: float, *, at_least: bool) -> int:
    """Iterations m with decode_series(m) reaching `delta`.

    at_least=True: the smallest m >= 1 with series(m) >= delta (the first iteration
    boundary at or after a moment). at_least=False: the largest m >= 0 with
    series(m) <= delta (iterations completed by a moment).
    """
    if delta <= 0:
        return 1 if at_least else 0
    h = alpha - 0.5 * beta
    root = 2.0 * delta / (h + math.sqrt(h * h + 2.0 * beta * delta)) if (h > 0 or beta > 0) else math.inf
    if at_least:
        m = max(1, math.ceil(root - 1e-9))
        while decode_series(m, alpha, beta) < delta:
            m += 1
        while m > 1 and decode_series(m - 1, alpha, beta) >= delta:
            m -= 1
        return m
    m = max(0, math.floor(root + 1e-9))
    while m > 0 and decode_series(m, alpha, beta) > delta:
        m -= 1
    while decode_series(m + 1, alpha, beta) <= delta:
        m += 1
    return m
