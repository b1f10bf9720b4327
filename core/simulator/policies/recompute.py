"""Busy rollout time spent recomputing work already done: the re-prefill of a resumed
sample (its prompt plus the partial response it carried) and of a request preempted
for KV-cache room. Drawn as busy "recompute" on the timeline (causes.CAUSES).

A prefill iteration over uncached prompts p_i costs a' + b'·Σp + c'·Σp²; a request's
share of it, without the per-iteration constant, is b'·p + c'·p². Resumed samples are
costed here; the engine adds up the same share for each request it preempts
(`ReplicaEngine.recompute_s`: its whole context, prefilled again).
"""

from __future__ import annotations

import numpy as np

from core.simulator.predictor import EngineCoefficients


def prefill_seconds(coefficients: EngineCoefficients, tokens: np.ndarray, bins: np.ndarray, n: int) -> np.ndarray:
    """The marginal prefill time of requests of `tokens` uncached tokens each, summed
    per bin (`bins`: each request's, below `n`). Token counts are integers, so the
    sums are exact whatever their order."""
    p = np.asarray(tokens, dtype=np.float64)
    return coefficients.prefill_b * np.bincount(bins, p, n) + coefficients.prefill_c * np.bincount(bins, p * p, n)
