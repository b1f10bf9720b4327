"""Nsight Systems SQLite exports (``nsys export --type sqlite``) -> `gpu_events` batches.

The same GPU event store the Kineto reader fills (backend/formats/kineto.py), so every
GPU analysis and the timeline read an nsys trace as a Kineto one. The tables read and
their checks: backend/formats/nsys_tables.py.

- GPU events: kernels (name: the demangled name, as Kineto names them), memcpy
  (``Memcpy HtoD (Pageable -> Device)``) and memset (``Memset (Device)``); stream =
  streamId; kind by HTA's name rules (NCCL kernels are communication, copies memory).
- Ranks: each (process, device) pair that ran GPU work is one rank, so a file may be one
  rank (verl profiles each worker process into its own report) or hold several devices
  (``nsys profile torchrun ...``). A file named ``rank-N`` / ``rank_N`` / ``rankN`` numbers
  its pairs N, N+1, ... (in device order); the pairs of other files take the lowest ranks
  no file before them took (files are read in natural name order). CUDA runtime calls and NVTX ranges
  belong to the rank of their process (the first, when a process drove several devices;
  in a file of one rank, every process's).
- Times: nanoseconds in the export, microseconds in the store, counted from 2020-01-01 UTC
  (`EPOCH_NS`): a report's times are relative to its session start
  (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``), so several files line up on the
  wall clock; times already in UTC (``nsys export --ts-normalize``) are taken as they are.
- launch: the start of the runtime call with the same correlationId in the same
  process (CUPTI numbers correlations per process); NaN when the call is not in the file.
- steps: NVTX ranges named ``ProfilerStep#N`` (PyTorch's profiler under
  ``emit_nvtx``, or a trainer's own ranges) give the step windows; a GPU event belongs
  to step N when its launch starts inside ProfilerStep#N on its rank, else -1.

Trace metadata goes to ``result.info.metadata["kineto"]`` (ranks, files, devices,
streams, event counts and step windows per rank: the GPU event store's facts, merged as
the Kineto reader merges them) and ``["nsys"]`` (per file: its ranks, GPUs, schema and
product versions, session start). Every event read is also kept beside the database
(backend/formats/nsys_events.py).
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.kineto import BATCH_ROWS, assign_steps, last_match, merge_kineto_metadata, rank_from_file_name
from backend.formats.kineto_events import EVENTS_DIR_STATE, intern_values
from backend.formats.nsys_events import CATS, EventPart, keep_events, project_ranges
from backend.formats.nsys_tables import (
    GPU_TABLES,
    KERNEL,
    KERNEL_COLUMNS,
    MEM_KINDS,
    MEMCPY,
    MEMCPY_COLUMNS,
    MEMCPY_KINDS,
    MEMSET,
    MEMSET_COLUMNS,
    NVTX,
    NVTX_COLUMNS,
    NVTX_RANGE_TYPES,
    RUNTIME,
    RUNTIME_COLUMNS,
    check_string_ids,
    enum_labels,
    export_facts,
    read_strings,
    read_table,
    table_names,
)
from backend.formats.spec import FormatSpec
from core.analysis.gpu_kinds import GpuKind, kernel_kind

SQLITE_MAGIC = b"SQLite format 3\x00"
EPOCH_NS = 1_577_836_800 * 10**9  # 2020-01-01T00:00:00Z
ABSOLUTE_NS = 10**17  # timestamps past this (1973) are UTC already, not session-relative
USED_RANKS_STATE = "nsys_ranks_used"
_STEP_NAME = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_API_VERSION = re.compile(r"_v\d+$")


def looks_like_nsys(head: bytes) -> bool:
    """An SQLite database file (the only SQLite format read is the nsys export)."""
    return head.startswith(SQLITE_MAGIC)


@contextmanager
def _database(source: Source):
    """The export opened read-only from a private copy (sqlite3 needs a file path)."""
    fd, path = tempfile.mkstemp(suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as out, source.open() as stream:
            shutil.copyfileobj(stream, out, 1 << 20)
        db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            db.execute("PRAGMA trusted_schema = OFF")  # an upload's views run no functions
            yield db
        except sqlite3.DatabaseError as exc:
            raise InputError(source.name, f"not a readable Nsight Systems SQLite export: {exc}") from None
        finally:
            db.close()
    finally:
        os.unlink(path)


@dataclass
class _Gpu:
    """The file's GPU events (kernels, memcpy, memset) in start order."""

    start: np.ndarray  # ns
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    process: np.ndarray  # globalPid >> 24 (host and process id), -1 unknown
    names: list[str]
    cat: np.ndarray  # index into nsys_events.CATS: kernel, gpu_memcpy, gpu_memset
    bytes: np.ndarray  # NaN for kernels


