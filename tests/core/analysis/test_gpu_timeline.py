"""GPU timeline analyses: interval unions, HTA-compatible breakdowns, stragglers, export."""

from __future__ import annotations

import gzip
import json
import re
import time

import numpy as np
import orjson
import pytest

from backend.formats.base import ReadResult, Source
from backend.formats.kineto import read_kineto
from core.analysis.gpu_export import chrome_trace_export
from core.analysis.gpu_intervals import dense_codes, union_by_group
from core.analysis.gpu_kinds import GpuKind
from core.analysis.gpu_stragglers import stragglers
from core.analysis.gpu_timeline import (
    hta_compute_mask,
    hta_window_mask,
    idle_breakdown,
    kernel_type_breakdown,
    temporal_breakdown,
)

C, M, N = int(GpuKind.COMPUTE), int(GpuKind.MEMORY), int(GpuKind.COMMUNICATION)


def make_events(rows: list[tuple], names: list[str] | None = None) -> dict:
    """rows: (rank, stream, step, kind, start, dur, launch)."""
    arr = list(zip(*rows)) if rows else [[]] * 7
    return {
        "rank": np.array(arr[0], dtype=np.int32),
        "stream": np.array(arr[1], dtype=np.int32),
        "step": np.array(arr[2], dtype=np.int32),
        "kind": np.array(arr[3], dtype=np.int8),
        "start_us": np.array(arr[4], dtype=np.float64),
        "dur_us": np.array(arr[5], dtype=np.float64),
        "launch_us": np.array(arr[6], dtype=np.float64),
        "name": names if names is not None else [f"k{i}" for i in range(len(rows))],
    }


# --- interval unions -------------------------------------------------------------------


def brute_union(start: np.ndarray, end: np.ndarray) -> int:
    covered = np.zeros(int(end.max()) + 1, dtype=bool)
    for s, e in zip(start.astype(int), end.astype(int)):
        covered[s:e] = True
    return int(covered.sum())


def test_union_by_group_matches_brute_force():
    rng = np.random.default_rng(1)
    n = 400
    codes = rng.integers(0, 5, n)
    start = rng.integers(0, 1000, n).astype(float) + 1.7e15  # epoch-sized timestamps
    end = start + rng.integers(1, 40, n)
    out = union_by_group(codes, start, end, 6)
    for g in range(5):
        sel = codes == g
        s, e = start[sel] - 1.7e15, end[sel] - 1.7e15
        assert out.busy[g] == brute_union(s, e)
        assert out.first_start[g] == start[sel].min()
        assert out.last_end[g] == end[sel].max()
        assert out.n_events[g] == sel.sum()
    assert out.busy[5] == 0 and np.isnan(out.first_start[5]) and out.n_events[5] == 0


def test_union_merges_touching_and_nested_intervals():
    start = np.array([0.0, 10, 12, 30, 31])
    end = np.array([10.0, 20, 14, 35, 32])
    assert union_by_group(np.zeros(5, dtype=np.int64), start, end, 1).busy.tolist() == [25]  # [0,20) + [30,35)
    assert union_by_group(np.zeros(0, dtype=np.int64), np.array([]), np.array([]), 1).busy.tolist() == [0]


def test_dense_codes_pairs():
    codes, (a, b) = dense_codes(np.array([3, -1, 3, 5]), np.array([2, 7, 2, -4]))
    assert codes.tolist() == [1, 0, 1, 2]
    assert a.tolist() == [-1, 3, 5] and b.tolist() == [7, 2, -4]


# --- temporal breakdown ----------------------------------------------------------------


def test_temporal_breakdown_hand_made():
    # rank 0: compute [0,10) and [20,30), NCCL [5,25) overlapping both, memcpy [40,45)
    # -> span 45, union [0,30)+[40,45) = 35, idle 10, compute 20, non-compute 15
    # rank 1: one compute kernel [100,150) -> no idle
    ev = make_events(
        [
            (0, 7, -1, C, 0, 10, -5),
            (0, 7, -1, C, 20, 10, 1),
            (0, 20, -1, N, 5, 20, 2),
            (0, 13, -1, M, 40, 5, 3),
            (1, 7, -1, C, 100, 50, 90),
        ]
    )
    t = temporal_breakdown(ev)
    assert t["rank"].tolist() == [0, 1]
    assert t["kernel_time_us"].tolist() == [45, 50]
    assert t["idle_us"].tolist() == [10, 0]
    assert t["compute_us"].tolist() == [20, 50]
    assert t["non_compute_us"].tolist() == [15, 0]
    assert t["idle_pct"][0] == pytest.approx(100 * 10 / 45)
    assert t["compute_pct"][1] == pytest.approx(100)


