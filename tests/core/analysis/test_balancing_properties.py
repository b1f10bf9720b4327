"""Properties of the partition heuristics and of the imbalance analysis built on them.

What is true (and so what is tested), see core/analysis/balancing.py:
- every item is assigned exactly once, to one of k partitions;
- KK with equal_size: sizes are floor(n/k) or ceil(n/k);
- KK (both modes) and LPT: max load - min load <= the largest item weight;
- LPT and unconstrained KK: max load <= (4/3 - 1/(3k)) * optimum (checked against a
  brute-force optimum on small inputs);
- the analysis: groups stay whole (one item per group), balancing conserves the total,
  and whenever the recorded max >= mean + largest group, balancing saves (>= 0).
Balancing is NOT guaranteed to beat every recorded assignment, so that is not tested.
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.analysis.balancing import karmarkar_karp, lpt, partition_loads
from core.analysis.imbalance import analyze_imbalance
from core.analysis.tables import TraceData

weights_st = st.lists(st.integers(min_value=0, max_value=10_000), min_size=0, max_size=40)
k_st = st.integers(min_value=1, max_value=9)

ALGOS = {
    "kk_equal": lambda w, k: karmarkar_karp(w, k, equal_size=True),
    "kk_free": lambda w, k: karmarkar_karp(w, k, equal_size=False),
    "lpt": lpt,
}


def assert_exact_cover(parts, n, k):
    assert len(parts) == k
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(n))


@settings(max_examples=300, deadline=None)
@given(weights_st, k_st)
def test_every_item_once_and_spread_at_most_largest_item(w, k):
    for name, algo in ALGOS.items():
        parts = algo(w, k)
        assert_exact_cover(parts, len(w), k)
        loads = partition_loads(w, parts)
        assert sum(loads) == sum(w)
        if w:
            assert max(loads) - min(loads) <= max(w), name
            assert max(loads) <= sum(w) / k + max(w)


@settings(max_examples=300, deadline=None)
@given(weights_st, k_st)
def test_equal_size_partitions_differ_by_at_most_one(w, k):
    sizes = [len(p) for p in karmarkar_karp(w, k, equal_size=True)]
    assert max(sizes) - min(sizes) <= 1
    assert set(sizes) <= {len(w) // k, -(-len(w) // k)}


def brute_force_opt(w, k):
    best = None
    for assign in itertools.product(range(k), repeat=len(w)):
        loads = [0] * k
        for x, j in zip(w, assign):
            loads[j] += x
        m = max(loads)
        best = m if best is None or m < best else best
    return best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=100), min_size=1, max_size=7), st.integers(2, 3))
def test_lpt_and_kk_within_4_3_of_optimum(w, k):
    opt = brute_force_opt(w, k)
    bound = (4 / 3 - 1 / (3 * k)) * opt + 1e-9
    assert max(partition_loads(w, lpt(w, k))) <= bound
    assert max(partition_loads(w, karmarkar_karp(w, k, equal_size=False))) <= bound


def test_known_kk_example():
    # the textbook 2-way LDM example: {8,7,6,5,4} -> difference 2 (sums 16 and 14)
    parts = karmarkar_karp([8, 7, 6, 5, 4], 2, equal_size=False)
    assert sorted(partition_loads([8, 7, 6, 5, 4], parts)) == [14, 16]
    # equal size over 4 items in 2 sets: pairs largest with smallest
    parts = karmarkar_karp([1, 2, 3, 4], 2, equal_size=True)
    assert sorted(partition_loads([1, 2, 3, 4], parts)) == [5, 5]


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**31 - 1), st.integers(1, 6), st.integers(1, 30), st.integers(1, 4))
def test_imbalance_analysis_properties(seed, dp, groups, n):
    rng = np.random.default_rng(seed)
    steps = 2
    step = np.repeat(np.arange(steps), groups * n)
    group = np.tile(np.repeat(np.arange(groups), n), steps)
    rank_of_group = rng.integers(0, dp, (steps, groups))
    dp_rank = rank_of_group[step, group]
    resp = rng.integers(1, 3000, len(step))
    prompt = np.repeat(rng.integers(1, 500, steps * groups), n)
    data = TraceData.from_tables(
        {
            "samples": {
                "step": step,
                "group_idx": group,
                "sample_idx": np.tile(np.arange(n), steps * groups),
                "prompt_len": prompt,
                "response_len": resp,
                "dp_rank": dp_rank,
            }
        }
    )
    res = analyze_imbalance(data, dp_size=dp)
    for entry in res["steps"]:
        assert entry["items"] == groups  # groups stay whole
        for name in ("tokens", "cost"):
            f = entry[name]
            total = sum(f["recorded"])
            mean = total / dp
            for algo in ("kk", "lpt"):
                assert f[f"{algo}_max"] <= mean + f["largest_item"] + 1e-6
                assert f[f"{algo}_max"] >= mean - 1e-6
                if f["recorded_max"] >= mean + f["largest_item"]:
                    assert f[f"{algo}_saving"] >= 0
