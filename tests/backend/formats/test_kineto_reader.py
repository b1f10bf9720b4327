"""Kineto reader: counts on the real fixtures, rank detection, steps, kinds, errors."""

from __future__ import annotations

import gzip
import io
import json

import numpy as np
import orjson
import pytest

from backend.formats import kineto
from backend.formats.base import InputError, ReadResult, Source
from backend.formats.kineto import looks_like_kineto, read_kineto
from backend.formats.kineto_events import EVENTS_DIR_STATE, load_events
from core.analysis.gpu_kinds import GpuKind
from tests.conftest import SHARED_FIXTURES
from tests.format_writers import kineto_rank_trace

FIXTURE_FILES = [
    "sampled_rank-0.json.gz",
    "sampled_rank-1.json.gz",
    "ns_resolution_rank-0.json.gz",
    "queue_length_rank-0.json.gz",
]


def source_of(doc: dict | bytes, name: str = "trace.json") -> Source:
    raw = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return Source(name, lambda: io.BytesIO(raw), len(raw))


def read_all(sources: list[Source], result: ReadResult | None = None) -> tuple[dict, ReadResult]:
    result = ReadResult() if result is None else result
    parts: dict[str, list] = {}
    for src in sources:
        for batch in read_kineto(src, result):
            assert batch.table == "gpu_events"
            for key, values in batch.columns.items():
                parts.setdefault(key, []).append(values)
    cols = {k: ([x for p in v for x in p] if k == "name" else np.concatenate(v)) for k, v in parts.items()}
    return cols, result


# --- real fixtures -------------------------------------------------------------------


