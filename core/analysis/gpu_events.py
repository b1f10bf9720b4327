"""Every event of a Kineto trace as columns: CPU ops, CUDA runtime calls, user
annotations, GPU kernels / memcpy / memset, flow arrows and metadata.

The `gpu_events` table holds the GPU side only; the analyses that need the CPU side
(CUDA queue length, kernel-launch statistics, user-annotation breakdown, trace diff) and
the complete Chrome-trace export read a `TraceEvents` instead. The Kineto reader writes
one per uploaded file (backend/formats/kineto_events.py) and the store concatenates them.

Columns (one value per event, in file order, files one after another):
rank, ph (index into PHASES), cat, name (indices into `cats` / `names`), ts, dur
(microseconds, NaN when absent), pid, tid (integers; a non-integer id is stored as
-2 - its index into `labels`), stream, device, correlation, external_id (-1 when absent),
bytes, bandwidth_gbps (memcpy / memset args, NaN when absent), flow_id (-1 when absent),
flow_bp_e (1 when a flow end binds to the enclosing slice, "bp": "e").
`meta`: the metadata events (ph "M") as plain dicts with their rank.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

PHASES = ("X", "s", "f", "i", "M", "other")
PH_CODE = {p: i for i, p in enumerate(PHASES)}
PH_COMPLETE, PH_FLOW_START, PH_FLOW_END, PH_INSTANT, PH_META, PH_OTHER = range(6)

INT_COLUMNS = ("rank", "pid", "tid", "stream", "device", "correlation", "external_id", "flow_id")
FLOAT_COLUMNS = ("ts", "dur", "bytes", "bandwidth_gbps")
CODE_COLUMNS = ("ph", "cat", "name", "flow_bp_e")


@dataclass
class TraceEvents:
    rank: np.ndarray
    ph: np.ndarray
    cat: np.ndarray
    name: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    bytes: np.ndarray
    bandwidth_gbps: np.ndarray
    flow_id: np.ndarray
    flow_bp_e: np.ndarray
    names: list[str] = field(default_factory=list)
    cats: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    meta: list[dict] = field(default_factory=list)

    COLUMNS = INT_COLUMNS + FLOAT_COLUMNS + CODE_COLUMNS

    def __len__(self) -> int:
        return len(self.rank)

    def take(self, index: np.ndarray) -> TraceEvents:
        """The events under a boolean mask or index array (string tables shared)."""
        cols = {f.name: getattr(self, f.name)[index] for f in fields(self) if f.name in self.COLUMNS}
        return TraceEvents(**cols, names=self.names, cats=self.cats, labels=self.labels, meta=self.meta)

    def cat_id(self, cat: str) -> int:
        """Index of a category, -1 when the trace has none of it."""
        try:
            return self.cats.index(cat)
        except ValueError:
            return -1

    def cat_mask(self, *cats: str) -> np.ndarray:
        ids = [self.cat_id(c) for c in cats]
        return np.isin(self.cat, [i for i in ids if i >= 0])

    def name_mask(self, wanted: Container[str]) -> np.ndarray:
        """Events whose name is in `wanted` (a set of strings)."""
        hit = np.fromiter((n in wanted for n in self.names), dtype=bool, count=len(self.names))
        return hit[self.name] if len(self.names) else np.zeros(len(self), dtype=bool)

    def ranks(self) -> list[int]:
        return sorted({int(r) for r in np.unique(self.rank)})

    @classmethod
    def concat(cls, parts: Sequence[Any]) -> TraceEvents:
        """One table of several (per-file) tables, with merged string tables. A part is
        anything with the columns as attributes, `len()`, names, cats, labels and meta: a
        TraceEvents, or a file read one column at a time (the kept events), so that only
        the output and one part's column are in memory at once."""
        names: dict[str, int] = {}
        cats: dict[str, int] = {}
        labels: dict[str, int] = {}
        maps = []
        for p in parts:
            maps.append(
                (
                    np.array([names.setdefault(n, len(names)) for n in p.names] or [0], dtype=np.int32),
                    np.array([cats.setdefault(c, len(cats)) for c in p.cats] or [0], dtype=np.int32),
                    np.array([labels.setdefault(x, len(labels)) for x in p.labels] or [0], dtype=np.int64),
                )
            )
        sizes = [len(p) for p in parts]
        cols: dict[str, np.ndarray] = {}
        for c in cls.COLUMNS:
            out: np.ndarray | None = None
            lo = 0
            for p, size, (name_map, cat_map, label_map) in zip(parts, sizes, maps):
                v = getattr(p, c)
                if c == "name":
                    v = name_map[v]
                elif c == "cat":
                    v = cat_map[v]
                elif c in ("pid", "tid") and p.labels:
                    # a label's code is -2 - its index; a negative id beyond the labels
                    # is a real one (a fixture has tid -247463936) and stays as it is
                    code = -2 - v
                    is_label = (code >= 0) & (code < len(p.labels))
                    v = np.where(is_label, -2 - label_map[np.where(is_label, code, 0)], v)
                if out is None:
                    out = np.empty(sum(sizes), dtype=v.dtype)
                out[lo : lo + size] = v
                lo += size
            cols[c] = out if out is not None else np.zeros(0)
        return cls(
            **cols,
            names=list(names),
            cats=list(cats),
            labels=list(labels),
            meta=[m for p in parts for m in p.meta],
        )
