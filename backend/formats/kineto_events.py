"""Every event of an uploaded Kineto file, kept beside the database as columns.

The Kineto reader decodes each file once (a chunk of events at a time); besides the
`gpu_events` rows it writes, when
the ingest pipeline asks for it (``result.state[EVENTS_DIR_STATE]`` = a folder), the whole
file as `core.analysis.gpu_events.TraceEvents` columns: ``events-<i>.npz`` (numeric
columns, uncompressed numpy, ~110 bytes per event: about half the JSON) and ``events-<i>.json`` (file name, rank, the string tables
and the metadata events).

Why columns and not the uploaded JSON: the CPU-side analyses and the Chrome-trace export
then cost one `np.load` (a few ms per 100k events) instead of a
second JSON decode of the file; the original files are 5-10x larger uncompressed and
gzip would cost more to write than the reader spends decoding. What is dropped: event
args other than stream, device, correlation, External id, bytes and memory bandwidth
(cpu_op input shapes, kernel grid/block sizes...), so an exported trace carries every
event with its timing, ids and flows, but not those details.
"""

from __future__ import annotations

import json
import operator
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from core.analysis.gpu_events import FLOAT_COLUMNS, INT_COLUMNS, PH_CODE, PH_OTHER, TraceEvents

EVENTS_DIR_STATE = "kineto_events_dir"

_get = {k: operator.attrgetter(k) for k in ("ph", "cat", "name", "ts", "dur", "pid", "tid", "id", "bp", "args")}
_arg = {
    k: operator.attrgetter(k)
    for k in ("stream", "device", "correlation", "external_id", "bytes", "bandwidth", "name", "sort_index", "labels")
}


def _is_not_none(v) -> bool:
    return v is not None


class _FirstSeen(dict):
    """value -> its number in first-seen order; a value not seen yet is numbered when
    looked up (only then does Python code run: once per distinct value)."""

    def __missing__(self, key):
        code = self[key] = len(self)
        return code


def intern_values(values: Iterable, n: int) -> tuple[np.ndarray, list]:
    """(codes, distinct values in first-seen order) of `n` values: one dict lookup per
    value, no Python-level loop body and no list of the values (map + fromiter)."""
    index = _FirstSeen()
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=n)
    return codes, list(index)


def _codes(values: Iterable, n: int, table: dict) -> np.ndarray:
    codes, distinct = intern_values(values, n)
    remap = np.array([table.setdefault("" if v is None else str(v), len(table)) for v in distinct] or [0], np.int32)
    return remap[codes] if n else codes


def _ints(values: list, labels: dict | None = None) -> np.ndarray:
    try:  # integers only (the usual pid / tid): straight in
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        pass
    try:  # numbers and None (-> NaN -> -1); exact for ids below 2**53
        as_float = np.array(values, dtype=np.float64)
        if not (np.abs(as_float[~np.isnan(as_float)]) >= 2**53).any():
            return np.where(np.isnan(as_float), -1, as_float).astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full(len(values), -1, dtype=np.int64)
    for i, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, bool):
            out[i] = int(v)
            continue
        try:
            out[i] = int(v)
        except (TypeError, ValueError, OverflowError):
            if labels is not None:
                out[i] = -2 - labels.setdefault(str(v), len(labels))
    return out


def _floats(values: list) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)  # None -> NaN
    except (TypeError, ValueError):
        out = np.full(len(values), np.nan)
        for i, v in enumerate(values):
            try:
                out[i] = float(v)
            except (TypeError, ValueError):
                pass
        return out


_COLUMN_DTYPES = {
    **{k: np.int64 for k in INT_COLUMNS},
    **{k: np.float64 for k in FLOAT_COLUMNS},
    "ph": np.int8,
    "cat": np.int32,
    "name": np.int32,
    "flow_bp_e": np.int8,
}


def _chunk_columns(rank: int, events: list, names: dict, cats: dict, labels: dict) -> dict[str, np.ndarray]:
    """The columns of some decoded events (the reader's structs); their names, cats and
    labels are numbered in the tables given, which a file's chunks share."""
    n = len(events)
    ph_codes, ph_values = intern_values(map(_get["ph"], events), n)
    ph = np.array([PH_CODE.get(p, PH_OTHER) for p in ph_values] or [0], dtype=np.int8)[ph_codes]
    args = list(map(_get["args"], events))
    has_args = np.fromiter(map(_is_not_none, args), bool, n)
    present = [a for a in args if a is not None]

    def arg_column(key: str, kind: str) -> np.ndarray:
        values = list(map(_arg[key], present))
        col = _ints(values) if kind == "int" else _floats(values)
        out = np.full(n, -1 if kind == "int" else np.nan, dtype=col.dtype)
        out[has_args] = col
        return out

    bp_codes, bp_values = intern_values(map(_get["bp"], events), n)
    bp_e = np.array([v == "e" for v in bp_values] or [False], dtype=np.int8)[bp_codes]
    return {
        "rank": np.full(n, rank, dtype=np.int64),
        "ph": ph,
        "cat": _codes(map(_get["cat"], events), n, cats),
        "name": _codes(map(_get["name"], events), n, names),
        "ts": _floats(list(map(_get["ts"], events))),
        "dur": _floats(list(map(_get["dur"], events))),
        "pid": _ints(list(map(_get["pid"], events)), labels),
        "tid": _ints(list(map(_get["tid"], events)), labels),
        "stream": arg_column("stream", "int"),
        "device": arg_column("device", "int"),
        "correlation": arg_column("correlation", "int"),
        "external_id": arg_column("external_id", "int"),
        "bytes": arg_column("bytes", "float"),
        "bandwidth_gbps": arg_column("bandwidth", "float"),
        "flow_id": _ints(list(map(_get["id"], events)), labels),
        "flow_bp_e": bp_e,
    }