@pytest.mark.parametrize("file_name", FIXTURE_FILES)
def test_fixture_counts_match_raw_json(shared_fixtures, file_name):
    path = shared_fixtures / "kineto" / file_name
    raw = json.loads(gzip.open(path).read())  # independent parse with the stdlib
    gpu = [e for e in raw["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    n_memory = sum(e["cat"] != "kernel" for e in gpu)
    n_nccl = sum(e["cat"] == "kernel" and e["name"].startswith("nccl") and "Kernel" in e["name"] for e in gpu)

    cols, result = read_all([Source(file_name, lambda: gzip.open(path))])

    assert len(cols["rank"]) == len(gpu)
    assert set(cols) == {"rank", "stream", "step", "kind", "name", "start_us", "dur_us", "launch_us"}
    assert int((cols["kind"] == GpuKind.MEMORY).sum()) == n_memory
    assert int((cols["kind"] == GpuKind.COMMUNICATION).sum()) == n_nccl
    assert sorted(cols["stream"].tolist()) == sorted(e["args"]["stream"] for e in gpu)
    assert cols["dur_us"].sum() == pytest.approx(sum(e["dur"] for e in gpu))
    assert np.all(cols["rank"] == raw["distributedInfo"]["rank"])
    steps = sorted(
        int(e["name"].split("#")[1]) for e in raw["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    )
    kin = result.info.metadata["kineto"]
    assert [s[0] for s in kin["steps"][str(raw["distributedInfo"]["rank"])]] == steps
    assert set(np.unique(cols["step"])) <= set(steps) | {-1}


def test_fixture_ranks_and_metadata_merge(shared_fixtures):
    folder = shared_fixtures / "kineto"
    sources = [Source(n, lambda n=n: gzip.open(folder / n)) for n in FIXTURE_FILES[:2]]
    cols, result = read_all(sources)
    kin = result.info.metadata["kineto"]
    assert kin["ranks"] == [0, 1]
    assert kin["files"] == {"0": ["sampled_rank-0.json.gz"], "1": ["sampled_rank-1.json.gz"]}
    assert kin["devices"] == {"0": [0], "1": [1]}
    assert kin["world_size"] == 128
    assert kin["gpu_events"]["0"] + kin["gpu_events"]["1"] == len(cols["rank"])
    # a step window per ProfilerStep, start < end
    assert all(a < b for _, a, b in kin["steps"]["1"])


def test_fixture_launch_matched_through_correlation(shared_fixtures):
    # ns_resolution's External ids differ from correlation ids: matching must use correlation
    path = shared_fixtures / "kineto" / "ns_resolution_rank-0.json.gz"
    raw = json.loads(gzip.open(path).read())
    runtime = {e["args"]["correlation"]: e["ts"] for e in raw["traceEvents"] if e.get("cat") == "cuda_runtime"}
    gpu = [e for e in raw["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    expected = np.array([runtime.get(e["args"]["correlation"], np.nan) for e in gpu])
    cols, _ = read_all([Source(path.name, lambda: gzip.open(path))])
    np.testing.assert_array_equal(cols["launch_us"], expected)


# --- hand-made traces ----------------------------------------------------------------


def kernel(name, ts, dur, corr, stream=7, cat="kernel", ext=None, **extra):
    args = {"stream": stream, "device": 0, "correlation": corr}
    if ext is not None:
        args["External id"] = ext
    if corr is None:
        del args["correlation"]
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args, **extra}


def launch(ts, corr, ext=None, dur=2):
    args = {"correlation": corr, "cbid": 211}
    if ext is not None:
        args["External id"] = ext
    if corr is None:
        del args["correlation"]
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 10,
        "tid": 10,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def step_mark(n, ts, dur):
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{n}",
        "pid": 10,
        "tid": 10,
        "ts": ts,
        "dur": dur,
    }


def tiny_trace() -> dict:
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": 2, "world_size": 4},
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
            step_mark(5, 100, 100),  # [100, 200)
            step_mark(6, 200, 100),  # [200, 300)
            launch(50, 1),  # before any step
            launch(100, 2),  # exactly at step 5's start -> 5
            launch(199.5, 3),  # last instant of step 5 -> 5 (its kernel runs in step 6's time)
            launch(200, 4),  # step 6's start -> 6
            launch(300, 5),  # step 6's end is exclusive -> -1
            launch(250, None, ext=77),  # no correlation: matched by External id -> 6
            kernel("void gemm_kernel()", 60, 10, 1),
            kernel("void gemm_kernel()", 110, 10, 2),
            kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)", 230, 30, 3, stream=20),
            kernel("Memcpy HtoD (Pinned -> Device)", 205, 5, 4, stream=13, cat="gpu_memcpy"),
            kernel("Memset (Device)", 305, 1, 5, cat="gpu_memset"),
            kernel("void softmax_kernel()", 260, 4, None, ext=77),
            kernel("void orphan_kernel()", 270, 4, 999),  # launch not in the trace
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "ProfilerStep#6",
                "pid": 0,
                "tid": 7,
                "ts": 201,
                "dur": 90,
            },
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 60, "bp": "e"},
        ],
    }


def test_step_assignment_launch_and_kind_on_tiny_trace():
    cols, result = read_all([source_of(tiny_trace())])
    names = cols["name"]
    by_name = {n: i for i, n in enumerate(names)}
    assert len(names) == 7  # gpu_user_annotation and flow events are not GPU work
    expected_step = {
        "void gemm_kernel()": None,  # two of them, checked below
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)": 5,
        "Memcpy HtoD (Pinned -> Device)": 6,
        "Memset (Device)": -1,
        "void softmax_kernel()": 6,
        "void orphan_kernel()": -1,
    }
    for name, step in expected_step.items():
        if step is not None:
            assert cols["step"][by_name[name]] == step, name
    gemm = [i for i, n in enumerate(names) if n == "void gemm_kernel()"]
    assert cols["step"][gemm].tolist() == [-1, 5]
    assert cols["launch_us"][gemm].tolist() == [50.0, 100.0]
    assert cols["launch_us"][by_name["void softmax_kernel()"]] == 250.0
    assert np.isnan(cols["launch_us"][by_name["void orphan_kernel()"]])
    assert np.all(cols["rank"] == 2)
    kinds = {n: GpuKind(int(k)) for n, k in zip(names, cols["kind"])}
    assert kinds["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)"] == GpuKind.COMMUNICATION
    assert kinds["Memcpy HtoD (Pinned -> Device)"] == GpuKind.MEMORY
    assert kinds["Memset (Device)"] == GpuKind.MEMORY
    assert kinds["void gemm_kernel()"] == GpuKind.COMPUTE
    assert cols["stream"][by_name["Memcpy HtoD (Pinned -> Device)"]] == 13
    kin = result.info.metadata["kineto"]
    assert kin["steps"] == {"2": [[5, 100.0, 200.0], [6, 200.0, 300.0]]}
    assert kin["streams"] == {"2": [7, 13, 20]}


