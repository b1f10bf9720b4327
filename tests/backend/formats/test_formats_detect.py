"""Format detection, the registry and the upload-level read loop."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from backend.formats import FORMATS, detect_format, read_sources, upload_format
from backend.formats.archive import expand_upload
from backend.formats.base import InputError, ReadResult, Source
from core.analysis.tables import TABLE_CLASSES
from tests import format_writers as fw
from tests.nsys_writer import synthetic_activity, write_nsys
from tests.rollout_writer import dump_bytes, dump_rows, trained_tokenizer

PACKED = {
    "step": 0,
    "rank": 0,
    "dp_rank": 0,
    "tp_rank": 0,
    "local_index": 0,
    "input": 5,
    "output": [1, 2],
    "n_sampling": 2,
    "validate": False,
}
REWARD = {"step": 0, "rank": 0, "tp_rank": 0, "dp_rank": 0, "batch_size": 2, "reward_time_s": 1.5}
MULTI = {
    "step": 0,
    "prompt_len": 5,
    "prompt_group_id": 0,
    "sample_id": 0,
    "final_response_len": 3,
    "turns": [],
    "tool_calls": [],
}
NATIVE = {"step": 0, "group_idx": 0, "sample_idx": 0, "prompt_len": 5, "response_len": 3}


def write(path: Path, data: bytes | str) -> Source:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return Source(path.name, lambda: path.open("rb"), path.stat().st_size)


def line(obj: dict) -> bytes:
    return orjson.dumps(obj) + b"\n"


KINETO = {
    "schemaVersion": 1,
    "distributedInfo": {"rank": 0, "world_size": 1},
    "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 5, "dur": 20},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 8,
            "dur": 1,
            "args": {"correlation": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "void gemm_kernel()",
            "pid": 0,
            "tid": 7,
            "ts": 10,
            "dur": 5,
            "args": {"stream": 7, "device": 0, "correlation": 1},
        },
    ],
}


def _parquet(path: Path) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {k: [v, v] for k, v in NATIVE.items()}
    rows["sample_idx"] = [0, 1]  # two samples of one group (a duplicate key is refused)
    pq.write_table(pa.table(rows), path)
    return path.read_bytes()


DAPO = {
    "workload_step": 0,
    "trainer_step": 1,
    "gen_batch_index": 0,
    "prompt_count": 1,
    "n_sampling": 2,
    "train_batch_size": 1,
    "num_prompt_in_batch_before": 0,
    "kept_prompt_count": 1,
    "used_prompt_count": 1,
    "kept_prompt_indices": [0],
    "used_prompt_indices": [0],
}
# Files a format's example is read beside (a DAPO file alone is no trace).
COMPANIONS = {
    "dapo-filter": [("packed_lengths_step_0.jsonl", line(PACKED))],
    "tokenizer": [("1.jsonl", dump_bytes(dump_rows(1, groups=1, n=2)))],
}
# a dumped sample's rows: itself, its text, its three reward_extra_infos values
DUMPED = {"samples": 2, "sample_texts": 2, "sample_extras": 6}

# One small file per registered format, named as users name them:
# (file name, content from the path, rows read per table).
EXAMPLES = {
    "polytrace-packed": ("packed_lengths_step_0.jsonl", lambda p: line(PACKED), {"samples": 2}),
    "polytrace-reward": ("reward_timings_step_0.jsonl", lambda p: line(REWARD), {"rank_timings": 1}),
    "polytrace-multiturn": ("multiturn_workload_step_0.jsonl", lambda p: line(MULTI), {"samples": 1}),
    "polytrace-compact": (
        "run.json",
        lambda p: (
            b'{"0": {"input": [112, 157], "output": [[450, 453, 396], [491, 435, 165]]}, "1": {"input": [130, 98], "output": [812, 95]}}'
        ),
        {"samples": 8},
    ),
    "verl-jsonl": ("metrics.jsonl", lambda p: line({"step": 4, "data": {"timing_s/gen": 3.0}}), {"steps": 1}),
    "verl-console": (
        "stdout",
        lambda p: b"(TaskRunner pid=1) step:1 - timing_s/gen:3.000 - actor/entropy:0.500\n",
        {"steps": 1},
    ),
    "native-csv": (
        "samples.csv",
        lambda p: "step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,5,1\n0,0,1,5,2\n",
        {"samples": 2},
    ),
    "native-jsonl": ("samples.jsonl", lambda p: line(NATIVE) + line({**NATIVE, "sample_idx": 1}), {"samples": 2}),
    "native-parquet": ("samples.parquet", _parquet, {"samples": 2}),
    "kineto": ("rank-0.json", lambda p: orjson.dumps(KINETO), {"gpu_events": 1}),
    # marks for the packed-length samples: read with the packed file beside it (COMPANIONS)
    "dapo-filter": ("dapo_filter_indices.jsonl", lambda p: line(DAPO), {"samples": 2}),
    "tensorboard": ("events.out.tfevents.1700000000.host.1.0", lambda p: fw.tensorboard_bytes(2), {"steps": 2}),
    "wandb-csv": ("history.csv", lambda p: fw.wandb_csv(2), {"steps": 2}),
    "wandb-parquet": ("history.parquet", lambda p: fw.wandb_parquet(2), {"steps": 2}),
    "areal-perf": ("traces-r0.jsonl", lambda p: fw.areal_perf(0, 2), {"rank_timings": 4}),
    "areal-sessions": (
        "sessions-r0.jsonl",
        lambda p: fw.areal_sessions(0, 1, 2),
        {"samples": 2, "turns": 4, "tool_calls": 2},
    ),
    "otlp-json": ("traces.json", lambda p: orjson.dumps(fw.otlp_request(unstepped=False)), {"rank_timings": 4}),
    "verl-rollouts": ("12.jsonl", lambda p: dump_bytes(dump_rows(12, groups=1, n=2)), DUMPED),
    # read with a dump beside it (COMPANIONS): a tokenizer alone is no trace
    "tokenizer": ("tokenizer.json", lambda p: trained_tokenizer(["one two three"], vocab_size=260).encode(), DUMPED),
    "nsys-sqlite": (
        "profile.sqlite",
        lambda p: write_nsys(p.with_suffix(".export"), [synthetic_activity(0, 1, 3)]).read_bytes(),
        {"gpu_events": 3},
    ),
}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_registered_format_detects_and_reads_its_own_files(tmp_path, fmt):
    """A format in FORMATS is reachable: its own kind of file is detected as it (no
    forced format) and read into rows of the trace tables."""
    assert fmt in EXAMPLES, f"format {fmt!r} is registered without an example file here"
    name, content, rows = EXAMPLES[fmt]
    path = tmp_path / name
    src = write(path, content(path))
    assert detect_format(src) == fmt
    others = [write(tmp_path / n, c) for n, c in COMPANIONS.get(fmt, [])]
    result = ReadResult()
    read: dict[str, int] = {}
    for batch in read_sources([src, *others], None, result):
        read[batch.table] = read.get(batch.table, 0) + len(batch)
    assert read == rows and result.skipped == []
    assert set(read) <= set(TABLE_CLASSES) | {"sample_texts", "sample_extras"}


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("packed_lengths_step_3.jsonl", "polytrace-packed"),
        ("packed_lengths_step_3_rank_4.jsonl.gz", "polytrace-packed"),
        ("reward_timings_step_0.jsonl", "polytrace-reward"),
        ("multiturn_workload_step_12.jsonl", "polytrace-multiturn"),
        ("samples.parquet", "native-parquet"),
        ("SAMPLES.CSV", "native-csv"),
    ],
)
def test_detect_by_name(tmp_path, name, fmt):
    # The content is deliberately not of the format: the name decides.
    assert detect_format(write(tmp_path / name, b"x")) == fmt


@pytest.mark.parametrize(
    "name, content, fmt",
    [
        ("rollout.jsonl", line(PACKED), "polytrace-packed"),
        ("rollout.jsonl", line(REWARD), "polytrace-reward"),
        ("rollout.jsonl", line(MULTI), "polytrace-multiturn"),
        ("rollout.jsonl", line(NATIVE) * 2, "native-jsonl"),
        ("metrics.jsonl", line({"step": 4, "data": {"timing_s/gen": 3.0}}), "verl-jsonl"),
        ("stdout", b"(TaskRunner pid=1) step:1 - timing_s/gen:3.000 - actor/entropy:0.500\n", "verl-console"),
        ("run.json", b'{"0": {"input": [1], "output": [2]}}', "polytrace-compact"),
        ("run.json", b'\n  {\n  "12": [{"input": [1], "output": [2]}]}', "polytrace-compact"),
        ("trace.json", b'{"schemaVersion": 1, "traceEvents": []}', "kineto"),
        ("filter.jsonl", line({"workload_step": 0, "kept_prompt_indices": [1]}), None),
        ("dapo_filter_indices.jsonl", line(PACKED), "dapo-filter"),
        ("notes.txt", b"hello\n", None),
        ("rollout.jsonl", b"", None),
    ],
)
def test_detect_by_content(tmp_path, name, content, fmt):
    assert detect_format(write(tmp_path / name, content)) == fmt


def test_detect_inside_gzip_and_real_kineto(tmp_path, shared_fixtures):
    gz = tmp_path / "mystery.jsonl.gz"
    gz.write_bytes(gzip.compress(line(PACKED)))
    (src,) = expand_upload(gz, gz.name)
    assert detect_format(src) == "polytrace-packed"
    trace = shared_fixtures / "kineto" / "sampled_rank-0.json.gz"
    (src,) = expand_upload(trace, trace.name)
    assert detect_format(src) == "kineto"


def test_forced_format_reads_an_undetectable_name(tmp_path):
    src = write(tmp_path / "lengths.txt", "step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,5,1\n0,0,1,5,2\n")
    assert detect_format(src) is None
    result = ReadResult()
    with pytest.raises(InputError, match="no readable trace files"):
        list(read_sources([src], None, result))
    assert result.skipped == ["skipped lengths.txt: unknown file format"]
    batches = list(read_sources([src], "native-csv", ReadResult()))
    assert [b.columns["response_len"].tolist() for b in batches] == [[1, 2]]


def test_unknown_forced_format(tmp_path):
    src = write(tmp_path / "a.jsonl", line(PACKED))
    with pytest.raises(InputError) as err:
        list(read_sources([src], "polytrace-v9", ReadResult()))
    assert err.value.field == "format" and "polytrace-packed" in str(err.value)


def test_nothing_readable_names_the_upload_and_the_skipped_files(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write(folder / "README", "about this run\n")
    write(folder / "empty.jsonl", b"")
    with pytest.raises(InputError) as err:
        list(read_sources(expand_upload(folder, "run"), None, ReadResult()))
    message = str(err.value)
    assert err.value.file == "run"
    assert "no readable trace files" in message and "run/README" in message and "run/empty.jsonl: empty file" in message


def test_sources_are_read_in_natural_order(tmp_path):
    sources = [write(tmp_path / f"packed_lengths_step_{s}.jsonl", line({**PACKED, "step": s})) for s in (10, 2, 1)]
    steps = [int(b.columns["step"][0]) for b in read_sources(sources, None, ReadResult())]
    assert steps == [1, 2, 10]


def test_upload_format_is_the_dominant_one(tmp_path):
    sources = [write(tmp_path / f"packed_lengths_step_{s}.jsonl", line(PACKED)) for s in range(3)]
    sources += [write(tmp_path / "reward_timings_step_0.jsonl", line(REWARD)), write(tmp_path / "x.txt", "?")]
    assert upload_format(sources) == "polytrace-packed"
    assert upload_format(sources[3:]) == "polytrace-reward"
    assert upload_format(sources[4:]) == "unknown"
    assert upload_format(sources, "native-csv") == "native-csv"
