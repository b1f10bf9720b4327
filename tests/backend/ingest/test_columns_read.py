"""`read_columns` returns the same arrays on both database shapes and both Postgres paths
(one row per step with packed columns, or one COPY message per row): key order, NULL
sentinels in every column type, step ranges."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from sqlalchemy import insert

from backend.store.columns import _restore_order, read_columns
from backend.store.db import get_engine, new_session
from backend.store.models import Sample, Trace

COLUMNS = [
    "step",
    "group_idx",
    "sample_idx",
    "prompt_len",
    "response_len",
    "dp_rank",
    "task_id",
    "truncated",
    "validate",
    "latency_s",
]
KEY = "step, group_idx, sample_idx"


@pytest.fixture()
def stored(env):
    """A trace with 5 steps x 7 groups x 3 samples inserted in shuffled order, some NULLs."""
    from backend.auth import create_team

    rng = np.random.default_rng(11)
    rows = []
    for step in (2, 3, 5, 8, 9):
        for g in range(7):
            for i in range(3):
                rows.append(
                    {
                        "step": step,
                        "group_idx": g,
                        "sample_idx": i,
                        "prompt_len": int(rng.integers(1, 500)),
                        "response_len": int(rng.integers(1, 9000)),
                        "dp_rank": None if (g + i) % 5 == 0 else g % 4,
                        "task_id": None if i == 2 else g % 3,
                        "truncated": None if g == 6 else bool(i % 2),
                        "validate": None if g == 5 else step == 9,
                        "latency_s": None if i == 1 else float(rng.random()),
                    }
                )
    rows = [rows[j] for j in rng.permutation(len(rows))]
    with new_session() as session:
        team, _ = create_team(session, f"cols-{uuid.uuid4().hex[:8]}")
        trace = Trace(team_id=team.id, name="cols", content_hash=uuid.uuid4().hex, status="ready")
        session.add(trace)
        session.flush()
        session.execute(insert(Sample), [{"trace_id": trace.id, **r} for r in rows])
        session.commit()
        return trace.id, rows


def expected(rows, lo=None, hi=None) -> dict[str, np.ndarray]:
    rows = sorted(
        (r for r in rows if lo is None or lo <= r["step"] < hi),
        key=lambda r: (r["step"], r["group_idx"], r["sample_idx"]),
    )
    out = {}
    for c in COLUMNS:
        vals = [r[c] for r in rows]
        if c == "latency_s":
            out[c] = np.array([np.nan if v is None else v for v in vals])
        elif c in ("truncated", "validate"):
            out[c] = np.array([bool(v) for v in vals])
        else:
            out[c] = np.array([-1 if v is None else v for v in vals])
    return out


def check(got: dict, want: dict) -> None:
    assert list(got) == COLUMNS
    for c in COLUMNS:
        assert len(got[c]) == len(want[c]), c
        assert np.array_equal(np.asarray(got[c], dtype=np.float64), want[c].astype(np.float64), equal_nan=True), c
    assert got["task_id"].dtype == np.int16 and got["truncated"].dtype == bool
    assert got["latency_s"].dtype == np.float64 and got["step"].dtype == np.int32


def test_ordered_read_matches_rows(stored):
    trace_id, rows = stored
    with get_engine().connect() as conn:
        check(read_columns(conn, "samples", trace_id, COLUMNS, order_by=KEY), expected(rows))
        check(read_columns(conn, "samples", trace_id, COLUMNS, step_range=(3, 9), order_by=KEY), expected(rows, 3, 9))
        # a subset of columns without the key columns still comes back in key order
        part = read_columns(conn, "samples", trace_id, ["response_len", "task_id"], order_by=KEY)
        assert list(part) == ["response_len", "task_id"]
        assert np.array_equal(part["response_len"], expected(rows)["response_len"])
        empty = read_columns(conn, "samples", trace_id, COLUMNS, step_range=(100, 200), order_by=KEY)
        assert all(len(empty[c]) == 0 for c in COLUMNS)


def test_unordered_read_has_the_same_rows(stored):
    trace_id, rows = stored
    with get_engine().connect() as conn:
        got = read_columns(conn, "samples", trace_id, COLUMNS)
    order = np.lexsort((got["sample_idx"], got["group_idx"], got["step"]))
    check({c: np.asarray(got[c])[order] for c in COLUMNS}, expected(rows))


def test_restore_order_sorts_only_when_needed():
    cols = {"step": np.array([1, 1, 0, 2]), "group_idx": np.array([1, 0, 5, 0]), "v": np.array([10, 11, 12, 13])}
    _restore_order(cols, ["step", "group_idx"])
    assert cols["step"].tolist() == [0, 1, 1, 2] and cols["v"].tolist() == [12, 11, 10, 13]
    ordered = {"step": np.array([0, 0, 1]), "v": np.array([3, 1, 2])}
    before = ordered["v"]
    _restore_order(ordered, ["step"])
    assert ordered["v"] is before
