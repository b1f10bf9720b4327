"""The native samples format (CSV, JSON lines, Parquet) and the column checks every
JSON-lines reader shares.

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

Shared helpers (used by the PolyTrace and verl readers too): `iter_json_chunks` splits a
stream into parsed JSON objects with their line numbers, and the `*_column` functions
build typed numpy columns from them, checking types vectorised and naming the first
offending line and field only when a check fails.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from typing import IO

import numpy as np
import orjson

from backend.formats.base import MAX_TOKENS, InputError, ReadResult, Source, TableBatch

INT32_MAX = 2**31 - 1

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

# JSON lines are parsed in blocks of this many bytes (about 100k packed samples).
BLOCK_BYTES = 2 << 20
CSV_BLOCK_BYTES = 4 << 20
PARQUET_BATCH_ROWS = 100_000


# --------------------------------------------------------------------------- JSON lines


@dataclass
class JsonChunk:
    """Parsed JSON objects of consecutive lines and each one's 1-based line number.

    `prefix(i)` names where row i sits inside its line (e.g. "turns[2]." for a nested
    turn); None for top-level rows.
    """

    rows: list
    line_nos: np.ndarray
    prefix: Callable[[int], str] | None = None

    def field(self, i: int, key: str) -> str:
        return key if self.prefix is None else self.prefix(i) + key

    def line(self, i: int) -> int:
        return int(self.line_nos[i])


@contextmanager
def gc_paused():
    """Pause the cyclic GC while building many small containers: parsing JSON lines
    creates no cycles, and generation-0 collections otherwise cost more than parsing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_lines_slow(lines: list[bytes], first_line: int, name: str, fallback) -> JsonChunk:
    rows, nos = [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            row = _fallback_parse(line, fallback, exc, name, first_line + i)
        rows.append(row)
        nos.append(first_line + i)
    return JsonChunk(rows, np.asarray(nos, dtype=np.int64))


def _fallback_parse(line: bytes, fallback, exc, name: str, line_no: int):
    if fallback is not None:
        try:
            return fallback(line)
        except ValueError:
            pass
    raise InputError(name, f"malformed JSON ({exc.msg})", line=line_no) from None


def _parse_lines(lines: list[bytes], first_line: int, name: str, fallback) -> JsonChunk:
    with gc_paused():
        try:
            rows = [orjson.loads(line) for line in lines]
            chunk = JsonChunk(rows, np.arange(first_line, first_line + len(rows), dtype=np.int64))
        except orjson.JSONDecodeError:
            # Blank lines or a broken line: redo this block line by line to name it.
            chunk = _parse_lines_slow(lines, first_line, name, fallback)
    if not all(type(r) is dict for r in chunk.rows):
        i = next(i for i, r in enumerate(chunk.rows) if type(r) is not dict)
        raise InputError(name, "expected a JSON object on each line", line=chunk.line(i))
    return chunk


def iter_json_chunks(
    source: Source,
    block_bytes: int | None = None,
    fallback: Callable[[bytes], object] | None = None,
) -> Iterator[JsonChunk]:
    """Parse a JSON-lines stream block by block; blank lines are skipped.

    `fallback` parses a line orjson refused (e.g. `json.loads` for NaN/Infinity written
    by Python's json module); without it such a line is an InputError naming the line.
    Raises InputError("empty file") when the stream holds no JSON object at all.
    """
    block_bytes = block_bytes or BLOCK_BYTES
    line_no = 0
    seen_any = False
    pending: list[bytes] = []  # the unfinished last line, possibly over several blocks
    with source.open() as stream:
        block = stream.read(block_bytes)
        if block.startswith(b"\xef\xbb\xbf"):
            block = block[3:]  # UTF-8 byte order mark
        while block:
            cut = block.rfind(b"\n")
            if cut < 0:
                pending.append(block)
            else:
                lines = (b"".join(pending) + block[:cut]).split(b"\n")
                pending = [block[cut + 1 :]]
                chunk = _parse_lines(lines, line_no + 1, source.name, fallback)
                line_no += len(lines)
                if chunk.rows:
                    seen_any = True
                    yield chunk
            block = stream.read(block_bytes)
        tail = b"".join(pending)
        if tail.strip():
            seen_any = True
            yield _parse_lines([tail], line_no + 1, source.name, fallback)
    if not seen_any:
        raise InputError(source.name, "empty file: no JSON records")


# --------------------------------------------------------------------------- columns

# Marks a field without default: rows lacking it are an InputError.
REQUIRED = object()


def _values(chunk: JsonChunk, key: str, name: str, default) -> list:
    rows = chunk.rows
    try:
        return list(map(itemgetter(key), rows))
    except KeyError:
        if default is REQUIRED:
            i = next(i for i, r in enumerate(rows) if key not in r)
            raise InputError(name, "missing field", chunk.line(i), chunk.field(i, key)) from None
        return [r.get(key, default) for r in rows]


def has_field(chunk: JsonChunk, key: str) -> bool:
    return any(key in r for r in chunk.rows)


def _first_bad(values: list, ok: Callable[[object], bool]) -> int:
    return next(i for i, v in enumerate(values) if not ok(v))


def _is_number(v) -> bool:
    return type(v) in (int, float)


def _array(values: list, empty_dtype) -> np.ndarray | None:
    """np.array(values), or None when they do not form a flat array (ragged lists)."""
    if not values:
        return np.empty(0, empty_dtype)
    try:
        arr = np.array(values)
    except (ValueError, OverflowError):
        return None
    return arr if arr.ndim == 1 else None


def int_array(values: list) -> np.ndarray | None:
    """The values as int64 when all are in-range Python ints, else None."""
    arr = _array(values, np.int64)
    if arr is None or arr.dtype.kind not in "iu":
        return None
    if arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
        return None
    return arr.astype(np.int64, copy=False)


def int_problem(values: list) -> tuple[int, str]:
    """Index and description of the first value that is not an int64-range integer."""
    for i, v in enumerate(values):
        if type(v) is not int:
            return i, f"expected an integer, got {_show(v)}"
        if not -(2**63) <= v < 2**63:
            return i, f"integer {v} out of range"
    raise AssertionError("no offending value")  # callers only ask after a failed int_array


def int_values(values: list, chunk: JsonChunk, key: str, name: str) -> np.ndarray:
    """Python ints -> int64 array; anything else is an InputError at its line."""
    arr = int_array(values)
    if arr is None:
        i, problem = int_problem(values)
        raise InputError(name, problem, chunk.line(i), chunk.field(i, key))
    return arr


def int_column(chunk: JsonChunk, key: str, name: str, default=REQUIRED) -> np.ndarray:
    """Integer field of every row as int64 (`default` fills rows that lack it)."""
    return int_values(_values(chunk, key, name, default), chunk, key, name)


def float_column(chunk: JsonChunk, key: str, name: str, default=REQUIRED, *, nullable: bool = False) -> np.ndarray:
    """Number field (int or float) as float64; strings and bools are errors, and so is
    null unless `nullable` (then null, and a missing field with default None, is NaN)."""
    values = _values(chunk, key, name, default)
    if nullable:
        values = [np.nan if v is None else v for v in values]
    arr = _array(values, np.float64)
    if arr is None or arr.dtype.kind not in "iuf":
        i = _first_bad(values, _is_number)
        raise InputError(name, f"expected a number, got {_show(values[i])}", chunk.line(i), chunk.field(i, key))
    return arr.astype(np.float64, copy=False)


def bool_column(chunk: JsonChunk, key: str, name: str, default=REQUIRED) -> np.ndarray:
    values = _values(chunk, key, name, default)
    arr = _array(values, bool)
    if arr is None or arr.dtype.kind != "b":
        i = _first_bad(values, lambda v: type(v) is bool)
        raise InputError(name, f"expected true or false, got {_show(values[i])}", chunk.line(i), chunk.field(i, key))
    return arr


def str_column(chunk: JsonChunk, key: str, name: str, default=REQUIRED) -> list[str]:
    return _typed_column(chunk, key, name, default, str, "a string")


def list_column(chunk: JsonChunk, key: str, name: str, default=REQUIRED) -> list[list]:
    return _typed_column(chunk, key, name, default, list, "a list")


def _typed_column(chunk: JsonChunk, key: str, name: str, default, kind: type, what: str) -> list:
    """The raw values of `key`, each of exactly JSON type `kind` (InputError names the first other)."""
    values = _values(chunk, key, name, default)
    if not all(type(v) is kind for v in values):
        i = _first_bad(values, lambda v: type(v) is kind)
        raise InputError(name, f"expected {what}, got {_show(values[i])}", chunk.line(i), chunk.field(i, key))
    return values


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --------------------------------------------------------------------------- range checks


def check_range(
    arr: np.ndarray,
    lo: float,
    hi: float,
    *,
    name: str,
    field: str | Callable[[int], str],
    line_of: Callable[[int], int | None],
    what: str = "value",
) -> None:
    """Raise InputError at the first element outside [lo, hi] (NaN passes)."""
    bad = (arr < lo) | (arr > hi)
    if bad.any():
        i = int(np.argmax(bad))
        value = arr[i].item()
        if value < lo:
            reason = f"negative {what} {value}" if lo == 0 else f"{what} {value} below {lo}"
        else:
            reason = f"{what} {value} exceeds {hi:,}" + (" (corrupt length?)" if hi == MAX_TOKENS else "")
        fld = field(i) if callable(field) else field
        raise InputError(name, reason, line_of(i), fld)


def as_lengths(arr: np.ndarray, *, name: str, field, line_of) -> np.ndarray:
    """Token counts: 0..MAX_TOKENS, as int32."""
    check_range(arr, 0, MAX_TOKENS, name=name, field=field, line_of=line_of, what="length")
    return arr.astype(np.int32)


def as_ids(arr: np.ndarray, *, name: str, field, line_of) -> np.ndarray:
    """Steps, indices and ranks: 0..2^31-1, as int32."""
    check_range(arr, 0, INT32_MAX, name=name, field=field, line_of=line_of)
    return arr.astype(np.int32)


def as_seconds(arr: np.ndarray, *, name: str, field, line_of) -> np.ndarray:
    check_range(arr, 0, np.inf, name=name, field=field, line_of=line_of, what="duration")
    return arr


def chunk_lines(chunk: JsonChunk) -> Callable[[int], int]:
    return lambda i: int(chunk.line_nos[i])


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
    return out


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
    types = {c: pa.int64() for c in used if c in SAMPLE_INT_COLUMNS}
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
                cols = _arrow_columns(record_batch, source.name, lambda i, b=base: b + i)
                offset += n
                yield TableBatch("samples", finish_samples(cols, source.name, lambda i, b=base: b + i))
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


_INT_RE = re.compile(r"^[-+]?\d+$")
_BOOL_WORDS = {"true", "false", "1", "0", "True", "False", "TRUE", "FALSE"}


def _csv_value_problem(col: str, value: str) -> str | None:
    if col in SAMPLE_INT_COLUMNS:
        if value == "":
            return "missing value"
        if not _INT_RE.match(value):
            return f"expected an integer, got {_show(value)}"
    elif col in SAMPLE_BOOL_COLUMNS:
        if value not in _BOOL_WORDS:
            return f"expected true or false, got {_show(value)}"
    elif col in SAMPLE_FLOAT_COLUMNS and value:
        try:
            float(value)
        except ValueError:
            return f"expected a number, got {_show(value)}"
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
def _seekable(stream: IO[bytes]):
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

    with source.open() as raw, _seekable(raw) as stream:
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
            cols = _arrow_columns(record_batch, source.name, lambda i, b=base: b + i)
            offset += n
            yield TableBatch("samples", finish_samples(cols, source.name, lambda i, b=base: b + i))
    if offset == 0:
        raise InputError(source.name, "empty file: no rows")


def stdlib_json(line: bytes):
    """Fallback parser accepting NaN/Infinity (Python's json module writes them)."""
    return json.loads(line)
