"""PyTorch profiler (Kineto) Chrome-trace JSON -> `gpu_events` batches.

One file per rank (`.json`, or `.json.gz` which `Source.open` already decompresses).
Kineto writes one JSON document, not lines: msgspec checks the whole document and leaves
each event as a slice of the file's bytes, then decodes the events `CHUNK_EVENTS` at a
time into slim structs, and every column is built chunk by chunk with a few list
comprehensions and numpy. Only one chunk's structs are alive at a time: a reader holds
the file's bytes and its columns, about twice the file's size, not ~520 bytes per event.

What is read:

- rank: `distributedInfo.rank`; else `rank-N` / `rank_N` / `rankN` in the file name;
  else 0.
- GPU events: `cat` in {kernel, gpu_memcpy, gpu_memset}; device = `args.device`
  (else `pid`), stream = `args.stream` (an integer, else a 422; when absent `tid`, -1 when
  that is not an integer). `ts` must be a finite number and `dur` a finite number >= 0
  (a missing or negative `dur` is a 422 naming the event's index in traceEvents).
- launch: the CPU runtime call (`cat` cuda_runtime / cuda_driver) with the same
  `args.correlation` (falling back to `args["External id"]` for GPU events no call matches
  by correlation, as in old traces); `launch_us` is its start, NaN when nothing matches. When several calls share an id the
  last one in the file wins, as in Holistic Trace Analysis (HTA).
- steps: CPU annotations named `ProfilerStep#N`. A GPU event belongs to step N when its
  launching call starts in [ts, ts + dur) of ProfilerStep#N (HTA 0.5.0 `add_iteration`:
  GPU events take the iteration of their correlated CPU event); -1 when it has no known
  launch or the launch is outside every step.
- kind (`GpuKind`): COMMUNICATION for NCCL kernels (HTA's `^nccl.*Kernel`), MEMORY for
  gpu_memcpy / gpu_memset (or names starting Memcpy / Memset / dma), COMPUTE otherwise.

Batches: table `gpu_events`, columns rank, stream, step (int32), kind (int8), name (list
of str), start_us, dur_us, launch_us (float64), in file order.

Trace metadata (merged over all files of an upload, keyed by rank as a string so files
merge without clobbering each other) goes to ``result.info.metadata["kineto"]``::

    {"ranks": [0, 1],                     # sorted
     "world_size": 128,                   # from distributedInfo, when present
     "files":      {"0": ["sampled_rank-0.json.gz"], ...},
     "devices":    {"0": [0], ...},       # GPU device ids seen on that rank
     "streams":    {"0": [7, 23], ...},
     "gpu_events": {"0": 1204, ...},
     "steps":      {"0": [[551, start_us, end_us], ...], ...}}   # ProfilerStep windows

The step windows let analyses reproduce HTA's filtering exactly (it drops GPU events
launched after the start of the last ProfilerStep).

When the ingest asks for it (``result.state[EVENTS_DIR_STATE]``), every event of the file
is also written as columns beside the database (backend/formats/kineto_events.py), from
the same decode.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any, NamedTuple

import msgspec
import numpy as np

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.kineto_events import EVENTS_DIR_STATE, KeptColumns, intern_values
from backend.formats.spec import FormatSpec
from core.analysis.gpu_kinds import GpuKind, kernel_kind

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime"})
# Where ProfilerStep#N annotations are not looked for: GPU-side annotations mirror the CPU
# ones on the device timeline (steps come from the CPU), flow arrows and metadata events
# (no cat) never carry them, and HTA skips python_function events altogether.
NOT_STEP_CATS = GPU_CATS | RUNTIME_CATS | {"gpu_user_annotation", "ac2g", "fwdbwd", "python_function", None}

BATCH_ROWS = 262_144
CHUNK_EVENTS = 32_768  # events decoded at a time (~25 MB of structs for 7 MB of JSON)

_STEP_NAME = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_DETECT_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')


def looks_like_kineto(head: bytes, name: str) -> bool:
    """A `.json` file (after any `.gz`) whose first bytes open an object with a key
    Kineto writes first (`schemaVersion`, `deviceProperties`, `distributedInfo`,
    `traceEvents`)."""
    lower = name.lower()
    if lower.endswith(".gz"):
        lower = lower[:-3]
    if not lower.endswith(".json"):
        return False
    start = head.lstrip()
    if start.startswith(b"\xef\xbb\xbf"):
        start = start[3:].lstrip()
    return start.startswith(b"{") and any(key in head for key in _DETECT_KEYS)


def rank_from_file_name(name: str) -> int | None:
    """`rank-3` / `rank_3` / `rank3` in the file's base name, else None."""
    match = _RANK_IN_NAME.search(PurePosixPath(name).name)
    return int(match.group(1)) if match else None