def _meta_entries(rank: int, events: list, ph: np.ndarray) -> list[dict]:
    meta = []
    for i in np.flatnonzero(ph == PH_CODE["M"]).tolist():
        e = events[i]
        a = e.args
        entry: dict[str, Any] = {"rank": rank, "name": e.name, "pid": e.pid, "tid": e.tid}
        if a is not None:
            entry["args"] = {k: getattr(a, k) for k in ("name", "sort_index", "labels") if getattr(a, k) is not None}
        meta.append(entry)
    return meta


class KeptColumns:
    """Every event of one file as columns, filled a chunk of decoded events at a time in
    file order (the reader decodes a file in chunks, so only a chunk's structs are alive)."""

    def __init__(self, rank: int, n: int):
        self.rank = rank
        self.columns: dict[str, np.ndarray] = {k: np.empty(n, dtype=t) for k, t in _COLUMN_DTYPES.items()}
        self._names: dict[str, int] = {}
        self._cats: dict[str, int] = {}
        self._labels: dict[str, int] = {}
        self._meta: list[dict] = []
        self._filled = 0

    def add(self, events: list) -> None:
        lo, hi = self._filled, self._filled + len(events)
        chunk = _chunk_columns(self.rank, events, self._names, self._cats, self._labels)
        for key, column in chunk.items():
            self.columns[key][lo:hi] = column
        self._meta.extend(_meta_entries(self.rank, events, chunk["ph"]))
        self._filled = hi

    def strings(self) -> dict:
        return {
            "rank": self.rank,
            "names": list(self._names),
            "cats": list(self._cats),
            "labels": list(self._labels),
            "meta": self._meta,
        }

    def save(self, folder: str | Path, index: int, file: str) -> None:
        """Write ``events-<index>.npz`` / ``.json`` into `folder`."""
        write_columns(folder, index, file, self.columns, self.strings())


def write_columns(folder: str | Path, index: int, file: str, columns: dict[str, Any], strings: dict) -> None:
    """One file's kept events (`TraceEvents` columns and string tables, from any reader
    of GPU traces) as ``events-<index>.npz`` / ``.json`` in `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / f"events-{index}.npz", **columns)  # (numpy's stubs take a keyword for allow_pickle)
    (folder / f"events-{index}.json").write_text(json.dumps({"file": file, **strings}))


class _KeptFile:
    """One kept file, its columns read from the .npz when asked (one at a time)."""

    def __init__(self, npz: Path, strings: dict):
        self._npz = np.load(npz)
        self.names, self.cats = strings["names"], strings["cats"]
        self.labels, self.meta = strings["labels"], strings["meta"]

    def __len__(self) -> int:
        return len(self._npz["ph"])

    def __getattr__(self, column: str) -> np.ndarray:
        if column.startswith("_"):
            raise AttributeError(column)
        return self._npz[column]

    def whole(self) -> TraceEvents:
        cols = {k: self._npz[k] for k in self._npz.files}
        return TraceEvents(**cols, names=self.names, cats=self.cats, labels=self.labels, meta=self.meta)

    def close(self) -> None:
        self._npz.close()


def load_events(folder: str | Path) -> TraceEvents | None:
    """The kept events of one trace (all its files), or None when nothing was kept."""
    folder = Path(folder)
    files = sorted(folder.glob("events-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    parts = [_KeptFile(js.with_suffix(".npz"), json.loads(js.read_text())) for js in files]
    try:
        if len(parts) < 2:
            return parts[0].whole() if parts else None
        return TraceEvents.concat(parts)
    finally:
        for part in parts:
            part.close()


def remove_events(folder: str | Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


__all__ = [
    "EVENTS_DIR_STATE",
    "INT_COLUMNS",
    "FLOAT_COLUMNS",
    "intern_values",
    "load_events",
    "remove_events",
    "KeptColumns",
    "write_columns",
]
