"""The JSON-lines toolkit every reader shares: `iter_json_chunks` splits a stream into
parsed JSON objects with their line numbers, and the `*_column` functions build typed
numpy columns from them, checking types vectorised and naming the first offending line
and field only when a check fails; `check_range` / `as_lengths` / `as_ids` /
`as_seconds` narrow and range-check columns with the same file/line/field errors."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import orjson

from backend.formats.base import MAX_TOKENS, InputError, Source

INT32_MAX = 2**31 - 1

# JSON lines are parsed in blocks of this many bytes (about 100k packed samples).
BLOCK_BYTES = 2 << 20
# One JSON record (a line, or a whole compact document) may hold this many bytes: parsed
# whole, it costs up to ~60x its size in memory (8M one-digit lengths in 16 MiB), so
# this bounds what a reader holds at once (backend/ingest/bounds.py).
MAX_RECORD_BYTES = 16 << 20


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
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
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
                check_record_size(sum(map(len, pending)), source.name, line_no + 1)
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


def check_record_size(size: int, name: str, line: int | None = None) -> None:
    """Refuse a JSON record past MAX_RECORD_BYTES (while it is read, before parsing it)."""
    if size > MAX_RECORD_BYTES:
        what = "a line" if line is not None else "the JSON document"
        raise InputError(
            name,
            f"{what} longer than {MAX_RECORD_BYTES:,} bytes: split it (one prompt group or trajectory per line)",
            line=line,
        )


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
            return i, f"expected an integer, got {show_value(v)}"
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
        raise InputError(name, f"expected a number, got {show_value(values[i])}", chunk.line(i), chunk.field(i, key))
    return arr.astype(np.float64, copy=False)


def bool_column(chunk: JsonChunk, key: str, name: str, default=REQUIRED) -> np.ndarray:
    values = _values(chunk, key, name, default)
    arr = _array(values, bool)
    if arr is None or arr.dtype.kind != "b":
        i = _first_bad(values, lambda v: type(v) is bool)
        raise InputError(
            name, f"expected true or false, got {show_value(values[i])}", chunk.line(i), chunk.field(i, key)
        )
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
        raise InputError(name, f"expected {what}, got {show_value(values[i])}", chunk.line(i), chunk.field(i, key))
    return values


def show_value(value) -> str:
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


def stdlib_json(line: bytes):
    """Fallback parser accepting NaN/Infinity (Python's json module writes them)."""
    return json.loads(line)
