"""Grouped statistics and the grouping helpers behind the fast analyses: each grouped
function must give what the per-group reference (`distribution_stats`, `log_histogram`,
`np.sort`, `np.percentile`) gives on every group, on every code path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.analysis.grouping import sort_within_groups, sorted_run_starts
from core.analysis.stats import (
    PERCENTILES,
    count_at_least,
    distribution_stats,
    grouped_distribution_stats,
    grouped_log_histogram,
    log_histogram,
)
from core.jsonable import json_safe


def tiled(groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    counts = np.array([len(g) for g in groups], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    values = np.concatenate(groups) if groups else np.zeros(0)
    return values, starts, counts


def assert_same_stats(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for key, want in expected.items():
        if want is None or key == "count" or key == "min" or key == "max" or key.startswith("p"):
            assert got[key] == want, key  # counts, order statistics and percentiles: exact
        else:
            assert got[key] == pytest.approx(want, rel=1e-12, abs=1e-12), key


@pytest.mark.parametrize("kind", ["lengths", "floats"])
def test_grouped_stats_equal_per_group_stats(kind):
    rng = np.random.default_rng(7)
    sizes = [1, 2, 3, 0, 10, 57, 200, 0, 1000]
    if kind == "lengths":
        groups = [np.sort(rng.lognormal(6, 1, n).clip(1, 2000).astype(np.int32)) for n in sizes]
    else:
        groups = [np.sort(rng.normal(0, 3, n)) for n in sizes]
    values, starts, counts = tiled(groups)
    for cap in (None, 1500):
        got = grouped_distribution_stats(values, starts, counts, cap)
        assert len(got) == len(groups)
        for g, st in zip(groups, got):
            if len(g) == 0:
                assert st == {"count": 0}
            else:
                assert_same_stats(st, distribution_stats(g, cap))


def test_grouped_percentiles_match_numpy_bit_for_bit_and_blocks_join():
    # many groups of awkward sizes: crosses the ~1M-row blocks the function works in
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 40_000, 90)
    groups = [np.sort(rng.integers(0, 50_000, n)) for n in sizes]
    values, starts, counts = tiled(groups)
    got = grouped_distribution_stats(values, starts, counts)
    for g, st in zip(groups, got):
        want = np.percentile(g.astype(np.float64), PERCENTILES)
        assert [st[f"p{p}"] for p in PERCENTILES] == want.tolist()
        assert st["sum"] == float(g.sum()) and st["count"] == len(g)


def test_groups_given_out_of_order_or_with_gaps():
    v = np.array([5.0, 1.0, 2.0, 3.0, 9.0, 10.0])
    # group 0 is rows 4..5, group 1 is rows 1..3; row 0 belongs to no group
    got = grouped_distribution_stats(v, np.array([4, 1]), np.array([2, 3]))
    assert got[0]["mean"] == 9.5 and got[0]["min"] == 9.0
    assert got[1]["sum"] == 6.0 and got[1]["p50"] == 2.0


def test_grouped_log_histogram_both_paths():
    rng = np.random.default_rng(1)
    for sizes in ([5000, 7000, 1], [3] * 200 + [0]):  # few large groups; many small ones
        groups = [np.sort(rng.lognormal(4, 3, n)) for n in sizes]
        groups[0][:2] = [0.0, 0.5]  # below the first edge: first bin
        values, starts, counts = tiled(groups)
        hist = grouped_log_histogram(values, starts, counts)
        assert hist.tolist() == [log_histogram(g) for g in groups]


def test_count_at_least_both_paths():
    rng = np.random.default_rng(2)
    for sizes in ([400, 900], [2, 5, 0, 1] * 50):
        groups = [np.sort(rng.integers(0, 20, n)) for n in sizes]
        values, starts, counts = tiled(groups)
        thresholds = rng.integers(0, 22, len(groups))
        got = count_at_least(values, starts, counts, thresholds)
        assert got.tolist() == [int((g >= t).sum()) for g, t in zip(groups, thresholds)]
        assert count_at_least(values, starts, counts, 10).tolist() == [int((g >= 10).sum()) for g in groups]


@pytest.mark.parametrize(
    "make",
    [
        lambda rng, n: rng.integers(1, 3000, n).astype(np.int32),  # narrow ints: counting sort
        lambda rng, n: rng.integers(-(2**40), 2**40, n),  # wide ints: np.sort per group / packed
        lambda rng, n: rng.normal(0, 1, n),  # floats
    ],
)
@pytest.mark.parametrize("sizes", [[3000, 2500, 4000], [3, 1, 7, 2] * 40])
def test_sort_within_groups_sorts_each_group_only(make, sizes):
    rng = np.random.default_rng(5)
    groups = [make(rng, n) for n in sizes]
    values, starts, counts = tiled(groups)
    out = sort_within_groups(values, starts, counts)
    assert out.dtype == values.dtype
    assert np.array_equal(out, np.concatenate([np.sort(g) for g in groups]))
    with pytest.raises(ValueError):
        sort_within_groups(values, starts[1:], counts[1:])


def test_sorted_run_starts():
    step = np.array([0, 0, 0, 1, 1, 2])
    group = np.array([0, 0, 1, 0, 3, 3])
    assert sorted_run_starts(step, group).tolist() == [0, 2, 3, 4, 5]
    assert sorted_run_starts(step).tolist() == [0, 3, 5]
    # a later column may decrease only where an earlier one increases
    assert sorted_run_starts(step, np.array([0, 1, 0, 0, 3, 3])) is None
    assert sorted_run_starts(np.array([1, 0]), np.array([0, 1])) is None
    assert sorted_run_starts(np.array([], dtype=np.int64)).tolist() == []


def test_json_safe_plain_values():
    out = json_safe(
        {
            1: [
                1.5,
                math.nan,
                -math.inf,
                np.float32(2.5),
                np.int64(3),
                np.bool_(True),
                None,
                "x",
                (1, 2),
                np.array([1.0, np.nan]),
            ],
            "k": {"v": np.float64(np.inf)},
        }
    )
    assert out == {"1": [1.5, None, None, 2.5, 3, True, None, "x", [1, 2], [1.0, None]], "k": {"v": None}}
    assert [type(v) for v in out["1"][3:6]] == [float, int, bool]
