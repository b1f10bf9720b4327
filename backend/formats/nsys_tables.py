"""The tables of an Nsight Systems SQLite export, read into numpy columns and checked.

NVIDIA's documented export schema (``nsys export --type sqlite``; "SQLite Export Schema
Reference" of the Nsight Systems docs): every table is created lazily, so a report
without memset has no ``CUPTI_ACTIVITY_KIND_MEMSET``, and columns were added over the
versions (``greenContextId`` in 2024, ``copyCount`` in 2025). What is read here:

- ``StringIds(id, value)``: the strings other tables refer to by id;
- ``CUPTI_ACTIVITY_KIND_KERNEL``: start, end (ns), deviceId, streamId, correlationId,
  globalPid, demangledName (else shortName: a StringIds id);
- ``CUPTI_ACTIVITY_KIND_MEMCPY``: the same ids, bytes, copyKind, srcKind, dstKind;
- ``CUPTI_ACTIVITY_KIND_MEMSET``: the same ids, bytes, memKind (memoryKind before 2021);
- ``CUPTI_ACTIVITY_KIND_RUNTIME``: start, end, globalTid, correlationId, nameId;
- ``NVTX_EVENTS``: start, end, eventType, globalTid, text or textId (ranges only:
  push/pop and start/end, with an end);
- ``ENUM_CUDA_MEMCPY_OPER`` / ``ENUM_CUDA_MEM_KIND``: the labels of copy and memory kinds
  (the numbering NVIDIA documents is used when a report lacks them);
- ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``, ``TARGET_INFO_GPU`` (device names) and
  ``META_DATA_EXPORT`` / ``EXPORT_META_DATA`` (the schema version), as trace metadata.

Checks, each a 422 naming the file, the row (its rowid, as "line") and the
``TABLE.column``: a required column missing from a table, a value of another type than
the schema's (SQLite stores what it is given), a NULL where the schema says NOT NULL, an
end before its start, a name id StringIds does not hold.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import numpy as np

from backend.formats.base import InputError

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
GPU_TABLES = (KERNEL, MEMCPY, MEMSET)

# NVTX_EVENTS.eventType of ranges (ENUM_NSYS_EVENT_TYPE): NvtxPushPopRange,
# NvtxStartEndRange and their NVTXT twins; marks (34) have no duration.
NVTX_RANGE_TYPES = (59, 60, 70, 71)
# The documented numbering, for reports exported without the ENUM_ tables.
MEMCPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD",
    12: "DtoH",
    13: "DtoD",
}
MEM_KINDS = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
FETCH_ROWS = 65_536


@dataclass(frozen=True)
class Col:
    """One column to read: its name in the table (the first present of `names`), whether
    the schema declares it NOT NULL, and the value used when it is NULL or absent."""

    key: str
    names: tuple[str, ...]
    required: bool = False
    default: int = -1


GPU_COLUMNS = (
    Col("start", ("start",), required=True),
    Col("end", ("end",), required=True),
    Col("device", ("deviceId",), required=True),
    Col("stream", ("streamId",), required=True),
    Col("correlation", ("correlationId",)),
    Col("process", ("globalPid",)),
)
KERNEL_COLUMNS = (*GPU_COLUMNS, Col("name", ("demangledName", "shortName"), required=True))
MEMCPY_COLUMNS = (
    *GPU_COLUMNS,
    Col("bytes", ("bytes",), default=0),
    Col("copy_kind", ("copyKind",), default=0),
    Col("src_kind", ("srcKind",), default=7),
    Col("dst_kind", ("dstKind",), default=7),
)
MEMSET_COLUMNS = (
    *GPU_COLUMNS,
    Col("bytes", ("bytes",), default=0),
    Col("mem_kind", ("memKind", "memoryKind"), default=2),
)
RUNTIME_COLUMNS = (
    Col("start", ("start",), required=True),
    Col("end", ("end",), required=True),
    Col("thread", ("globalTid",)),
    Col("correlation", ("correlationId",)),
    Col("name", ("nameId",), required=True),
)
NVTX_COLUMNS = (
    Col("start", ("start",), required=True),
    Col("end", ("end",)),
    Col("event_type", ("eventType",), required=True),
    Col("thread", ("globalTid",)),
    Col("text_id", ("textId",)),
)


def table_names(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns_of(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}


def _resolve(file: str, table: str, present: set[str], cols: tuple[Col, ...]) -> dict[str, str | None]:
    """{key: the column's name in this table, or None when an optional one is absent}."""
    out: dict[str, str | None] = {}
    for col in cols:
        found = next((n for n in col.names if n in present), None)
        if found is None and col.required:
            raise InputError(
                file, f"Nsight Systems export: {table} has no column {col.names[0]}", field=f"{table}.{col.names[0]}"
            )
        out[col.key] = found
    return out


def _check_types(file: str, db: sqlite3.Connection, table: str, names: dict[str, str | None], cols) -> None:
    """The first row holding a value of another type than an integer (or a NULL in a
    NOT NULL column) is refused, naming its rowid and column: one scan in SQLite."""
    tests = []
    for col in cols:
        name = names[col.key]
        if name is None:
            continue
        allowed = "('integer')" if col.required else "('integer', 'null')"
        tests.append((name, f'typeof("{name}") NOT IN {allowed}'))
    if not tests:
        return
    flags = ", ".join(t for _, t in tests)
    row = db.execute(
        f'SELECT rowid, {flags} FROM "{table}" WHERE {" OR ".join(t for _, t in tests)} LIMIT 1'
    ).fetchone()
    if row is None:
        return
    name = next(n for (n, _), bad in zip(tests, row[1:]) if bad)
    value = db.execute(f'SELECT "{name}" FROM "{table}" WHERE rowid = ?', (row[0],)).fetchone()[0]
    problem = "missing value" if value is None else f"expected an integer, got {value!r:.60}"
    raise InputError(file, f"Nsight Systems export: {problem}", line=int(row[0]), field=f"{table}.{name}")


def read_table(
    file: str, db: sqlite3.Connection, table: str, cols: tuple[Col, ...], where: str = ""
) -> dict[str, np.ndarray]:
    """The columns of `table` as int64 arrays ordered by start (ties in row order; the
    rowid kept as "rowid"), after the type checks; an end before its start is refused.
    `cols` start with start and end."""
    names = _resolve(file, table, _columns_of(db, table), cols)
    _check_types(file, db, table, names, cols)
    exprs = ["rowid"] + [f'COALESCE("{names[c.key]}", {c.default})' if names[c.key] else str(c.default) for c in cols]
    keys = ["rowid"] + [c.key for c in cols]
    cursor = db.execute(f'SELECT {", ".join(exprs)} FROM "{table}" {where}')
    parts = []
    while rows := cursor.fetchmany(FETCH_ROWS):
        parts.append(np.array(rows, dtype=np.int64))
    data = np.concatenate(parts) if parts else np.zeros((0, len(keys)), dtype=np.int64)
    data = data[np.argsort(data[:, 1], kind="stable")]  # by start (the second column)
    out = {k: data[:, i] for i, k in enumerate(keys)}
    end = next(c for c in cols if c.key == "end")
    bad = out["end"] < out["start"]
    if not end.required:  # an open NVTX range (no end) is skipped by the reader, not refused
        bad &= out["end"] != end.default
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(
            file,
            f"Nsight Systems export: end {int(out['end'][i])} is before start {int(out['start'][i])}",
            line=int(out["rowid"][i]),
            field=f"{table}.{names['end'] or 'end'}",
        )
    return out


def read_strings(file: str, db: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    if "StringIds" not in tables:
        return {}
    try:
        return {int(i): str(v) for i, v in db.execute("SELECT id, value FROM StringIds")}
    except (TypeError, ValueError):
        raise InputError(file, "Nsight Systems export: StringIds ids must be integers", field="StringIds.id") from None


def check_string_ids(file: str, table: str, field: str, ids: np.ndarray, rowid: np.ndarray, strings: dict) -> None:
    """Every id refers to a StringIds row (else the first that does not is refused)."""
    known = np.fromiter(strings, dtype=np.int64, count=len(strings))
    missing = np.flatnonzero(~np.isin(ids, known))
    if len(missing):
        i = int(missing[0])
        raise InputError(
            file,
            f"Nsight Systems export: string id {int(ids[i])} is not in StringIds",
            line=int(rowid[i]),
            field=f"{table}.{field}",
        )


def enum_labels(db: sqlite3.Connection, tables: set[str], table: str, fallback: dict[int, str]) -> dict[int, str]:
    """id -> label of an ENUM_ table (copy kinds shortened to Kineto's HtoD form)."""
    if table not in tables:
        return dict(fallback)
    out = dict(fallback)
    for row in db.execute(f'SELECT * FROM "{table}"'):
        if table == "ENUM_CUDA_MEMCPY_OPER" and isinstance(row[1], str):
            short = row[1].rsplit("_", 1)[-1]  # CUDA_MEMCPY_KIND_HTOD -> HTOD -> HtoD
            out[int(row[0])] = short[0] + short[1:].replace("TO", "to", 1) if "TO" in short else short.title()
        elif len(row) >= 3 and isinstance(row[2], str):
            out[int(row[0])] = row[2]
    return out


def export_facts(db: sqlite3.Connection, tables: set[str]) -> dict:
    """Session start (UTC ns), GPU names and the export's schema version, when present."""
    facts: dict = {}
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        if row is not None and isinstance(row[0], int):
            facts["session_start_utc_ns"] = row[0]
    if "TARGET_INFO_GPU" in tables and {"id", "name"} <= _columns_of(db, "TARGET_INFO_GPU"):
        facts["gpus"] = {str(i): str(n) for i, n in db.execute("SELECT id, name FROM TARGET_INFO_GPU")}
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if meta in tables:
            for name, value in db.execute(f'SELECT name, value FROM "{meta}"'):
                if name in ("EXPORT_SCHEMA_VERSION", "EXPORT_PRODUCT_VERSION"):
                    facts[name.lower()] = str(value)
    return facts