def test_rank_from_file_name_when_distributed_info_missing():
    doc = tiny_trace()
    del doc["distributedInfo"]
    cols, _ = read_all([source_of(doc, "job/worker_rank-3.pt.trace.json")])
    assert np.all(cols["rank"] == 3)
    cols, result = read_all([source_of(doc, "job/trace.json")])
    assert np.all(cols["rank"] == 0)
    assert result.info.metadata["kineto"]["ranks"] == [0]


def test_stream_falls_back_to_tid_and_batches_split(monkeypatch):
    doc = tiny_trace()
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            del e["args"]["stream"]
    whole, _ = read_all([source_of(doc)])
    assert whole["stream"][whole["name"].index("void softmax_kernel()")] == 7
    monkeypatch.setattr(kineto, "BATCH_ROWS", 3)
    batches = list(read_kineto(source_of(doc), ReadResult()))
    assert [len(b) for b in batches] == [3, 3, 1]
    np.testing.assert_array_equal(np.concatenate([b.columns["start_us"] for b in batches]), whole["start_us"])


def test_no_steps_and_no_gpu_events_are_reported_not_fatal():
    doc = {"traceEvents": [launch(1, 1)]}
    cols, result = read_all([source_of(doc, "cpu_only.json")])
    assert cols == {}
    assert any("no GPU events" in s for s in result.skipped)
    assert any("no ProfilerStep" in s for s in result.skipped)


@pytest.mark.parametrize(
    "raw, field, line",
    [
        (b'{"traceEvents": [\n{"cat": "kernel", "ts": 1,\n "dur": }]}', None, 3),
        (b'{"schemaVersion": 1}', "traceEvents", None),
        (b'{"traceEvents": {"a": 1}}', "traceEvents", None),
        (b"[1, 2]", "traceEvents", None),
        (b'{"traceEvents": [{"cat": "cpu_op"}, {"cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}', "ts", 2),
        (b'{"traceEvents": [{"cat": "kernel", "name": "k", "dur": 1}]}', "ts", 1),
        (b'{"traceEvents": [{"cat": "kernel", "name": "k", "ts": 1, "dur": 1}, 7]}', "traceEvents", 2),
        (b'{"distributedInfo": {"rank": "zero"}, "traceEvents": []}', "distributedInfo.rank", None),
        # impossible events: refused, not stored as given, as 0 or as stream -1
        (b'{"traceEvents": [{"cat": "cpu_op"}, {"cat": "kernel", "name": "k", "ts": 1, "dur": -5}]}', "dur", 2),
        (b'{"traceEvents": [{"cat": "kernel", "name": "k", "ts": 1, "dur": 1}, {"cat": "kernel", "ts": 2}]}', "dur", 2),
        (
            b'{"traceEvents": [{"cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"stream": "s7"}}]}',
            "args.stream",
            1,
        ),
        (
            b'{"traceEvents": [{"cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"stream": 1099511627776}}]}',
            "stream",
            1,
        ),
        (b'{"traceEvents": [{"cat": "kernel", "name": "k", "ts": 1e999, "dur": 1}]}', "ts", 1),
    ],
)
@pytest.mark.parametrize("chunk", [kineto.CHUNK_EVENTS, 1])
def test_bad_input_names_file_field_and_record(raw, field, line, chunk, monkeypatch):
    monkeypatch.setattr(kineto, "CHUNK_EVENTS", chunk)  # 1: the bad event is in a later chunk
    with pytest.raises(InputError) as err:
        list(read_kineto(source_of(raw, "rank0.json"), ReadResult()))
    assert err.value.file == "rank0.json"
    assert err.value.field == field
    assert err.value.line == line
    assert "rank0.json" in str(err.value)


