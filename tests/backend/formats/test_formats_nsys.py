"""Nsight Systems SQLite exports: the same GPU event store and breakdowns as Kineto for the
same events, ranks and times, the schema's details, and bad files named precisely."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from backend.formats import detect_format, read_sources
from backend.formats.base import InputError, ReadResult, Source
from backend.formats.kineto_events import EVENTS_DIR_STATE, load_events
from core.analysis.gpu_kinds import GpuKind
from core.analysis.gpu_report import gpu_timeline_report
from tests.nsys_writer import (
    COPY_NAME,
    SESSION_START_NS,
    SET_NAME,
    kineto_doc,
    kineto_us,
    synthetic_activity,
    write_nsys,
)


def file_source(path: Path, name: str | None = None) -> Source:
    return Source(name or path.name, lambda: path.open("rb"), path.stat().st_size)


def bytes_source(raw: bytes, name: str) -> Source:
    return Source(name, lambda: io.BytesIO(raw), len(raw))


def read_gpu(sources: list[Source], kept: Path) -> tuple[dict, ReadResult]:
    """The gpu_events columns of an upload, and its read result (kept events in `kept`)."""
    result = ReadResult()
    result.state[EVENTS_DIR_STATE] = str(kept)
    parts: dict[str, list] = {}
    for batch in read_sources(sources, None, result):
        assert batch.table == "gpu_events"
        for key, values in batch.columns.items():
            parts.setdefault(key, []).append(values)
    cols = {k: ([x for p in v for x in p] if k == "name" else np.concatenate(v)) for k, v in parts.items()}
    return cols, result


def report(cols: dict, result: ReadResult, kept: Path) -> dict:
    windows = result.info.metadata["kineto"]["steps"]
    return gpu_timeline_report(cols, cols["name"], windows, trace_events=load_events(kept))


def by_rank_start(cols: dict) -> dict:
    order = np.lexsort((cols["start_us"], cols["rank"]))
    return {
        k: (np.asarray(v, dtype=object)[order].tolist() if k == "name" else np.asarray(v)[order])
        for k, v in cols.items()
    }


def assert_rows_close(a: list[dict], b: list[dict], what: str) -> None:
    assert len(a) == len(b) and a, what
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys(), what
        for key in ra:
            if isinstance(ra[key], float) or isinstance(rb[key], float):
                assert ra[key] == pytest.approx(rb[key], rel=1e-9, abs=1e-9, nan_ok=True), (what, key, ra, rb)
            else:
                assert ra[key] == rb[key], (what, key, ra, rb)


@pytest.fixture()
def twins(tmp_path):
    """Two ranks' activity as Kineto files, nsys files per rank, and one nsys file of both."""
    acts = [synthetic_activity(r, steps=4, ops_per_step=24) for r in (0, 1)]
    kineto = [bytes_source(kineto_doc(a), f"kineto/rank-{a.rank}.json") for a in acts]
    per_rank = [file_source(write_nsys(tmp_path / f"worker_rank-{a.rank}.sqlite", [a])) for a in acts]
    both = file_source(write_nsys(tmp_path / "node0.sqlite", acts))
    return acts, kineto, per_rank, both


@pytest.mark.parametrize("layout", ["one file per rank", "one file, several devices"])
def test_same_events_and_breakdowns_as_kineto(twins, tmp_path, layout):
    acts, kineto, per_rank, both = twins
    k_cols, k_result = read_gpu(kineto, tmp_path / "k")
    n_cols, n_result = read_gpu(per_rank if layout == "one file per rank" else [both], tmp_path / "n")
    k, n = by_rank_start(k_cols), by_rank_start(n_cols)
    assert len(n["start_us"]) == sum(len(a.ops) for a in acts)
    for key in k:
        if key == "name":
            assert n[key] == k[key]
        else:
            np.testing.assert_array_equal(n[key], k[key], err_msg=key)
    # step windows: Kineto's end is ts + dur in floating point, nsys' its own end
    n_steps, k_steps = n_result.info.metadata["kineto"]["steps"], k_result.info.metadata["kineto"]["steps"]
    assert n_steps.keys() == k_steps.keys() == {"0", "1"}
    for r in n_steps:
        assert [w[:2] for w in n_steps[r]] == [w[:2] for w in k_steps[r]]
        assert [w[2] for w in n_steps[r]] == pytest.approx([w[2] for w in k_steps[r]], abs=0.05)  # one ulp at 1.9e14 us
    nr, kr = report(n_cols, n_result, tmp_path / "n"), report(k_cols, k_result, tmp_path / "k")
    for table in ("temporal", "idle", "comm_comp_overlap", "launch_stats", "memory_bw", "user_annotations"):
        assert_rows_close(nr[table], kr[table], table)
    for table in ("temporal", "idle"):
        assert_rows_close(nr["per_step"][table], kr["per_step"][table], f"per_step {table}")
    assert nr["kernel_breakdown"] == kr["kernel_breakdown"]
    assert nr["queue_length"] == kr["queue_length"]
    assert nr["cpu_side"] and nr["ranks"] == [0, 1]
    # the breakdowns say something: idle time and every kind of GPU work
    assert all(row["idle_us"] > 0 and row["compute_us"] > 0 for row in nr["temporal"])
    for cause in ("host_wait_us", "kernel_wait_us", "other_us"):
        assert any(row[cause] > 0 for row in nr["idle"]), cause
    assert set(GpuKind(int(x)) for x in n["kind"]) == set(GpuKind)


