"""Native samples format: CSV, JSON lines and Parquet give the same rows; bad input
names file, line and field."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from backend.formats import detect_format, read_sources
from backend.formats.archive import expand_upload
from backend.formats.base import MAX_TOKENS, InputError, ReadResult, Source

ROWS = [
    {
        "step": 0,
        "group_idx": 0,
        "sample_idx": 0,
        "prompt_len": 10,
        "response_len": 100,
        "task": "math",
        "truncated": False,
        "reward": 1.0,
        "rank": 0,
    },
    {
        "step": 0,
        "group_idx": 0,
        "sample_idx": 1,
        "prompt_len": 10,
        "response_len": 4096,
        "task": "math",
        "truncated": True,
        "reward": 0.0,
        "rank": 0,
    },
    {
        "step": 1,
        "group_idx": 3,
        "sample_idx": 0,
        "prompt_len": 25,
        "response_len": 7,
        "task": "code",
        "truncated": False,
        "reward": 0.5,
        "rank": 1,
    },
]
INT_KEYS = ("step", "group_idx", "sample_idx", "prompt_len", "response_len", "rank")


def source(path: Path) -> Source:
    return Source(path.name, lambda: path.open("rb"), path.stat().st_size)


def samples_of(src: Source, result: ReadResult | None = None) -> tuple[dict, int]:
    batches = list(read_sources([src], None, result if result is not None else ReadResult()))
    assert {b.table for b in batches} == {"samples"}
    cols = {k: np.concatenate([np.asarray(b.columns[k]) for b in batches]) for k in batches[0].columns}
    return cols, len(batches)


def write_csv(path: Path, rows: list[dict], extra: str = "") -> Path:
    keys = list(rows[0])
    lines = [",".join(keys) + extra] + [
        ",".join(str(r[k]).lower() if isinstance(r[k], bool) else str(r[k]) for k in keys) + ("," if extra else "")
        for r in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict], row_group_size: int | None = None) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


def check_rows(cols: dict) -> None:
    for key in INT_KEYS:
        assert cols[key].tolist() == [r[key] for r in ROWS], key
        assert cols[key].dtype == np.int32
    assert cols["task"].tolist() == ["math", "math", "code"]
    assert cols["truncated"].tolist() == [False, True, False]
    assert cols["reward"].tolist() == [1.0, 0.0, 0.5]


@pytest.mark.parametrize(
    "writer, name, fmt",
    [
        (write_csv, "samples.csv", "native-csv"),
        (write_jsonl, "samples.jsonl", "native-jsonl"),
        (write_parquet, "samples.parquet", "native-parquet"),
    ],
)
def test_native_formats_read_the_same_rows(tmp_path, writer, name, fmt):
    src = source(writer(tmp_path / name, ROWS))
    assert detect_format(src) == fmt
    cols, _ = samples_of(src)
    check_rows(cols)


def test_gzipped_parquet_and_csv(tmp_path):
    for path in (write_parquet(tmp_path / "s.parquet", ROWS), write_csv(tmp_path / "s.csv", ROWS)):
        gz = path.with_name(path.name + ".gz")
        gz.write_bytes(gzip.compress(path.read_bytes()))
        (src,) = expand_upload(gz, gz.name)
        cols, _ = samples_of(src)
        check_rows(cols)


def test_unknown_columns_are_ignored_with_a_note(tmp_path):
    rows = [{**r, "uid": f"u{i}"} for i, r in enumerate(ROWS)]
    result = ReadResult()
    cols, _ = samples_of(source(write_jsonl(tmp_path / "s.jsonl", rows)), result)
    assert "uid" not in cols
    assert result.skipped == ["s.jsonl: ignored unknown columns uid"]


def test_large_files_stream_in_several_batches(tmp_path):
    n = 250_000
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "step": np.repeat(np.arange(5), n // 5),
            "group_idx": np.arange(n) // 8,
            "sample_idx": np.arange(n) % 8,
            "prompt_len": rng.integers(1, 500, n),
            "response_len": rng.integers(1, 9000, n),
        }
    )
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=50_000)
    cols, batches = samples_of(source(tmp_path / "big.parquet"))
    assert batches >= 3 and len(cols["step"]) == n
    assert cols["response_len"].sum() == table.column("response_len").to_numpy().sum()

    import pyarrow.csv as pacsv

    pacsv.write_csv(table, tmp_path / "big.csv")
    cols, batches = samples_of(source(tmp_path / "big.csv"))
    assert batches >= 2 and len(cols["step"]) == n
    assert cols["prompt_len"].sum() == table.column("prompt_len").to_numpy().sum()


# --------------------------------------------------------------------------- bad input


def bad_rows(key: str, value) -> list[dict]:
    rows = [dict(r) for r in ROWS]
    rows[2][key] = value
    return rows


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("response_len", -5, "negative"),
        ("prompt_len", MAX_TOKENS + 1, "exceeds"),
        ("group_idx", "abc", "expected an integer"),
    ],
)
@pytest.mark.parametrize(
    "writer, name, line",
    [
        (write_csv, "s.csv", 4),  # header + 3 rows: the third record is line 4
        (write_jsonl, "s.jsonl", 3),
    ],
)
def test_bad_values_name_file_line_field(tmp_path, writer, name, line, key, value, words):
    src = source(writer(tmp_path / name, bad_rows(key, value)))
    with pytest.raises(InputError) as err:
        samples_of(src)
    assert (err.value.file, err.value.line, err.value.field) == (name, line, key)
    assert words in str(err.value)


def test_parquet_bad_values(tmp_path):
    src = source(write_parquet(tmp_path / "s.parquet", bad_rows("response_len", -5)))
    with pytest.raises(InputError) as err:
        samples_of(src)
    assert (err.value.file, err.value.line, err.value.field) == ("s.parquet", 3, "response_len")
    rows = [{**r, "prompt_len": float(r["prompt_len"])} for r in ROWS]
    with pytest.raises(InputError) as err:
        samples_of(source(write_parquet(tmp_path / "f.parquet", rows)))
    assert err.value.field == "prompt_len" and "integer" in str(err.value)


@pytest.mark.parametrize("writer, name", [(write_csv, "s.csv"), (write_jsonl, "s.jsonl"), (write_parquet, "s.parquet")])
def test_missing_required_column(tmp_path, writer, name):
    rows = [{k: v for k, v in r.items() if k != "sample_idx"} for r in ROWS]
    with pytest.raises(InputError) as err:
        list(
            read_sources(
                [source(writer(tmp_path / name, rows))], writer.__name__.replace("write_", "native-"), ReadResult()
            )
        )
    assert (err.value.file, err.value.field) == (name, "sample_idx")


def test_csv_missing_value_and_short_row(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,5,6\n0,0,1,,6\n")
    with pytest.raises(InputError) as err:
        samples_of(source(path))
    assert (err.value.line, err.value.field) == (3, "prompt_len")
    path.write_text("step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,5,6\n0,0,1,5\n")
    with pytest.raises(InputError) as err:
        samples_of(source(path))
    assert err.value.line == 3 and "columns" in str(err.value)


def test_empty_native_files(tmp_path):
    csv_path = tmp_path / "s.csv"
    csv_path.write_text("step,group_idx,sample_idx,prompt_len,response_len\n")
    with pytest.raises(InputError, match="empty"):
        samples_of(source(csv_path))
    empty = tmp_path / "e.csv"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        list(read_sources([source(empty)], "native-csv", ReadResult()))