def test_temporal_breakdown_drops_the_last_step_like_hta():
    # steps 1 [0,100), 2 [100,200), 3 [200,300): events launched from 200 on are dropped,
    # events launched before the first step are kept, unknown launches are dropped
    ev = make_events(
        [
            (0, 7, -1, C, 5, 5, -10),  # before step 1: kept
            (0, 7, 1, C, 20, 10, 10),
            (0, 7, 2, C, 120, 10, 110),
            (0, 7, 3, C, 205, 50, 200),  # last step: dropped
            (0, 7, -1, C, 400, 5, np.nan),  # no launch: dropped
        ]
    )
    windows = {"0": [[1, 0.0, 100.0], [2, 100.0, 200.0], [3, 200.0, 300.0]]}
    assert hta_window_mask(ev, windows).tolist() == [True, True, True, False, False]
    t = temporal_breakdown(ev, windows)
    assert t["kernel_time_us"][0] == 125  # [5, 130)
    assert t["compute_us"][0] == 25
    # without windows the cut comes from the earliest launch of the highest step
    assert hta_window_mask(ev).tolist() == [True, True, True, False, False]
    # with fewer than two steps HTA keeps everything
    assert hta_window_mask(ev, {"0": [[1, 0.0, 100.0]]}).all()
    raw = temporal_breakdown(ev, windows, hta_compat=False)
    assert raw["kernel_time_us"][0] == 400 + 5 - 5


def test_temporal_breakdown_rounds_sub_microsecond_times_like_hta():
    ev = make_events([(0, 7, -1, C, 0.4, 10.2, 0), (0, 7, -1, C, 20.5, 0.3, 0)])
    t = temporal_breakdown(ev)
    # [ceil 0.4, floor 10.6) = [1, 10); [21, floor 20.8 = 20): HTA counts it as -1 us
    assert t["kernel_time_us"][0] == 20 - 1
    assert t["compute_us"][0] == 9 - 1
    exact = temporal_breakdown(ev, hta_compat=False)
    assert exact["compute_us"][0] == pytest.approx(10.5)


def test_hta_compute_mask_excludes_sync_and_inner_memcpy_names():
    names = ["gemm", "ncclKernel_AllReduce", "Memcpy DtoD", "cudaStreamSync_kernel", "fused_Memcpy_kernel"]
    kind = np.array([C, N, M, C, C])
    assert hta_compute_mask(kind, names).tolist() == [True, False, False, False, False]
    assert hta_compute_mask(kind).tolist() == [True, False, False, True, True]


def parse_reference_table(readme: str) -> dict[str, tuple[float, float]]:
    """file -> (idle %, compute %) from the fixtures README's Kineto table."""
    out = {}
    for line in readme.splitlines():
        m = re.match(r"\|\s*`([^`]+\.json\.gz)`\s*\|(.*)\|\s*$", line)
        if m:
            cells = [c.strip() for c in m.group(2).split("|")]
            out[m.group(1)] = (float(cells[-2]), float(cells[-1]))
    return out


def test_temporal_breakdown_matches_hta_reference_table(shared_fixtures):
    reference = parse_reference_table((shared_fixtures / "README.md").read_text())
    assert len(reference) == 4
    for file_name, (idle_pct, compute_pct) in reference.items():
        path = shared_fixtures / "kineto" / file_name
        result = ReadResult()
        batches = list(read_kineto(Source(file_name, lambda p=path: gzip.open(p)), result))
        ev = {k: np.concatenate([b.columns[k] for b in batches]) for k in batches[0].columns if k != "name"}
        ev["name"] = [n for b in batches for n in b.columns["name"]]
        t = temporal_breakdown(ev, result.info.metadata["kineto"]["steps"])
        assert abs(t["idle_pct"][0] - idle_pct) <= 0.5, file_name
        assert abs(t["compute_pct"][0] - compute_pct) <= 0.5, file_name
        # and without the step windows (as read back from the gpu_events table)
        t2 = temporal_breakdown(ev)
        assert abs(t2["idle_pct"][0] - idle_pct) <= 0.5, file_name


