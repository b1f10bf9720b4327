"""The batched partition loads (`lpt_loads`, `karmarkar_karp_loads`) against the scalar
functions they stand in for, row by row, on random matrices with ties, zeros, fewer
items than partitions, counts not divisible by k, integer and float weights, and on the
integer paths' edge cases (packed-key renormalisation, integers beyond float64's 2^53).

Expected loads: for integer weights, `partition_loads` of the scalar partitions (exact
integer sums); for LPT on floats, each partition's items added in the order LPT assigned
them (the running float64 sum the algorithm compares, hence exact); for KK on floats,
exact on dyadic weights (every sum exact in any order), within 1e-12 on arbitrary ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.analysis.balancing import (
    karmarkar_karp,
    karmarkar_karp_loads,
    lpt,
    lpt_loads,
    partition_loads,
)


def scalar_lpt(row, k):
    # lpt's parts list items in the order they were assigned: summing in that order
    # reproduces the running load LPT keeps (also for floats)
    return [sum((row[i] for i in part), start=row.dtype.type(0)) for part in lpt(row, k)]


def scalar_kk(row, k, equal_size):
    return partition_loads(row, karmarkar_karp(row, k, equal_size=equal_size))


def random_matrix(rng, kind, s, n):
    if kind == "few_ints":  # many ties and zeros
        return rng.integers(0, 4, (s, n))
    if kind == "ints":
        return rng.integers(0, 10**6, (s, n)) * rng.integers(0, 2, (s, n))  # half zeros
    if kind == "dyadic":  # floats whose sums are exact in any order, with ties
        return rng.integers(0, 12, (s, n)) / 4.0
    if kind == "floats":
        return rng.random((s, n)) * 1e3
    if kind == "signed":  # the loads match for negative weights too
        return rng.integers(-5, 6, (s, n))
    raise AssertionError(kind)


KINDS = ("few_ints", "ints", "dyadic", "floats", "signed")


@settings(max_examples=250, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(KINDS), st.integers(1, 5), st.integers(0, 30), st.integers(1, 9))
def test_batched_loads_equal_the_scalar_functions(seed, kind, s, n, k):
    w = random_matrix(np.random.default_rng(seed), kind, s, n)
    integer = w.dtype.kind == "i"

    got = lpt_loads(w, k)
    assert got.shape == (s, k) and got.dtype == (np.int64 if integer else np.float64)
    assert np.array_equal(got, np.array([scalar_lpt(r, k) for r in w]).reshape(s, k))

    for equal_size in (True, False):
        got = karmarkar_karp_loads(w, k, equal_size=equal_size)
        expected = np.array([scalar_kk(r, k, equal_size) for r in w]).reshape(s, k)
        assert got.shape == (s, k)
        if kind == "floats":
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
        else:
            assert np.array_equal(got, expected), (w, k, equal_size)


@pytest.mark.parametrize("n,k", [(0, 3), (1, 4), (3, 8), (7, 3), (8, 4), (23, 5), (64, 1)])
def test_shapes_and_totals_on_edge_counts(n, k):
    # n < k, n = 0, n divisible by k and not, k = 1
    w = np.random.default_rng(n * 31 + k).integers(0, 100, (3, n))
    for loads in (lpt_loads(w, k), karmarkar_karp_loads(w, k)):
        assert loads.shape == (3, k) and loads.dtype == np.int64
        assert np.array_equal(loads.sum(axis=1), w.sum(axis=1))
    assert np.array_equal(lpt_loads(w, k), [scalar_lpt(r, k) for r in w])
    assert np.array_equal(karmarkar_karp_loads(w, k), [scalar_kk(r, k, True) for r in w])


def test_hand_made_examples():
    # LPT on 5, 5, 4, 3, 3 over 2: 5->p0, 5->p1, 4->p0 (tie: lower index), 3->p1 (8 < 9), 3->p1 (8 < 9)
    assert lpt_loads([[5, 5, 4, 3, 3]], 2).tolist() == [[9, 11]]
    # rows are independent instances; a row's order of items does not matter
    assert lpt_loads([[3, 5, 3, 4, 5], [1, 1, 1, 1, 1]], 2).tolist() == [[9, 11], [3, 2]]
    # the textbook 2-way LDM example and the equal-size pairing of largest with smallest
    assert karmarkar_karp_loads([[8, 7, 6, 5, 4]], 2, equal_size=False).tolist() == [[16, 14]]
    assert karmarkar_karp_loads([[1, 2, 3, 4]], 2).tolist() == [[5, 5]]
    # equal size, 3 items over 2 with a zero dummy: ascending 0, 1, 2, 9 -> states [1, 0]
    # and [9, 2]; [9, 2] (spread 7) pops first and takes [1, 0] reversed: [9 + 0, 2 + 1]
    assert karmarkar_karp_loads([[9, 2, 1]], 2).tolist() == [[9, 3]]
    # unconstrained, the same items: 9 alone against 2 + 1
    assert karmarkar_karp_loads([[9, 2, 1]], 2, equal_size=False).tolist() == [[9, 3]]
    # equal size forces 2 items per set: 10, 9, 1, 1 -> {10, 1} and {9, 1}
    assert karmarkar_karp_loads([[10, 1, 9, 1]], 2).tolist() == [[11, 10]]


def test_packed_lpt_renormalises_without_overflow():
    # 3,000 items up to 2^40 over 64 partitions: packed keys load * 192,064 + ... would pass
    # 2^63 without the periodic offset (loads reach ~2^45.5; 2^45.5 * 192,064 > 2^63)
    w = np.random.default_rng(7).integers(0, 2**40, (2, 3000))
    assert w.sum(axis=1).max() < 2**52  # still the exact-in-float64 (packed) path
    assert np.array_equal(lpt_loads(w, 64), [partition_loads(r, lpt(r, 64)) for r in w])
    assert np.array_equal(karmarkar_karp_loads(w, 64), [scalar_kk(r, 64, True) for r in w])


def test_integers_beyond_float_precision_follow_the_scalar_order():
    # 2^60 + 1, 2^60 + 2, ... all round to the same float64: the scalar code sees ties and
    # breaks them by index, so the integer loads depend on that order
    rng = np.random.default_rng(3)
    w = (2**60 + rng.integers(0, 200, (4, 13))) // 64
    w[:, ::3] = 2**55 + rng.integers(0, 9, (4, 5))
    for k in (2, 3, 5):
        assert lpt_loads(w, k).dtype == np.int64
        assert np.array_equal(lpt_loads(w, k), [partition_loads(r, lpt(r, k)) for r in w])
        for equal_size in (True, False):
            assert np.array_equal(
                karmarkar_karp_loads(w, k, equal_size=equal_size), [scalar_kk(r, k, equal_size) for r in w]
            )


def test_bad_arguments():
    with pytest.raises(ValueError):
        lpt_loads([1, 2, 3], 2)  # one instance must still be a (1, n) matrix
    with pytest.raises(ValueError):
        karmarkar_karp_loads([[1, 2, 3]], 0)