def read_nsys(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """Yield `gpu_events` batches for one export; see the module docstring."""
    file = source.name
    with _database(source) as db:
        tables = table_names(db)
        if not tables & {*GPU_TABLES, RUNTIME, NVTX, "StringIds"}:
            raise InputError(
                file,
                "an SQLite database, but not an Nsight Systems export (no StringIds, CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS table)",
            )
        strings = read_strings(file, db, tables)
        gpu = _read_gpu(file, db, tables, strings)
        runtime = _read_runtime(file, db, tables, strings)
        nvtx = _read_nvtx(file, db, tables, strings)
        facts = export_facts(db, tables)
    base = _time_base(facts, gpu.start)
    ranks, process_rank = _assign_ranks(file, gpu, result)
    processes = np.unique(np.r_[gpu.process, runtime["process"], nvtx["process"]])
    launch = _launch_ns(gpu, runtime, processes)
    cpu_rank = _cpu_ranks(process_rank, set(ranks.tolist()))
    windows = _step_windows(nvtx, cpu_rank, base)
    us = _to_us(gpu.start, base)
    dur = (gpu.end - gpu.start) / 1e3
    launch_us = np.where(launch >= 0, _to_us(np.maximum(launch, 0), base), np.nan)
    step = np.full(len(us), -1, dtype=np.int32)
    for r in np.unique(ranks).tolist():
        sel = ranks == r
        step[sel] = assign_steps(launch_us[sel], windows.get(r, []))
    _merge_metadata(result, file, gpu, ranks, windows, facts)
    folder = result.state.get(EVENTS_DIR_STATE)
    if folder is not None:
        parts, names = _gpu_parts(gpu, ranks, us, dur, processes)
        parts += _cpu_parts(runtime, nvtx, cpu_rank, base, processes, names)
        parts += _projected_ranges(nvtx, cpu_rank, gpu, ranks, launch, base, names)
        keep_events(result.state, folder, file, parts, list(names))
    yield from _batches(file, result, gpu, ranks, step, us, dur, launch_us, windows)


def _batches(file, result, gpu: _Gpu, ranks, step, us, dur, launch_us, windows) -> Iterator[TableBatch]:
    if not windows:
        result.skipped.append(f"{file}: no ProfilerStep#N NVTX ranges, every GPU event has step -1")
    n = len(us)
    if n == 0:
        result.skipped.append(f"{file}: no GPU events (CUPTI kernels, memcpy, memset)")
        return
    codes, distinct = intern_values(gpu.names, n)
    kinds = np.array([kernel_kind(name) for name in distinct], np.int8)[codes]
    kinds[gpu.cat != 0] = GpuKind.MEMORY
    for lo in range(0, n, BATCH_ROWS):
        hi = min(lo + BATCH_ROWS, n)
        yield TableBatch(
            "gpu_events",
            {
                "rank": ranks[lo:hi].astype(np.int32),
                "stream": gpu.stream[lo:hi].astype(np.int32),
                "step": step[lo:hi],
                "kind": kinds[lo:hi],
                "name": gpu.names[lo:hi],
                "start_us": us[lo:hi],
                "dur_us": dur[lo:hi],
                "launch_us": launch_us[lo:hi],
            },
        )


# --- reading the tables ----------------------------------------------------------------


def _read_gpu(file: str, db, tables: set[str], strings: dict[int, str]) -> _Gpu:
    parts = []
    if KERNEL in tables:
        k = read_table(file, db, KERNEL, KERNEL_COLUMNS)
        check_string_ids(file, KERNEL, "demangledName", k["name"], k["rowid"], strings)
        parts.append((k, [strings[i] for i in k["name"].tolist()], 0, np.full(len(k["start"]), np.nan)))
    if MEMCPY in tables:
        m = read_table(file, db, MEMCPY, MEMCPY_COLUMNS)
        copy = enum_labels(db, tables, "ENUM_CUDA_MEMCPY_OPER", MEMCPY_KINDS)
        mem = enum_labels(db, tables, "ENUM_CUDA_MEM_KIND", MEM_KINDS)
        names = [
            f"Memcpy {copy.get(c, 'Unknown')} ({mem.get(s, 'Unknown')} -> {mem.get(d, 'Unknown')})"
            for c, s, d in zip(m["copy_kind"].tolist(), m["src_kind"].tolist(), m["dst_kind"].tolist())
        ]
        parts.append((m, names, 1, m["bytes"].astype(np.float64)))
    if MEMSET in tables:
        s = read_table(file, db, MEMSET, MEMSET_COLUMNS)
        mem = enum_labels(db, tables, "ENUM_CUDA_MEM_KIND", MEM_KINDS)
        names = [f"Memset ({mem.get(kind, 'Unknown')})" for kind in s["mem_kind"].tolist()]
        parts.append((s, names, 2, s["bytes"].astype(np.float64)))
    return _merge_gpu(parts)


def _merge_gpu(parts: list) -> _Gpu:
    def cat(key: str) -> np.ndarray:
        return np.concatenate([p[0][key] for p in parts]) if parts else np.zeros(0, np.int64)

    start = cat("start")
    order = np.argsort(start, kind="stable")
    names = [n for p in parts for n in p[1]]
    cats = np.concatenate([np.full(len(p[1]), p[2], np.int8) for p in parts]) if parts else np.zeros(0, np.int8)
    process = cat("process")
    return _Gpu(
        start=start[order],
        end=cat("end")[order],
        device=cat("device")[order],
        stream=cat("stream")[order],
        correlation=cat("correlation")[order],
        process=np.where(process >= 0, process >> 24, -1)[order],
        names=[names[i] for i in order.tolist()],
        cat=cats[order],
        bytes=(np.concatenate([p[3] for p in parts]) if parts else np.zeros(0))[order],
    )


def _no_rows(*keys: str) -> dict[str, np.ndarray]:
    return {k: np.zeros(0, np.int64) for k in keys}


def _read_runtime(file: str, db, tables: set[str], strings: dict[int, str]) -> dict:
    if RUNTIME not in tables:
        return {**_no_rows("start", "end", "thread", "correlation", "process"), "names": []}
    rt = read_table(file, db, RUNTIME, RUNTIME_COLUMNS)
    check_string_ids(file, RUNTIME, "nameId", rt["name"], rt["rowid"], strings)
    distinct = {i: _API_VERSION.sub("", strings[i]) for i in np.unique(rt["name"]).tolist()}
    rt["process"] = np.where(rt["thread"] >= 0, rt["thread"] >> 24, -1)
    return {**rt, "names": [distinct[i] for i in rt["name"].tolist()]}


def _read_nvtx(file: str, db, tables: set[str], strings: dict[int, str]) -> dict:
    """NVTX ranges with an end (marks and open ranges have no duration) and their text."""
    if NVTX not in tables:
        return {**_no_rows("start", "end", "thread", "process"), "texts": []}
    where = f"WHERE eventType IN {NVTX_RANGE_TYPES}"
    nv = read_table(file, db, NVTX, NVTX_COLUMNS, where)
    keep = nv["end"] >= 0
    nv = {k: v[keep] for k, v in nv.items()}
    texts: dict[int, str] = {}
    if "text" in {r[1] for r in db.execute(f'PRAGMA table_info("{NVTX}")')}:
        texts = {int(i): str(t) for i, t in db.execute(f"SELECT rowid, text FROM {NVTX} {where} AND text IS NOT NULL")}
    nv["process"] = np.where(nv["thread"] >= 0, nv["thread"] >> 24, -1)
    return {
        **nv,
        "texts": [texts.get(r, strings.get(t, "")) for r, t in zip(nv["rowid"].tolist(), nv["text_id"].tolist())],
    }


# --- ranks, times, launches, steps -----------------------------------------------------


def _assign_ranks(file: str, gpu: _Gpu, result: ReadResult) -> tuple[np.ndarray, dict[int, int]]:
    """Rank of each GPU event and of each process (see the module docstring)."""
    if not len(gpu.start):
        return np.zeros(0, np.int64), {}
    pairs, inverse = np.unique(np.stack([gpu.device, gpu.process], axis=1), axis=0, return_inverse=True)
    named = rank_from_file_name(file)
    used: set[int] = result.state.setdefault(USED_RANKS_STATE, set())
    if named is not None:
        pair_rank = named + np.arange(len(pairs))
    else:  # the lowest ranks no file before this one took
        free = (r for r in range(len(used) + len(pairs) + 1) if r not in used)
        pair_rank = np.array([next(free) for _ in range(len(pairs))], dtype=np.int64)
    used.update(pair_rank.tolist())
    process_rank: dict[int, int] = {}
    for (_device, process), rank in zip(pairs.tolist(), pair_rank.tolist()):
        process_rank.setdefault(process, rank)
    return pair_rank[inverse.reshape(-1)], process_rank


def _cpu_ranks(process_rank: dict[int, int], ranks: set[int]):
    """The rank of a CPU event's process; in a one-rank file, that rank for every process."""
    only = next(iter(ranks)) if len(ranks) == 1 else None

    def rank_of(process: np.ndarray) -> np.ndarray:
        if only is not None:
            return np.full(len(process), only, dtype=np.int64)
        return np.array([process_rank.get(p, -1) for p in process.tolist()], dtype=np.int64)

    return rank_of


def _time_base(facts: dict, starts: np.ndarray) -> int:
    """What to add to the export's ns so they count from `EPOCH_NS` on the UTC clock."""
    if len(starts) and int(starts.max()) >= ABSOLUTE_NS:
        return -EPOCH_NS
    if "session_start_utc_ns" in facts:
        return int(facts["session_start_utc_ns"]) - EPOCH_NS
    return 0


def _to_us(ns: np.ndarray, base: int) -> np.ndarray:
    """ns + base in microseconds, rounded once (whole us exactly, then the ns part)."""
    whole, part = np.divmod(ns.astype(np.int64) + base, 1000)
    return whole.astype(np.float64) + part / 1e3


def _correlation_keys(processes: np.ndarray, process: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """One int64 per (process, correlationId): the process's place in `processes`
    (sorted) above the 32-bit id; -1 where the id is unknown."""
    code = np.searchsorted(processes, process).astype(np.int64)
    return np.where(corr >= 0, (code << 32) | (corr & 0xFFFFFFFF), -1)


def _launch_ns(gpu: _Gpu, runtime: dict, processes: np.ndarray) -> np.ndarray:
    """Start (ns) of each GPU event's runtime call in its process, -1 when absent."""
    out = np.full(len(gpu.start), -1, dtype=np.int64)
    if not len(runtime["start"]) or not len(out):
        return out
    calls = _correlation_keys(processes, runtime["process"], runtime["correlation"])
    idx = last_match(calls, _correlation_keys(processes, gpu.process, gpu.correlation))
    hit = idx >= 0
    out[hit] = runtime["start"][idx[hit]]
    return out


def _step_windows(nvtx: dict, cpu_rank, base: int) -> dict[int, list[tuple[int, float, float]]]:
    """{rank: [(step, start_us, end_us), ...]} from the ProfilerStep#N NVTX ranges."""
    windows: dict[int, list[tuple[int, float, float]]] = {}
    hits = [(i, m) for i, t in enumerate(nvtx["texts"]) if (m := _STEP_NAME.match(t))]
    if not hits:
        return windows
    rows = np.array([i for i, _ in hits], dtype=np.int64)
    ranks = cpu_rank(nvtx["process"][rows])
    starts = _to_us(nvtx["start"][rows], base)
    ends = _to_us(nvtx["end"][rows], base)
    for (_, match), r, a, b in zip(hits, ranks.tolist(), starts.tolist(), ends.tolist()):
        if r >= 0:
            windows.setdefault(r, []).append((int(match.group(1)), a, b))
    return {r: sorted(w, key=lambda x: x[1]) for r, w in windows.items()}


# --- metadata and kept events ----------------------------------------------------------


def _merge_metadata(result: ReadResult, file: str, gpu: _Gpu, ranks: np.ndarray, windows: dict, facts: dict) -> None:
    part: dict = {"ranks": sorted({int(r) for r in ranks.tolist()}), "files": {}, "devices": {}, "streams": {}}
    part["gpu_events"], part["steps"] = {}, {}
    for r in part["ranks"]:
        sel = ranks == r
        key = str(r)
        part["files"][key] = [file]
        part["devices"][key] = np.unique(gpu.device[sel]).tolist()
        part["streams"][key] = np.unique(gpu.stream[sel]).tolist()
        part["gpu_events"][key] = int(sel.sum())
        part["steps"][key] = [[s, a, b] for s, a, b in windows.get(r, [])]
    merge_kineto_metadata(result, part)
    nsys = result.info.metadata.setdefault("nsys", {"files": {}})
    nsys["files"][file] = {"ranks": part["ranks"], **facts}


def _codes(values: list[str], names: dict[str, int]) -> np.ndarray:
    return np.fromiter((names.setdefault(v, len(names)) for v in values), np.int32, len(values))


def _gpu_parts(gpu: _Gpu, ranks, us, dur, processes) -> tuple[list[EventPart], dict[str, int]]:
    """The GPU events as kept events (names numbered in the returned table)."""
    names: dict[str, int] = {}
    name_codes = _codes(gpu.names, names)
    corr = _correlation_keys(processes, gpu.process, gpu.correlation)
    parts = []
    for code, cat in enumerate(CATS[:3]):
        s = gpu.cat == code
        parts.append(
            EventPart(
                cat,
                ranks[s],
                name_codes[s],
                us[s],
                dur[s],
                pid=gpu.device[s],
                tid=gpu.stream[s],
                correlation=corr[s],
                stream=gpu.stream[s],
                bytes=None if code == 0 else gpu.bytes[s],
            )
        )
    return parts, names


def _cpu_parts(runtime: dict, nvtx: dict, cpu_rank, base: int, processes, names: dict) -> list[EventPart]:
    """Runtime calls and NVTX ranges of processes with a rank, as kept events."""
    parts = []
    for cat, table, texts in (("cuda_runtime", runtime, "names"), ("user_annotation", nvtx, "texts")):
        if not len(table["start"]):
            continue
        rank = cpu_rank(table["process"])
        s = rank >= 0
        start, end, process = table["start"][s], table["end"][s], table["process"][s]
        corr = table.get("correlation")
        parts.append(
            EventPart(
                cat,
                rank[s],
                _codes([t for t, keep in zip(table[texts], s.tolist()) if keep], names),
                _to_us(start, base),
                (end - start) / 1e3,
                pid=np.where(process >= 0, process & 0xFFFFFF, -1),
                tid=np.where(table["thread"][s] >= 0, table["thread"][s] & 0xFFFFFF, -1),
                correlation=np.full(len(start), -1) if corr is None else _correlation_keys(processes, process, corr[s]),
            )
        )
    return parts


def _projected_ranges(nvtx: dict, cpu_rank, gpu: _Gpu, ranks, launch, base: int, names: dict) -> list[EventPart]:
    """Each NVTX range on the GPU timeline: the span of the GPU work it launched."""
    rank = cpu_rank(nvtx["process"])
    s = np.flatnonzero(rank >= 0)
    if not len(s) or not len(gpu.start):
        return []
    hit, start, end, first = project_ranges(
        (rank[s], nvtx["start"][s], nvtx["end"][s]), (ranks, launch, gpu.start, gpu.end)
    )
    rows = s[hit]
    return [
        EventPart(
            "gpu_user_annotation",
            rank[rows],
            _codes([nvtx["texts"][i] for i in rows.tolist()], names),
            _to_us(start, base),
            (end - start) / 1e3,
            pid=gpu.device[first],
            tid=gpu.stream[first],
            correlation=np.full(len(rows), -1),
            stream=gpu.stream[first],
        )
    ]


FORMAT_SPECS = (
    FormatSpec(
        "nsys-sqlite",
        read_nsys,
        "an SQLite database (``SQLite format 3`` header): an Nsight Systems export "
        "(``nsys export --type sqlite``), whatever its name",
        head=lambda head, name: looks_like_nsys(head),
        order=10,
    ),
)