# --- idle breakdown --------------------------------------------------------------------


def test_idle_breakdown_hand_made_gaps():
    # stream 7: [0,10) | host wait 5: launched at 12 after the previous end 10 -> [15,20)
    #           | kernel wait 2: launched at 16 (queued), gap 2 < 30 -> [22,30)
    #           | other 70: launched at 18 (queued), gap 70 >= 30 -> [100,110)
    # stream 20: [0,50) then [40,60) launched early: overlap -> gap -10 counted as kernel wait
    ev = make_events(
        [
            (0, 7, -1, C, 0, 10, -5),
            (0, 7, -1, C, 15, 5, 12),
            (0, 7, -1, C, 22, 8, 16),
            (0, 7, -1, C, 100, 10, 18),
            (0, 20, -1, N, 0, 50, -3),
            (0, 20, -1, N, 40, 20, -2),
            (1, 7, -1, C, 0, 5, np.nan),
            (1, 7, -1, C, 105, 5, np.nan),  # unknown launch: never host wait -> other 100
        ]
    )
    b = idle_breakdown(ev)
    rows = {(r, s): i for i, (r, s) in enumerate(zip(b["rank"].tolist(), b["stream"].tolist()))}
    i = rows[(0, 7)]
    assert (b["host_wait_us"][i], b["kernel_wait_us"][i], b["other_us"][i]) == (5, 2, 70)
    assert b["idle_us"][i] == 77 and b["n_gaps"][i] == 3
    assert b["host_wait_ratio"][i] == pytest.approx(5 / 77)
    i = rows[(0, 20)]
    assert (b["host_wait_us"][i], b["kernel_wait_us"][i], b["other_us"][i]) == (0, -10, 0)
    i = rows[(1, 7)]
    assert (b["host_wait_us"][i], b["other_us"][i]) == (0, 100)
    # a larger threshold turns the 70 us gap into kernel wait
    wide = idle_breakdown(ev, consecutive_kernel_delay_us=100)
    assert wide["kernel_wait_us"][rows[(0, 7)]] == 72


# --- kernel types, stragglers ----------------------------------------------------------


def test_kernel_type_breakdown_and_overlap():
    ev = make_events(
        [(0, 7, 1, C, 0, 10, 0), (0, 20, 1, N, 5, 10, 0), (0, 13, 1, M, 20, 5, 0), (0, 7, 1, C, 30, 2, 0)],
        names=["gemm", "ncclKernel_x", "Memcpy HtoD", "softmax"],
    )
    out = kernel_type_breakdown(ev, top_n=1)
    by_kind = dict(zip(out["by_kind"]["kind"], out["by_kind"]["busy_us"].tolist()))
    assert by_kind == {"compute": 12, "communication": 10, "memory": 5}
    overlap = dict(zip(out["overlap"]["kinds"], out["overlap"]["time_us"].tolist()))
    assert overlap == {"compute": 7, "compute+communication": 5, "communication": 5, "memory": 5}
    top = out["top_kernels"]
    compute_rows = [i for i, k in enumerate(top["kind"]) if k == "compute"]
    assert [top["name"][i] for i in compute_rows] == ["gemm", "others"]
    assert [top["sum_us"][i] for i in compute_rows] == [10, 2]
    assert top["pct_of_kind"][compute_rows[0]] == pytest.approx(100 * 10 / 12)