def read_kineto(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """Yield `gpu_events` batches for one rank's Kineto trace; see the module docstring."""
    raws, info = _decode_outline(source.name, _read_all(source))
    rank = _rank_of(source.name, info)
    keep_dir = result.state.get(EVENTS_DIR_STATE)
    try:
        events = _read_events(source.name, rank, raws, keep=keep_dir is not None, loose=False)
    except _NeedsLooseDecode:
        events = _read_events(source.name, rank, raws, keep=keep_dir is not None, loose=True)
    del raws  # and with them the file's bytes, which they point into
    columns = events.gpu
    launch_us = _launch_times(columns, events.runtime)
    windows = _step_windows(events.step_marks)
    step = assign_steps(launch_us, windows)
    n = len(columns["start_us"])
    merge_kineto_metadata(result, _file_metadata(source.name, rank, info, columns, windows, n))
    if keep_dir is not None and events.kept is not None:  # for the CPU-side analyses and the export
        index = result.state.get("kineto_files_kept", 0)
        result.state["kineto_files_kept"] = index + 1
        events.kept.save(keep_dir, index, source.name)
    del events
    if not windows:
        result.skipped.append(f"{source.name}: no ProfilerStep#N annotations, every GPU event has step -1")
    if n == 0:
        result.skipped.append(f"{source.name}: no GPU events (kernel, gpu_memcpy, gpu_memset)")
        return

    rank_col = np.full(n, rank, dtype=np.int32)
    for lo in range(0, n, BATCH_ROWS):
        hi = min(lo + BATCH_ROWS, n)
        yield TableBatch(
            "gpu_events",
            {
                "rank": rank_col[lo:hi],
                "stream": columns["stream"][lo:hi],
                "step": step[lo:hi],
                "kind": columns["kind"][lo:hi],
                "name": columns["name"][lo:hi],
                "start_us": columns["start_us"][lo:hi],
                "dur_us": columns["dur_us"][lo:hi],
                "launch_us": launch_us[lo:hi],
            },
        )


def _read_all(source: Source) -> bytes:
    with source.open() as fh:
        return fh.read()


def assign_steps(launch_us: np.ndarray, windows: list[tuple[int, float, float]]) -> np.ndarray:
    """Step number of each launch time: N when inside [start, end) of ProfilerStep#N,
    else -1 (also for NaN launches). `windows` are (N, start_us, end_us)."""
    step = np.full(len(launch_us), -1, dtype=np.int32)
    if not windows:
        return step
    win = sorted(windows, key=lambda w: w[1])
    numbers = np.array([w[0] for w in win], dtype=np.int32)
    starts = np.array([w[1] for w in win], dtype=np.float64)
    ends = np.array([w[2] for w in win], dtype=np.float64)
    known = ~np.isnan(launch_us)
    idx = np.searchsorted(starts, launch_us[known], side="right") - 1
    inside = idx >= 0
    inside[inside] = launch_us[known][inside] < ends[idx[inside]]
    out = np.full(int(known.sum()), -1, dtype=np.int32)
    out[inside] = numbers[idx[inside]]
    step[known] = out
    return step


# --- decoding ------------------------------------------------------------------------
# msgspec decodes straight into small structs holding only the fields we use and skips the
# rest (cpu_op input shapes, flow events' extra keys...) without building Python objects:
# ~6x faster than a generic JSON load of the whole document. Typed first; a trace with
# unusual value types (string ids, say) or GPU events without args.stream / args.device
# is decoded again with untyped fields (plus pid / tid as fallbacks) and converted
# leniently.


class _Args(msgspec.Struct, gc=False):
    stream: int | None = None
    device: int | None = None
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    # kept for the whole-trace events (backend/formats/kineto_events.py)
    bytes: Any = None
    bandwidth: Any = msgspec.field(default=None, name="memory bandwidth (GB/s)")
    name: Any = None  # metadata events (ph "M"): process / thread names
    sort_index: Any = None
    labels: Any = None


class _Event(msgspec.Struct, gc=False):
    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    args: _Args | None = None
    ph: Any = None
    pid: Any = None
    tid: Any = None
    id: Any = None
    bp: Any = None


class _LooseArgs(msgspec.Struct, gc=False):
    stream: Any = None
    device: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    bytes: Any = None
    bandwidth: Any = msgspec.field(default=None, name="memory bandwidth (GB/s)")
    name: Any = None
    sort_index: Any = None
    labels: Any = None


class _LooseEvent(msgspec.Struct, gc=False):
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None  # device fallback
    tid: Any = None  # stream fallback
    args: _LooseArgs | None = None
    ph: Any = None
    id: Any = None
    bp: Any = None


class _Outline(msgspec.Struct):
    """The document with each event left undecoded (a slice of the file's bytes)."""

    traceEvents: list[msgspec.Raw] | None = None
    distributedInfo: Any = None


_OUTLINE = msgspec.json.Decoder(_Outline)
_STRICT = msgspec.json.Decoder(list[_Event])
_LOOSE = msgspec.json.Decoder(list[_LooseEvent])
_BYTE_POS = re.compile(r"byte (\d+)")
_ERROR_PATH = re.compile(r"at `\$\.traceEvents\[(\d+)\](?:\.([\w.]+))?`")
_CHUNK_PATH = re.compile(r"`\$\[(\d+)\]")


class _NeedsLooseDecode(Exception):
    """The typed fast path met a trace it cannot take; decode again leniently."""


def _decode_outline(file: str, raw: bytes) -> tuple[list[msgspec.Raw], Any]:
    """(traceEvents, distributedInfo) of the document, checked as JSON whole; each
    event is kept undecoded, a slice of `raw` (about 50 bytes per event)."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        outline = _OUTLINE.decode(raw)
    except msgspec.ValidationError as exc:
        raise _validation_error(file, str(exc)) from None
    except msgspec.DecodeError as exc:
        match = _BYTE_POS.search(str(exc))
        end = int(match.group(1)) if match else len(raw)  # no position: truncated input
        line = raw.count(b"\n", 0, end) + 1
        raise InputError(file, f"not valid JSON: {exc}", line=line) from None
    if outline.traceEvents is None:
        raise InputError(file, "Kineto trace: traceEvents is missing", field="traceEvents")
    return outline.traceEvents, outline.distributedInfo


def _decode_chunk(file: str, raws: list, offset: int, loose: bool) -> list:
    """Events `offset`... of traceEvents (their raw JSON) decoded into structs."""
    try:
        return (_LOOSE if loose else _STRICT).decode(b"[" + b",".join(raws) + b"]")
    except msgspec.ValidationError as exc:
        if not loose:
            raise _NeedsLooseDecode from None
        # name the event by its place in the file's traceEvents, not in the chunk
        message = _CHUNK_PATH.sub(lambda m: f"`$.traceEvents[{int(m.group(1)) + offset}]", str(exc))
        raise _validation_error(file, message) from None


class _Chunk(NamedTuple):
    """Decoded events and the position of the first one in traceEvents (for errors)."""

    events: list
    offset: int


class _FileEvents(NamedTuple):
    gpu: dict  # the GPU events' columns (`_gpu_columns`), in file order
    runtime: dict  # the runtime calls' ts, correlation and External id
    step_marks: list  # the ProfilerStep#N annotations (structs)
    kept: KeptColumns | None  # every event, when the ingest keeps them


def _read_events(file: str, rank: int, raws: list, *, keep: bool, loose: bool) -> _FileEvents:
    """The file's events decoded a chunk at a time: only one chunk's structs are alive,
    so a reader holds the file's bytes and its columns, not every decoded event."""
    kept = KeptColumns(rank, len(raws)) if keep else None
    names: dict[str, int] = {}
    gpu_parts, runtime_parts, step_marks = [], [], []
    for offset in range(0, max(len(raws), 1), CHUNK_EVENTS):  # one (maybe empty) chunk at least
        events = _decode_chunk(file, raws[offset : offset + CHUNK_EVENTS], offset, loose)
        gpu, runtime, marks = _split_events(events)
        gpu_parts.append(_gpu_columns(file, gpu, _Chunk(events, offset), loose, names))
        runtime_parts.append(_runtime_columns(runtime, loose))
        step_marks.extend(marks)
        if kept is not None:
            kept.add(events)
        del events, gpu, runtime
    gpu_columns = {k: np.concatenate([p[k] for p in gpu_parts]) for k in gpu_parts[0]}
    gpu_columns["name"] = np.array(list(names) or [""], dtype=object)[gpu_columns.pop("name_code")].tolist()
    runtime_columns = {k: np.concatenate([p[k] for p in runtime_parts]) for k in runtime_parts[0]}
    return _FileEvents(gpu_columns, runtime_columns, step_marks, kept)


def _validation_error(file: str, message: str) -> InputError:
    match = _ERROR_PATH.search(message)
    if match:  # a bad event: name its position in traceEvents (1-based) and its field
        field_name = match.group(2) or "traceEvents"
        if field_name == "args.external_id":
            field_name = "args.External id"
        return InputError(file, f"Kineto trace event: {message}", line=int(match.group(1)) + 1, field=field_name)
    if "traceEvents" in message or message.startswith("Expected `object`, got"):
        return InputError(file, f"Kineto trace: {message}", field="traceEvents")
    return InputError(file, f"Kineto trace: {message}")


def _rank_of(file: str, info: Any) -> int:
    if isinstance(info, dict) and info.get("rank") is not None:
        try:
            return int(info["rank"])
        except (TypeError, ValueError):
            raise InputError(file, f"rank is not an integer: {info['rank']!r}", field="distributedInfo.rank") from None
    from_name = rank_from_file_name(file)
    return 0 if from_name is None else from_name


_get_cat = operator.attrgetter("cat")
_get_name = operator.attrgetter("name")
_get_ts = operator.attrgetter("ts")
_get_dur = operator.attrgetter("dur")
_get_args = operator.attrgetter("args")
_get_stream = operator.attrgetter("stream")
_get_device = operator.attrgetter("device")
_get_correlation = operator.attrgetter("correlation")
_get_external_id = operator.attrgetter("external_id")


def _pick(items: list, idx: np.ndarray) -> list:
    return [items[i] for i in idx.tolist()]


def _split_events(events: list) -> tuple[list, list, list]:
    """GPU events, runtime calls and ProfilerStep annotations, in file order."""
    codes, distinct = intern_values(map(_get_cat, events), len(events))

    def where(test) -> np.ndarray:
        return np.flatnonzero(np.array([test(c) for c in distinct], dtype=bool)[codes]) if len(codes) else codes

    gpu = _pick(events, where(lambda c: c in GPU_CATS))
    runtime = _pick(events, where(lambda c: c in RUNTIME_CATS))
    others = _pick(events, where(lambda c: c not in NOT_STEP_CATS))
    steps = [e for e, n in zip(others, map(_get_name, others)) if type(n) is str and n.startswith("ProfilerStep")]
    return gpu, runtime, steps


def _float_column(file: str, rows: list, key: str, chunk: _Chunk, default=None) -> np.ndarray:
    values = [getattr(e, key) for e in rows]
    if default is not None:
        values = [default if v is None else v for v in values]
    try:
        column = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        column = None
    if column is not None and not np.isnan(column).any():  # None would convert to NaN
        return column
    bad = next(i for i, v in enumerate(values) if not _is_number(v) or v != v)
    record = _record_of(chunk, rows[bad])
    problem = f"has no {key}" if values[bad] is None else f"{key} is not a number: {values[bad]!r}"
    raise InputError(file, f"traceEvents[{record - 1}]: GPU event {problem}", line=record, field=key)


def _check_finite(file: str, rows: list, column: np.ndarray, key: str, chunk: _Chunk, nonnegative=False) -> None:
    """A GPU event's ts / dur is a finite number (and a dur is >= 0): else a 422 naming
    the file, the event's position in traceEvents and the field."""
    bad = ~np.isfinite(column)
    if nonnegative:
        bad |= column < 0
    if bad.any():
        i = int(np.argmax(bad))
        record = _record_of(chunk, rows[i])
        what = "negative" if np.isfinite(column[i]) else "not finite"
        raise InputError(
            file, f"traceEvents[{record - 1}]: GPU event {key} is {what}: {column[i].item()!r}", line=record, field=key
        )


def _check_streams(file: str, rows: list, streams: list, chunk: _Chunk) -> None:
    """An `args.stream` given is an integer (a string like "s7" is refused, not read as -1)."""
    for i, v in enumerate(streams):
        if v is not None and not (type(v) is int or (type(v) is str and v.strip().lstrip("-").isdigit())):
            record = _record_of(chunk, rows[i])
            raise InputError(
                file,
                f"traceEvents[{record - 1}]: GPU event args.stream is not an integer: {v!r}",
                line=record,
                field="args.stream",
            )


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _record_of(chunk: _Chunk, event) -> int:
    """1-based position of `event` in traceEvents (only computed on errors)."""
    return chunk.offset + next(i for i, e in enumerate(chunk.events) if e is event) + 1


def _as_ints(values: list, default: int = -1) -> np.ndarray:
    """Integers (ints, integral strings/floats) as int64; anything else -> `default`."""
    try:
        return np.fromiter((default if v is None else v for v in values), dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        pass
    out = []
    for v in values:
        try:
            out.append(int(v))
        except (TypeError, ValueError, OverflowError):
            out.append(default)
    return np.asarray(out, dtype=np.int64)


def _fast_floats(rows: list, getter) -> np.ndarray | None:
    """The values as float64 when all are numbers, else None (numpy turns None into NaN)."""
    try:
        column = np.fromiter(map(getter, rows), dtype=np.float64, count=len(rows))
    except (TypeError, ValueError):
        return None
    return None if np.isnan(column).any() else column


def _int_column(values: list) -> np.ndarray:
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return _as_ints(values)


def _args_of(rows: list) -> list:
    """Each event's args struct, an empty one where the event has none."""
    args = list(map(_get_args, rows))
    if None in args:
        args = [_NO_ARGS if a is None else a for a in args]
    return args


_NO_ARGS = _LooseArgs()


def _gpu_columns(file: str, gpu: list, chunk: _Chunk, loose: bool, names_seen: dict[str, int]) -> dict:
    """The GPU events' columns; a name is a code numbered in `names_seen`."""
    n = len(gpu)
    names = list(map(_get_name, gpu))
    if set(map(type, names)) - {str}:
        names = [v if type(v) is str else ("" if v is None else str(v)) for v in names]
    # Intern names so the regex classification runs once per distinct kernel name.
    codes, distinct = intern_values(names, n)
    kind = np.array([kernel_kind(v) for v in distinct], dtype=np.int8)[codes] if n else np.zeros(0, np.int8)
    file_codes = np.array([names_seen.setdefault(v, len(names_seen)) for v in distinct] or [0], np.int32)[codes]
    kind[np.fromiter(map(MEMORY_CATS.__contains__, map(_get_cat, gpu)), dtype=bool, count=n)] = GpuKind.MEMORY

    args = _args_of(gpu)
    stream = list(map(_get_stream, args))
    device = list(map(_get_device, args))
    if loose:
        _check_streams(file, gpu, stream, chunk)
    if None in stream or None in device:
        if not loose:
            raise _NeedsLooseDecode  # fall back to tid / pid, which only the loose decode keeps
        stream = [e.tid if v is None else v for v, e in zip(stream, gpu)]
        device = [e.pid if v is None else v for v, e in zip(device, gpu)]
    start = _fast_floats(gpu, _get_ts)
    if start is None:
        start = _float_column(file, gpu, "ts", chunk)
    _check_finite(file, gpu, start, "ts", chunk)
    dur = _fast_floats(gpu, _get_dur)
    if dur is None:  # a missing dur is an error, not a zero-length event
        dur = _float_column(file, gpu, "dur", chunk)
    _check_finite(file, gpu, dur, "dur", chunk, nonnegative=True)
    stream_ids = _int_column(stream)
    out_of_range = np.flatnonzero((stream_ids < -(2**31)) | (stream_ids > 2**31 - 1))
    if len(out_of_range):
        i = int(out_of_range[0])
        record = _record_of(chunk, gpu[i])
        raise InputError(
            file,
            f"traceEvents[{record - 1}]: GPU event stream out of range: {stream[i]!r}",
            line=record,
            field="stream",
        )
    return {
        "name_code": file_codes,
        "kind": kind,
        "start_us": start,
        "dur_us": dur,
        "stream": stream_ids.astype(np.int32),
        "device": _int_column(device),
        "correlation": _int_column(list(map(_get_correlation, args))),
        "external_id": _int_column(list(map(_get_external_id, args))),
    }


def _runtime_columns(runtime: list, loose: bool) -> dict:
    """ts (NaN where not a number), correlation and External id of runtime calls."""
    ts = None
    if not loose:  # typed: numbers or None
        try:
            ts = np.fromiter(map(_get_ts, runtime), dtype=np.float64, count=len(runtime))
        except TypeError:
            pass
    if ts is None:
        ts = np.asarray([e.ts if _is_number(e.ts) else np.nan for e in runtime], dtype=np.float64)
    args = _args_of(runtime)
    return {
        "ts": ts,
        "correlation": _int_column(list(map(_get_correlation, args))),
        "external_id": _int_column(list(map(_get_external_id, args))),
    }


def _launch_times(gpu: dict, runtime: dict) -> np.ndarray:
    """Start of each GPU event's runtime call: by correlation id, else by External id."""
    n = len(gpu["start_us"])
    launch = np.full(n, np.nan)
    if len(runtime["ts"]) == 0 or n == 0:
        return launch
    todo = gpu["correlation"] >= 0
    if todo.any():
        idx = last_match(runtime["correlation"], gpu["correlation"][todo])
        launch[todo] = np.where(idx >= 0, runtime["ts"][idx], np.nan)
    todo = np.flatnonzero(np.isnan(launch))
    if len(todo):  # older traces link kernels to launches by External id only
        idx = last_match(runtime["external_id"], gpu["external_id"][todo])
        launch[todo] = np.where(idx >= 0, runtime["ts"][idx], np.nan)
    return launch


def last_match(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of the last element of `keys` equal to each query, -1 when absent."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.searchsorted(sorted_keys, queries, side="right") - 1
    hit = pos >= 0
    hit[hit] = sorted_keys[pos[hit]] == queries[hit]
    hit &= queries >= 0
    out = np.full(len(queries), -1, dtype=np.int64)
    out[hit] = order[pos[hit]]
    return out


def _step_windows(marks: list) -> list[tuple[int, float, float]]:
    windows = []
    for e in marks:
        match = _STEP_NAME.match(e.name)
        if match is None or not _is_number(e.ts) or not _is_number(e.dur):
            continue
        windows.append((int(match.group(1)), float(e.ts), float(e.ts) + float(e.dur)))
    windows.sort(key=lambda w: w[1])
    return windows


def _file_metadata(file: str, rank: int, info: Any, columns: dict, windows, n: int) -> dict:
    """One file's facts, in the shape of metadata["kineto"]."""
    key = str(rank)
    part: dict[str, Any] = {"ranks": [rank]}
    if isinstance(info, dict) and info.get("world_size") is not None:
        part["world_size"] = info["world_size"]
    part["files"] = {key: [file]}
    part["devices"] = {key: np.unique(columns["device"]).tolist()}
    part["streams"] = {key: np.unique(columns["stream"]).tolist()}
    part["gpu_events"] = {key: n}
    part["steps"] = {key: [[s, a, b] for s, a, b in windows]}
    return part


def merge_kineto_metadata(result: ReadResult, part: dict) -> None:
    """Fold one file's (or several files') metadata["kineto"] into the upload's; a rank
    may come in several files (e.g. two profiling windows of one run), so per-rank
    entries accumulate."""
    kineto = result.info.metadata.setdefault("kineto", {})
    kineto["ranks"] = sorted(set(kineto.get("ranks", [])) | set(part.get("ranks", [])))
    if "world_size" in part:
        kineto["world_size"] = part["world_size"]
    for field_name in ("files", "devices", "streams"):
        into = kineto.setdefault(field_name, {})
        for key, values in part.get(field_name, {}).items():
            into[key] = sorted(set(into.get(key, [])) | set(values))
    counts = kineto.setdefault("gpu_events", {})
    for key, n in part.get("gpu_events", {}).items():
        counts[key] = counts.get(key, 0) + n
    steps = kineto.setdefault("steps", {})
    for key, windows in part.get("steps", {}).items():
        steps[key] = sorted(steps.get(key, []) + windows, key=lambda w: w[1])


FORMAT_SPECS = (
    FormatSpec(
        "kineto",
        read_kineto,
        "``.json`` object with traceEvents / schemaVersion / deviceProperties / distributedInfo (`looks_like_kineto`)",
        head=looks_like_kineto,
        order=30,
        carries={"gpu_events": "PyTorch profiler (Kineto) traces: *.json or *.json.gz, one per rank"},
    ),
)