def kept_events(source: Source, tmp_path) -> tuple[dict, ReadResult, dict]:
    """GPU columns, the read result and the kept events (label codes resolved to labels)."""
    result = ReadResult()
    result.state[EVENTS_DIR_STATE] = str(tmp_path)
    cols, _ = read_all([source], result)
    events = load_events(tmp_path)
    assert events is not None
    kept = {c: getattr(events, c) for c in events.COLUMNS}
    for c in ("pid", "tid", "flow_id"):  # label numbering depends on the order columns meet them
        kept[c] = [events.labels[-2 - v] if -1 > v >= -1 - len(events.labels) else v for v in kept[c].tolist()]
    kept["strings"] = (events.names, events.cats, events.meta)
    return cols, result, kept


@pytest.mark.parametrize("chunk", [1, 7])
def test_decoding_in_chunks_gives_the_whole_file(chunk, monkeypatch, tmp_path):
    """A file is decoded a chunk of events at a time; any chunk size gives the rows,
    metadata and kept events of one chunk holding the whole file."""
    docs = [tiny_trace(), orjson.loads(kineto_rank_trace(1, steps=2, ops_per_step=15))]
    lenient = tiny_trace()
    lenient["traceEvents"][-3]["args"]["stream"] = "7"  # the lenient decode, from a later chunk on
    lenient["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "op", "pid": "main", "tid": "t", "ts": 1})
    docs.append(lenient)
    shared = SHARED_FIXTURES / "kineto" / "ns_resolution_rank-0.json.gz"
    if shared.exists():  # string pids and tids, Kineto's own writer
        docs.append(orjson.loads(gzip.decompress(shared.read_bytes())))
    for i, doc in enumerate(docs):
        whole = kept_events(source_of(doc), tmp_path / f"whole-{i}")
        large = len(doc["traceEvents"]) > 10_000  # the fixture: some 70 chunks, not 70,000
        monkeypatch.setattr(kineto, "CHUNK_EVENTS", 1_000 if large else chunk)
        chunked = kept_events(source_of(doc), tmp_path / f"chunked-{i}")
        monkeypatch.undo()
        assert whole[0].keys() == chunked[0].keys() and whole[0]
        for key in whole[0]:
            np.testing.assert_array_equal(np.asarray(whole[0][key]), np.asarray(chunked[0][key]), err_msg=key)
        assert whole[1].info.metadata == chunked[1].info.metadata
        assert whole[1].skipped == chunked[1].skipped
        for key in whole[2]:
            if key == "strings":
                assert whole[2][key] == chunked[2][key]
            else:
                np.testing.assert_array_equal(np.asarray(whole[2][key]), np.asarray(chunked[2][key]), err_msg=key)


def test_lenient_values_are_converted():
    doc = tiny_trace()
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] == "void gemm_kernel()":
            e["args"]["stream"] = "7"  # strings where ints are expected
    cols, _ = read_all([source_of(doc)])
    assert len(cols["name"]) == 7
    assert cols["stream"][cols["name"].index("void gemm_kernel()")] == 7


def test_detection():
    head = b'{\n  "schemaVersion": 1,\n  "deviceProperties": ['
    assert looks_like_kineto(head, "rank-0.json")
    assert looks_like_kineto(b'{"traceEvents": [', "x/trace.pt.trace.json.gz")
    assert not looks_like_kineto(head, "rank-0.jsonl")
    assert not looks_like_kineto(b'{"0": {"input": [1], "output": [2]}}', "compact.json")
    assert not looks_like_kineto(b'{"step": 1, "data": {}}\n', "metrics.json")
