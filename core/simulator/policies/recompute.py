"""Busy rollout time spent recomputing work already done: the re-prefill of a resumed
sample (its prompt plus the partial response it carried) and of a request preempted
for KV-cache room. Drawn as busy "recompute" on the timeline (causes.CAUSES).

A prefill iteration over uncached prompts p_i costs a' + b'·Σp + c'·Σp²; a request's
share of it, without the per-iteration constant, is b'·p + c'·p². The engine counts the
tokens it prefilled, not which were recomputed, so preemptions are estimated per replica
from the tokens prefilled beyond each admitted request's own prefill, spread evenly
over the replica's preemptions.
"""

from __future__ import annotations

import numpy as np

from core.simulator.predictor import EngineCoefficients
from core.simulator.requests import RequestStore


def prefill_seconds(coefficients: EngineCoefficients, tokens) -> float:
    """The marginal prefill time of requests of `tokens` uncached tokens each."""
    p = np.asarray(tokens, dtype=np.float64)
    return float(coefficients.prefill_b * p.sum() + coefficients.prefill_c * (p * p).sum())


def own_prefill(store: RequestStore, first_prefill) -> float:
    """Tokens the admitted requests of `store` had to prefill once; `first_prefill[r]`
    is request r's own prefill as added (before any preemption changed it)."""
    admitted = np.isfinite(np.asarray(store.admit, dtype=np.float64))
    first = np.asarray(first_prefill, dtype=np.float64)
    return float(first[admitted[: first.size]].sum())


def preemption_recompute(
    coefficients: EngineCoefficients, preemptions: list[int], prefilled_tokens: float, own: float
) -> list[float]:
    """Seconds per replica re-prefilling preempted requests: the tokens prefilled beyond
    the requests' own prefill (`own`), spread evenly over the replicas' preemptions."""
    counts = np.asarray(preemptions, dtype=np.float64)
    out = [0.0] * counts.size
    if not counts.sum():
        return out
    mean = max(0.0, prefilled_tokens - own) / counts.sum()
    per = prefill_seconds(coefficients, [mean])
    return [float(n * per) for n in counts]
