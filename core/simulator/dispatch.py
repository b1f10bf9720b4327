"""Dispatch of prompt groups to rollout replicas (a group stays on one replica so its
samples share the prompt prefill and its turns the prefix cache).

- ``round_robin``: group g to replica g mod R.
- ``least_loaded``: in arrival order, each group to the replica with the fewest
  outstanding prompt tokens so far — what a router knows at dispatch time.
- ``longest_first``: the oracle that knows response lengths: groups by decreasing total
  tokens, each to the least loaded replica (LPT).

`longest_first(weights, k)` is that LPT rule for any items (e.g. samples by a predicted
length).
"""

from __future__ import annotations

import numba
import numpy as np


def assign_groups(mode: str, n_replicas: int, prompt_tokens: np.ndarray, total_tokens: np.ndarray) -> np.ndarray:
    """Replica index per group. `prompt_tokens`/`total_tokens` are per-group sums."""
    n = len(prompt_tokens)
    if n_replicas <= 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    if mode == "round_robin":
        return np.arange(n, dtype=np.int64) % n_replicas
    if mode == "least_loaded":
        return _greedy(np.arange(n), np.asarray(prompt_tokens, dtype=np.float64), n_replicas, n)
    if mode == "longest_first":
        return longest_first(total_tokens, n_replicas)
    raise ValueError(f"policy.dispatch: unknown mode {mode!r}")


def longest_first(weights: np.ndarray, k: int) -> np.ndarray:
    """Bin (0..k-1) per item: items by decreasing weight, each to the bin with the least
    weight so far (LPT; ties to the lower bin, equal weights in item order)."""
    w = np.asarray(weights, dtype=np.float64)
    if k <= 1 or w.size == 0:
        return np.zeros(w.size, dtype=np.int64)
    return _greedy(np.argsort(-w, kind="stable"), w, k, w.size)


@numba.njit(cache=True)
def _greedy(order: np.ndarray, weight: np.ndarray, k: int, n: int) -> np.ndarray:
    """Each item of `order` in turn to the least loaded bin (ties: the lower one)."""
    out = np.zeros(n, dtype=np.int64)
    load = np.zeros(k)
    for g in order:
        j = 0
        for i in range(1, k):
            if load[i] < load[j]:
                j = i
        out[g] = j
        load[j] += weight[g]
    return out