def test_events_steps_launches_and_names(twins, tmp_path):
    acts, _, per_rank, _ = twins
    cols, result = read_gpu(per_rank[:1], tmp_path / "kept")
    act = acts[0]
    ops = sorted(act.ops, key=lambda o: o.start)
    assert cols["start_us"].tolist() == [kineto_us(o.start) for o in ops]
    assert cols["launch_us"].tolist() == [kineto_us(o.launch) for o in ops]
    steps = [(int(t.split("#")[1]), s, e) for t, s, e in act.ranges if t.startswith("ProfilerStep")]
    expect = [next((n for n, s, e in steps if s <= o.launch < e), -1) for o in ops]
    assert cols["step"].tolist() == expect
    names = {o.kind: n for o, n in zip(ops, cols["name"]) if o.kind != "kernel"}
    assert names == {"memcpy": COPY_NAME, "memset": SET_NAME}
    assert np.all(cols["rank"] == 0)  # worker_rank-0.sqlite
    meta = result.info.metadata
    assert meta["nsys"]["files"]["worker_rank-0.sqlite"]["session_start_utc_ns"] == SESSION_START_NS
    assert meta["nsys"]["files"]["worker_rank-0.sqlite"]["gpus"] == {"0": "NVIDIA H100 80GB HBM3"}
    events = load_events(tmp_path / "kept")
    runtime = {events.names[i] for i in events.name[events.cat == events.cat_id("cuda_runtime")]}
    assert runtime == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"}  # the _v7000 suffix dropped
    annotations = {events.names[i] for i in events.name[events.cat == events.cat_id("user_annotation")]}
    assert annotations == {"forward", *(f"ProfilerStep#{n}" for n, _, _ in steps)}  # text and textId alike


def test_ranks_by_name_else_in_file_order_and_correlation_per_process(tmp_path):
    """Two processes in one file both number correlations from 1: each kernel still gets
    its own process's launch. Unnamed files take the next free ranks."""
    a, b = synthetic_activity(0, steps=2, ops_per_step=6), synthetic_activity(1, steps=2, ops_per_step=6)
    b.device = 0  # both processes see their GPU as device 0 (CUDA_VISIBLE_DEVICES)
    assert {o.corr for o in a.ops} == {o.corr for o in b.ops}
    cols, result = read_gpu([file_source(write_nsys(tmp_path / "x.sqlite", [a, b]))], tmp_path / "k1")
    assert result.info.metadata["kineto"]["ranks"] == [0, 1]
    for rank, act in ((0, a), (1, b)):
        sel = cols["rank"] == rank
        assert sorted(cols["launch_us"][sel].tolist()) == sorted(kineto_us(o.launch) for o in act.ops)
    files = [file_source(write_nsys(tmp_path / f"w{i}.sqlite", [synthetic_activity(i, 1, 3)])) for i in range(2)]
    files.append(file_source(write_nsys(tmp_path / "rank0.sqlite", [synthetic_activity(2, 1, 3)])))
    _, result = read_gpu(files, tmp_path / "k2")  # read as rank0, w0, w1
    assert result.info.metadata["kineto"]["files"] == {"0": ["rank0.sqlite"], "1": ["w0.sqlite"], "2": ["w1.sqlite"]}


