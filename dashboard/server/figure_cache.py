"""Built figures, cached per (team, trace or job, options).

What a page draws for a ready trace or a finished job never changes (traces are
immutable once ingested, finished jobs keep their result), so a callback's figures
are built once and served again on the next visit or filter toggle: plotly's figure
objects cost ~20 ms each to build and validate, a page has up to eight. The team's
key is part of the cache key, so a team only ever gets figures built for it.

    figures = cached(("imbalance", job_id, load, metric), lambda: (fig_a, fig_b, ...))
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from dashboard.api import session

T = TypeVar("T")
CACHE_SIZE = 96
_cache: OrderedDict[tuple, object] = OrderedDict()
_lock = threading.Lock()


def cached(parts: tuple, build: Callable[[], T]) -> T:
    """`build()`'s value for these key parts (and the signed-in team's API root and
    key), built on the first call. Build only from immutable data: a ready trace or a
    succeeded job (not a running one)."""
    api = session.api()
    key = (api.root, hashlib.sha256((api.api_key or "").encode()).hexdigest(), *parts)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]  # type: ignore[return-value]
    value = build()
    with _lock:
        _cache[key] = value
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return value


_versions: dict[tuple, tuple] = {}


def note_trace_version(trace: dict) -> bool:
    """Traces grow (files attached, live runs): when a trace's version (update time and
    counts) differs from the one last seen, its figures are dropped. True when it did."""
    api = session.api()
    tid = trace.get("id")
    version = (trace.get("updated_at"), trace.get("n_steps"), trace.get("n_samples"), trace.get("live"))
    key = (api.root, tid)
    with _lock:
        before = _versions.get(key)
        _versions[key] = version
        if before is None or before == version:
            return False
        for k in [k for k in _cache if len(k) > 3 and k[0] == api.root and k[3] in (tid, str(tid))]:
            del _cache[k]
    return True


def clear() -> None:
    with _lock:
        _cache.clear()
