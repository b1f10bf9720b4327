"""The native samples format (CSV, JSON lines, Parquet).

Native files carry one row per rollout response with the ``samples`` columns of
`backend.formats.base` (see docs/formats.md):

==============  =========  ========  =========================================
column          type       required  meaning
==============  =========  ========  =========================================
step            int        yes       training step (>= 0)
group_idx       int        yes       prompt group within the step (>= 0)
sample_idx      int        yes       sample within the group (>= 0)
prompt_len      int        yes       prompt tokens, 0..MAX_TOKENS
response_len    int        yes       response tokens, 0..MAX_TOKENS
rank, dp_rank,  int        no        ranks that held the sample (>= 0)
tp_rank
task            str        no        task label (e.g. "math", "code")
truncated       bool       no        the response hit the max length
validate        bool       no        a validation (not training) rollout
reward          float      no        reward value
num_turns,      int        no        multi-turn trajectory counts
num_tool_calls
latency_s       float      no        summed engine latency of the trajectory
==============  =========  ========  =========================================

Readers yield ``samples`` batches of at most ~100k rows (CSV by pyarrow blocks, JSON
lines by 2 MiB blocks, Parquet by row group batches). Other columns are ignored and
reported in `ReadResult.skipped`. A missing value in an int/bool column is an error; in
a float column it becomes NaN. Line numbers are 1-based; for CSV the header is line 1
and for Parquet "line" is the 1-based row number.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

import numpy as np

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.jsonl import (
    as_ids,
    as_lengths,
    as_seconds,
    bool_column,
    chunk_lines,
    float_column,
    has_field,
    int_column,
    iter_json_chunks,
    show_value,
    str_column,
)
from backend.formats.spec import CATCH_ALL_ORDER, FormatSpec

SAMPLE_INT_COLUMNS = (
    "step",
    "group_idx",
    "sample_idx",
    "prompt_len",
    "response_len",
    "rank",
    "dp_rank",
    "tp_rank",
    "num_turns",
    "num_tool_calls",
)
SAMPLE_BOOL_COLUMNS = ("truncated", "validate")
SAMPLE_FLOAT_COLUMNS = ("reward", "latency_s")
SAMPLE_STR_COLUMNS = ("task",)
SAMPLE_COLUMNS = SAMPLE_INT_COLUMNS + SAMPLE_BOOL_COLUMNS + SAMPLE_FLOAT_COLUMNS + SAMPLE_STR_COLUMNS
REQUIRED_SAMPLE_COLUMNS = ("step", "group_idx", "sample_idx", "prompt_len", "response_len")
LENGTH_COLUMNS = ("prompt_len", "response_len")

CSV_BLOCK_BYTES = 4 << 20
PARQUET_BATCH_ROWS = 100_000


# --------------------------------------------------------------------------- native samples


def finish_samples(columns: dict, name: str, line_of: Callable[[int], int | None]) -> dict:
    """Range-check and narrow native sample columns (int64 -> int32 etc.)."""
    out = {}
    for key, arr in columns.items():
        if key in LENGTH_COLUMNS:
            out[key] = as_lengths(arr, name=name, field=key, line_of=line_of)
        elif key in SAMPLE_INT_COLUMNS:
            out[key] = as_ids(arr, name=name, field=key, line_of=line_of)
        elif key == "latency_s":
            out[key] = as_seconds(arr, name=name, field=key, line_of=line_of)
        else:
            out[key] = arr
    _check_unique_keys(out, name, line_of)
    return out


KEY_COLUMNS = ("step", "group_idx", "sample_idx")


def _check_unique_keys(columns: dict, name: str, line_of: Callable[[int], int | None]) -> None:
    """(step, group_idx, sample_idx) is a sample's key: a repeat within the batch is a 422
    naming both lines (across batches or files the store's unique key still refuses it)."""
    s, g, k = (np.asarray(columns[c], dtype=np.int64) for c in KEY_COLUMNS)
    if len(s) < 2:
        return
    order = np.lexsort((k, g, s))  # stable: equal keys keep file order
    ss, gg, kk = s[order], g[order], k[order]
    dup = np.flatnonzero((ss[1:] == ss[:-1]) & (gg[1:] == gg[:-1]) & (kk[1:] == kk[:-1]))
    if not len(dup):
        return
    later = order[dup + 1]
    j = int(np.argmin(later))
    i, first = int(later[j]), int(order[dup[j]])
    raise InputError(
        name,
        f"duplicate sample (step {s[i]}, group_idx {g[i]}, sample_idx {k[i]}): also on line {line_of(first)}",
        line_of(i),
        "sample_idx",
    )


def read_native_jsonl(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """Native samples as JSON lines: one object per sample with the sample columns."""
    ignored: set[str] = set()
    for chunk in iter_json_chunks(source):
        cols: dict = {}
        for key in REQUIRED_SAMPLE_COLUMNS:
            cols[key] = int_column(chunk, key, source.name)
        for key in SAMPLE_COLUMNS:
            if key in cols or not has_field(chunk, key):
                continue
            if key in SAMPLE_INT_COLUMNS:
                cols[key] = int_column(chunk, key, source.name)
            elif key in SAMPLE_BOOL_COLUMNS:
                cols[key] = bool_column(chunk, key, source.name)
            elif key in SAMPLE_FLOAT_COLUMNS:
                cols[key] = float_column(chunk, key, source.name, None, nullable=True)
            else:
                cols[key] = str_column(chunk, key, source.name, default="")
        ignored.update(k for r in chunk.rows[:100] for k in r if k not in SAMPLE_COLUMNS)
        yield TableBatch("samples", finish_samples(cols, source.name, chunk_lines(chunk)))
    _note_ignored(result, source.name, ignored)


def _note_ignored(result: ReadResult, name: str, ignored: set[str]) -> None:
    if ignored:
        result.skipped.append(f"{name}: ignored unknown columns {', '.join(sorted(ignored))}")


# --------------------------------------------------------------------------- CSV


def _csv_header(source: Source) -> list[str]:
    with source.open() as stream:
        first = stream.readline(1 << 20)
    text = first.decode("utf-8-sig", errors="replace").strip("\r\n")
    if not text.strip():
        raise InputError(source.name, "empty file: no CSV header", line=1)
    return [c.strip() for c in next(csv.reader([text]))]


def _line_of(base: int) -> Callable[[int], int]:
    """Row i of a batch -> its line in the file."""
    return lambda i: base + i


def read_native_csv(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """Native samples as CSV with a header row, streamed in pyarrow blocks."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    header = _csv_header(source)
    for key in REQUIRED_SAMPLE_COLUMNS:
        if key not in header:
            raise InputError(source.name, "missing required column", line=1, field=key)
    used = [c for c in header if c in SAMPLE_COLUMNS]
    _note_ignored(result, source.name, {c for c in header if c not in SAMPLE_COLUMNS})
    types: dict[str, pa.DataType] = {c: pa.int64() for c in used if c in SAMPLE_INT_COLUMNS}
    types.update({c: pa.bool_() for c in used if c in SAMPLE_BOOL_COLUMNS})
    types.update({c: pa.float64() for c in used if c in SAMPLE_FLOAT_COLUMNS})
    types.update({c: pa.string() for c in used if c in SAMPLE_STR_COLUMNS})
    convert = pacsv.ConvertOptions(column_types=types, include_columns=used, strings_can_be_null=False)
    read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES)
    offset = 0
    with source.open() as stream:
        try:
            reader = pacsv.open_csv(stream, read_options=read, convert_options=convert)
            for record_batch in reader:
                n = record_batch.num_rows
                if n == 0:
                    continue
                base = offset + 2  # header is line 1
                cols = _arrow_columns(record_batch, source.name, _line_of(base))
                offset += n
                yield TableBatch("samples", finish_samples(cols, source.name, _line_of(base)))
        except pa.ArrowInvalid as exc:
            raise _diagnose_csv(source, header, used, exc) from None
    if offset == 0:
        raise InputError(source.name, "empty file: no CSV records below the header")


def _diagnose_csv(source: Source, header: list[str], used: list[str], exc: Exception) -> InputError:
    """pyarrow says what failed but not where: rescan with the csv module to name the
    line and field of the first bad value."""
    idx = {c: header.index(c) for c in used}
    with source.open() as stream:
        text = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="replace", newline="")
        reader = csv.reader(text)
        next(reader, None)
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                return InputError(source.name, f"expected {len(header)} columns, found {len(row)}", line)
            for col, j in idx.items():
                problem = _csv_value_problem(col, row[j].strip())
                if problem:
                    return InputError(source.name, problem, line, col)
    return InputError(source.name, f"unreadable CSV: {exc}")


# ASCII digits only: pyarrow reads nothing else, while \d and float() also take other
# scripts' digits (Arabic-Indic, Devanagari...), which hid the bad value's line and field.
_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_BOOL_WORDS = {"true", "false", "1", "0", "True", "False", "TRUE", "FALSE"}


def _csv_value_problem(col: str, value: str) -> str | None:
    if col in SAMPLE_INT_COLUMNS:
        if value == "":
            return "missing value"
        if not _INT_RE.match(value):
            return f"expected an integer, got {show_value(value)}"
        if not -(2**63) <= int(value) < 2**63:
            return f"integer out of range, got {show_value(value)}"
    elif col in SAMPLE_BOOL_COLUMNS:
        if value not in _BOOL_WORDS:
            return f"expected true or false, got {show_value(value)}"
    elif col in SAMPLE_FLOAT_COLUMNS and value:
        try:
            if not value.isascii():
                raise ValueError(value)
            float(value)
        except ValueError:
            return f"expected a number, got {show_value(value)}"
    return None


def _arrow_columns(batch, name: str, line_of: Callable[[int], int]) -> dict:
    """pyarrow RecordBatch -> numpy columns, checking types and nulls."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols: dict = {}
    for key, arr in zip(batch.schema.names, batch.columns):
        if key not in SAMPLE_COLUMNS:
            continue
        if key in SAMPLE_FLOAT_COLUMNS:
            if not (pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type) or pa.types.is_null(arr.type)):
                raise InputError(name, f"expected a numeric column, found {arr.type}", field=key)
            cols[key] = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
            continue
        if arr.null_count:
            i = int(np.argmax(arr.is_null().to_numpy(zero_copy_only=False)))
            raise InputError(name, "missing value", line_of(i), key)
        if key in SAMPLE_INT_COLUMNS:
            if not pa.types.is_integer(arr.type):
                raise InputError(name, f"expected an integer column, found {arr.type}", field=key)
            cols[key] = arr.to_numpy().astype(np.int64, copy=False)
        elif key in SAMPLE_BOOL_COLUMNS:
            if not pa.types.is_boolean(arr.type):
                raise InputError(name, f"expected a boolean column, found {arr.type}", field=key)
            cols[key] = arr.to_numpy(zero_copy_only=False)
        else:
            cols[key] = [str(v) for v in arr.to_pylist()]
    return cols


# --------------------------------------------------------------------------- Parquet


@contextmanager
def seekable_stream(stream: IO[bytes]):
    """Parquet needs random access; spool a non-seekable (decompressing) stream."""
    if getattr(stream, "seekable", lambda: False)():
        yield stream
        return
    with tempfile.TemporaryFile() as spool:
        shutil.copyfileobj(stream, spool, 1 << 20)
        spool.seek(0)
        yield spool


def read_native_parquet(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """Native samples as Parquet, read in batches of row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with source.open() as raw, seekable_stream(raw) as stream:
        try:
            pf = pq.ParquetFile(stream)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(source.name, f"not a readable Parquet file ({exc})") from None
        names = pf.schema_arrow.names
        for key in REQUIRED_SAMPLE_COLUMNS:
            if key not in names:
                raise InputError(source.name, "missing required column", field=key)
        used = [c for c in names if c in SAMPLE_COLUMNS]
        _note_ignored(result, source.name, {c for c in names if c not in SAMPLE_COLUMNS})
        offset = 0
        for record_batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=used):
            n = record_batch.num_rows
            if n == 0:
                continue
            base = offset + 1
            cols = _arrow_columns(record_batch, source.name, _line_of(base))
            offset += n
            yield TableBatch("samples", finish_samples(cols, source.name, _line_of(base)))
    if offset == 0:
        raise InputError(source.name, "empty file: no rows")


_NATIVE = "a native CSV/JSONL/Parquet"
_CARRIES = {
    "samples": _NATIVE,
    "samples.dp_rank": f"{_NATIVE} with a dp_rank column",
    "samples.num_turns": f"{_NATIVE} with a num_turns column",
    "samples.reward": f"{_NATIVE} with a reward column",
}

FORMAT_SPECS = (
    FormatSpec(
        "native-csv",
        read_native_csv,
        "``.csv`` (``.tsv`` is not supported)",
        names=(r".*\.csv$",),
        order=CATCH_ALL_ORDER,
        carries=_CARRIES,
    ),
    FormatSpec(
        "native-jsonl",
        read_native_jsonl,
        "a first line with " + ", ".join(REQUIRED_SAMPLE_COLUMNS),
        line=lambda obj: all(k in obj for k in REQUIRED_SAMPLE_COLUMNS),
        order=50,
        carries=_CARRIES,
    ),
    FormatSpec(
        "native-parquet",
        read_native_parquet,
        "``.parquet`` / ``.pq``",
        names=(r".*\.(parquet|pq)$",),
        order=CATCH_ALL_ORDER,
        carries=_CARRIES,
    ),
)