def test_time_bases(tmp_path):
    """Session-relative times count from the session start; UTC times (ts-normalize) stay."""
    act = synthetic_activity(0, steps=1, ops_per_step=3)
    cols, _ = read_gpu([file_source(write_nsys(tmp_path / "rel.sqlite", [act]))], tmp_path / "k1")
    first = min(o.start for o in act.ops)
    assert cols["start_us"][0] == kineto_us(first)
    for op in act.ops:  # the same instants in UTC, as `nsys export --ts-normalize=true` writes them
        op.start, op.end, op.launch = (v + SESSION_START_NS for v in (op.start, op.end, op.launch))
    act.ranges = [(t, s + SESSION_START_NS, e + SESSION_START_NS) for t, s, e in act.ranges]
    cols_utc, _ = read_gpu(
        [file_source(write_nsys(tmp_path / "utc.sqlite", [act], session_start=None))], tmp_path / "k2"
    )
    np.testing.assert_array_equal(cols_utc["start_us"], cols["start_us"])


def test_detection_and_reports_that_are_not_exports(tmp_path):
    path = write_nsys(tmp_path / "profile.sqlite", [synthetic_activity(0, 1, 2)])
    assert detect_format(file_source(path)) == "nsys-sqlite"
    assert detect_format(file_source(path, "odd-name.db")) == "nsys-sqlite"  # by content
    assert detect_format(bytes_source(b"\x00NSYS", "worker_process_1.nsys-rep")) is None
    with pytest.raises(InputError) as err:
        list(read_sources([bytes_source(b"\x00NSYS", "worker_process_1.nsys-rep")], None, ReadResult()))
    assert "nsys export --type sqlite" in str(err.value)


def _broken(tmp_path: Path, sql: str, table_sql: str | None = None) -> Path:
    path = write_nsys(tmp_path / "bad.sqlite", [synthetic_activity(0, 1, 6)])
    db = sqlite3.connect(path)
    if table_sql:
        db.executescript(table_sql)
    db.execute(sql)
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize(
    "sql, table_sql, field, line",
    [
        (
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5 WHERE rowid = 2",
            None,
            "CUPTI_ACTIVITY_KIND_KERNEL.end",
            2,
        ),
        (
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 3",
            None,
            "CUPTI_ACTIVITY_KIND_KERNEL.start",
            3,
        ),
        (
            "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET streamId = NULL WHERE rowid = 1",
            # written by something else than nsys, without the NOT NULL constraints
            "CREATE TABLE m AS SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY; DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY;"
            "ALTER TABLE m RENAME TO CUPTI_ACTIVITY_KIND_MEMCPY;",
            "CUPTI_ACTIVITY_KIND_MEMCPY.streamId",
            1,
        ),
        (
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999 WHERE rowid = 1",
            None,
            "CUPTI_ACTIVITY_KIND_KERNEL.demangledName",
            1,
        ),
        (
            "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 2.5 WHERE rowid = 4",
            None,
            "CUPTI_ACTIVITY_KIND_RUNTIME.correlationId",
            4,
        ),
        ("UPDATE NVTX_EVENTS SET end = 0 WHERE rowid = 1", None, "NVTX_EVENTS.end", 1),
        (
            "ALTER TABLE CUPTI_ACTIVITY_KIND_MEMSET DROP COLUMN streamId",
            None,
            "CUPTI_ACTIVITY_KIND_MEMSET.streamId",
            None,
        ),
    ],
)
def test_bad_rows_name_file_row_and_column(tmp_path, sql, table_sql, field, line):
    path = _broken(tmp_path, sql, table_sql)
    with pytest.raises(InputError) as err:
        read_gpu([file_source(path, "run/rank0.sqlite")], tmp_path / "k")
    assert (err.value.file, err.value.field, err.value.line) == ("run/rank0.sqlite", field, line)
    assert "run/rank0.sqlite" in str(err.value)


def test_other_sqlite_files_and_corrupt_exports_are_refused(tmp_path):
    other = tmp_path / "app.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        read_gpu([file_source(other)], tmp_path / "k1")
    good = write_nsys(tmp_path / "rank0.sqlite", [synthetic_activity(0, 2, 12)]).read_bytes()
    cut = good[:100] + b"\x00" * 4000 + good[4100:]  # the page holding the schema overwritten
    with pytest.raises(InputError) as err:
        read_gpu([bytes_source(cut, "rank0.sqlite")], tmp_path / "k2")
    assert err.value.file == "rank0.sqlite"


def test_no_gpu_work_is_a_note_not_an_error(tmp_path):
    act = synthetic_activity(0, 1, 2)
    path = write_nsys(tmp_path / "cpu_only.sqlite", [act])
    db = sqlite3.connect(path)
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        db.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_{table}")
    db.commit()
    db.close()
    result = ReadResult()
    assert list(read_sources([file_source(path)], None, result)) == []
    assert any("no GPU events" in s for s in result.skipped)
