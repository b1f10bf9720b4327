"""Dispatch of groups (or samples) to replicas (core/simulator/dispatch.py): the LPT rule
against a heap of (load, bin), which takes the least loaded bin and the lower on ties."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from core.simulator.dispatch import assign_groups, longest_first


def _lpt_by_heap(order, weight, k):
    out = np.zeros(len(weight), dtype=np.int64)
    heap = [(0.0, j) for j in range(k)]
    for g in order:
        load, j = heapq.heappop(heap)
        out[g] = j
        heapq.heappush(heap, (load + float(weight[g]), j))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [2, 3, 8, 16])
def test_longest_first_and_least_loaded_place_items_as_a_heap_would(seed, k):
    rng = np.random.default_rng(seed)
    w = rng.integers(1, 6, 500).astype(float)  # many ties, in loads and weights
    w[::7] = rng.lognormal(5, 1, w[::7].size)
    assert longest_first(w, k).tolist() == _lpt_by_heap(np.argsort(-w, kind="stable"), w, k).tolist()
    got = assign_groups("least_loaded", k, w, w)
    assert got.tolist() == _lpt_by_heap(range(w.size), w, k).tolist()
    assert np.bincount(got, minlength=k).min() > 0