def test_stragglers_flag_the_rank_with_most_compute():
    rows = []
    for step, base in ((1, 0), (2, 1000)):
        for rank in range(3):
            work = 150 if (rank == 2 and step == 1) else 100
            rows.append((rank, 7, step, C, base, work, base))
            # everyone meets in an all-reduce that ends when the slowest rank is done
            slowest = 150 if step == 1 else 100
            rows.append((rank, 20, step, N, base + work, slowest - work + 20, base))
    rows.append((0, 7, -1, C, 5000, 999, 4000))  # outside steps: ignored
    out = stragglers(make_events(rows))
    pr, ps = out["per_rank"], out["per_step"]
    assert ps["step"].tolist() == [1, 2]
    assert ps["slowest_rank"].tolist()[0] == 2
    assert ps["compute_max_over_median"][0] == pytest.approx(1.5)
    assert ps["n_stragglers"].tolist() == [1, 0]
    flagged = [(s, r) for s, r, f in zip(pr["step"], pr["rank"], pr["is_straggler"]) if f]
    assert flagged == [(1, 2)]
    assert pr["compute_us"].tolist() == [100, 100, 150, 100, 100, 100]
    assert ps["end_spread_us"].tolist() == [0, 0]


# --- Chrome trace export ---------------------------------------------------------------


def test_chrome_trace_export_round_trips_and_filters():
    ev = make_events(
        [
            (0, 7, 1, C, 0, 10, -1),
            (0, 20, 1, N, 5, 10, 1),
            (1, 7, 1, C, 3, 4, np.nan),
            (1, 7, 2, C, 200, 4, 150),
            (2, 7, 2, M, 210, 4, 150),
        ],
        names=["gemm", "ncclKernel_AllReduce", "gemm", "softmax", "Memcpy HtoD"],
    )
    doc = json.loads(orjson.dumps(chrome_trace_export(ev)))
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == 5
    assert {e["name"] for e in doc["traceEvents"] if e["ph"] == "M"} >= {"process_name", "thread_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {(0, 7): "stream 7", (0, 20): "stream 20", (1, 7): "stream 7", (2, 7): "stream 7"}
    first = complete[0]
    assert first == {
        "ph": "X",
        "cat": "compute",
        "name": "gemm",
        "pid": 0,
        "tid": 7,
        "ts": 0.0,
        "dur": 10.0,
        "args": {"step": 1, "kind": "compute", "launch_us": -1.0},
    }

    def count(**kw) -> int:
        return sum(e["ph"] == "X" for e in chrome_trace_export(ev, **kw)["traceEvents"])

    assert count(ranks=[0, 1]) == 4
    assert count(ranks=2) == 1
    assert count(step=2) == 2
    assert count(window_us=(4, 8)) == 3
    assert count(name_contains="GEMM") == 2
    assert count(ranks=1, step=1) == 1
    capped = chrome_trace_export(ev, max_events=2)
    assert sum(e["ph"] == "X" for e in capped["traceEvents"]) == 2
    assert capped["otherData"]["dropped_events"] == 3


def test_chrome_trace_export_of_a_fixture_is_valid_json(shared_fixtures):
    path = shared_fixtures / "kineto" / "sampled_rank-0.json.gz"
    batches = list(read_kineto(Source(path.name, lambda: gzip.open(path)), ReadResult()))
    ev = batches[0].columns
    doc = json.loads(orjson.dumps(chrome_trace_export(ev, step=551)))
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == int((ev["step"] == 551).sum())


# --- scale -----------------------------------------------------------------------------


def test_breakdowns_are_fast_on_a_million_events():
    rng = np.random.default_rng(3)
    n, ranks = 1_000_000, 8
    rank = np.repeat(np.arange(ranks), n // ranks)
    stream = rng.choice([7, 13, 20], n)
    dur = rng.integers(1, 50, n).astype(float)
    start = np.empty(n)
    for r in range(ranks):  # per rank a timeline with small gaps
        sel = rank == r
        start[sel] = np.cumsum(dur[sel] + rng.integers(0, 5, sel.sum())) + 1.7e15
    ev = {
        "rank": rank,
        "stream": stream,
        "step": np.repeat(np.arange(10), n // 10),
        "kind": rng.choice([C, N, M], n),
        "start_us": start,
        "dur_us": dur,
        "launch_us": start - 3,
    }
    t0 = time.perf_counter()
    t = temporal_breakdown(ev)
    b = idle_breakdown(ev)
    elapsed = time.perf_counter() - t0
    assert len(t["rank"]) == ranks and len(b["rank"]) == ranks * 3
    assert elapsed < 10, elapsed  # ~0.3 s on the dev machine
