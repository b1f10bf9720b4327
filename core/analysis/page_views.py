"""Views of the big analysis results: what the dashboard's pages draw, bounded in size.

A long-tail result of 256 engines x 1,000 steps is ~15 MB of JSON (eight per-engine
columns per step) and an imbalance result ~5 MB (two loads per rank per step), and both
grow with steps x ranks. The stored result stays exact; the API answers two views of it:

`page_view(kind, result, load=...)` -- what the pages' figures and cards read, of a size
bounded whatever the trace: the per-step scalars the line charts draw (O(steps)), the
whole-run ``summary`` as is, and one step x rank heatmap of at most HEATMAP_ROWS rows
and HEATMAP_CELLS cells. A heatmap cell is a block of consecutive steps (columns) and of
consecutive ranks or engines (rows), as many as it takes to stay under the cap; a cell's
value is the mean over the block's values (one value -- the step's own -- while the
trace fits, so small traces draw exactly what the full result gives):

- ``longtail``: per step the fields of LONGTAIL_STEP_FIELDS; ``engine_heatmap``
  {``steps`` / ``step_last``: each column's first and last step, ``engines`` /
  ``engine_last``: each row's first and last engine id (of the sorted union over the
  steps), ``steps_per_cell`` / ``engines_per_cell`` (1 / 1 unbinned), ``idle_pct``: rows x columns of the mean idle fraction in whole percents
  (round half to even of the float32 percent; None where no engine ran)}.
- ``imbalance``: one load (``load``: "tokens" or "cost", the page's choice), per step
  the ratios and savings the charts draw; ``load_heatmap`` {``steps`` / ``step_last``,
  ``ranks`` / ``rank_last``, ``steps_per_cell`` / ``ranks_per_cell``, ``mean`` (per column: the mean of the steps' mean rank
  loads), ``recorded``: rows x columns of the mean load per rank as float32 bytes
  {"dtype": "f4", "shape": [rows, columns], "bdata": base64 little-endian, row-major},
  Plotly's own typed-array encoding}; the page draws recorded / mean.

`steps_page(result, offset, limit)` -- the full-resolution step entries, as stored, a
page of at most STEPS_PAGE_MAX steps at a time, with the rest of the result.

Other kinds have no page view: their result is returned unchanged.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

PAGE_VIEW = "page"
STEPS_VIEW = "steps"
LOADS = ("tokens", "cost")
HEATMAP_CELLS = 1 << 16  # at most 64 Ki cells: ~0.35 MB as float32 bytes in base64
HEATMAP_ROWS = 256  # at most 256 rows (ranks or engines) in a page's heatmap
STEPS_PAGE_MAX = 100  # step entries per page of the full-resolution rows
# per step, per load: what the imbalance page's ratio and saving charts read
IMBALANCE_STEP_FIELDS = (
    "mean",
    "max_over_mean",
    "max_over_min",
    "kk_max_over_mean",
    "kk_max_over_min",
    "lpt_max_over_mean",
    "lpt_max_over_min",
    "saving",
    "best_split",
)
# read by the saving chart only where a step has no `saving` (results from before it existed)
IMBALANCE_SAVING_FALLBACK = ("kk_saving", "lpt_saving")
# per step: what the long-tail figures (and the overview's fallback idle share) read
LONGTAIL_STEP_FIELDS = (
    "step",
    "engine_time",
    "idle_within_engines",
    "idle_waiting",
    "idle_fraction",
    "tail_time_share",
    "tail_sample_share",
    "tail_seconds",
    "tail_tied",
    "basis",
)


def page_view(kind: str, result: dict | None, *, load: str = "tokens") -> dict | None:
    """The page view of a `kind` result (see the module doc); None stays None."""
    if result is None:
        return None
    if kind == "longtail":
        return longtail_page(result)
    if kind == "imbalance":
        return imbalance_page(result, load)
    return result


def steps_page(result: dict | None, offset: int = 0, limit: int = STEPS_PAGE_MAX) -> dict | None:
    """The result with only its step entries [offset, offset + limit) (as stored, in the
    stored order) and ``view`` {name, offset, limit, total}; a result without a step list
    is returned unchanged."""
    if result is None or not isinstance(result.get("steps"), list):
        return result
    if not 1 <= limit <= STEPS_PAGE_MAX or offset < 0:
        raise ValueError(f"a page is 1 to {STEPS_PAGE_MAX} steps from an offset >= 0")
    steps = result["steps"]
    out = {k: v for k, v in result.items() if k != "steps"}
    out.update(
        view={"name": STEPS_VIEW, "offset": offset, "limit": limit, "total": len(steps)},
        steps=steps[offset : offset + limit],
    )
    return out


def f4_bytes(matrix: np.ndarray) -> dict:
    """A matrix (NaN: missing) as float32 bytes in base64, row-major, with its shape."""
    arr = np.ascontiguousarray(matrix, dtype="<f4")
    return {"dtype": "f4", "shape": list(arr.shape), "bdata": base64.b64encode(arr.tobytes()).decode("ascii")}


def whole_percents(fractions: Any) -> list[int | None]:
    """The engine heatmap's cells: 100 x fraction as float32, rounded half to even (None
    for a missing or non-finite value)."""
    f = np.array([math.nan if v is None else float(v) for v in fractions], dtype=np.float64)
    cells = np.round((100.0 * f).astype(np.float32))
    return [int(c) if math.isfinite(c) else None for c in cells.tolist()]


def window_starts(n: int, most: int) -> np.ndarray:
    """Starts of the fewest equal windows (the last may be shorter) that cover n items in
    at most `most` windows: one item per window when n <= most."""
    width = max(1, -(-n // max(1, most)))
    return np.arange(0, n, width, dtype=np.int64)


def heatmap_windows(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(row starts, column starts) of a rows x columns heatmap binned to at most
    HEATMAP_ROWS rows and HEATMAP_CELLS cells."""
    r0 = window_starts(rows, HEATMAP_ROWS)
    return r0, window_starts(cols, HEATMAP_CELLS // max(1, len(r0)))


def block_means(matrix: np.ndarray, r0: np.ndarray, c0: np.ndarray) -> np.ndarray:
    """Means of the blocks of a matrix from the row and column starts, over each block's
    finite values (NaN where it has none); a 1 x 1 block's mean is its value."""
    rows, cols = matrix.shape
    if len(r0) == rows and len(c0) == cols:
        return matrix.astype(np.float64)
    if rows == 0 or cols == 0:
        return np.full((len(r0), len(c0)), np.nan)
    finite = np.isfinite(matrix)
    sums = np.add.reduceat(np.add.reduceat(np.where(finite, matrix, 0.0), r0, axis=0), c0, axis=1)
    counts = np.add.reduceat(np.add.reduceat(finite.astype(np.int64), r0, axis=0), c0, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _width(starts: np.ndarray, n: int) -> int:
    """Items per window (the last may have fewer)."""
    return int(starts[1]) if len(starts) > 1 else max(1, n)


def _bounds(keys: list, starts: np.ndarray) -> tuple[list, list]:
    """(first key, last key) of each window."""
    ends = np.append(starts[1:], len(keys)) - 1
    return [keys[i] for i in starts.tolist()], [keys[i] for i in ends.tolist()]


def _axes(step_ids: list, c0: np.ndarray, row_keys: list, r0: np.ndarray, row: str) -> dict:
    """A heatmap's axes: each column's first and last step, each row's first and last
    `row` key (engine, rank), and how many of each a cell spans."""
    first, last = _bounds(step_ids, c0)
    r_first, r_last = _bounds(row_keys, r0)
    return {
        "steps": first,
        "step_last": last,
        f"{row}s": r_first,
        f"{row}_last": r_last,
        "steps_per_cell": _width(c0, len(step_ids)),
        f"{row}s_per_cell": _width(r0, len(row_keys)),
    }


def longtail_page(result: dict) -> dict:
    out = {k: v for k, v in result.items() if k != "steps"}
    steps = sorted(result.get("steps") or [], key=lambda s: s["step"])
    with_engines = [s for s in steps if isinstance(s.get("engine"), dict)]
    engines = sorted({e for s in with_engines for e in s["engine"].get("engine", [])})
    pos = {e: i for i, e in enumerate(engines)}
    idle = np.full((len(engines), len(with_engines)), np.nan)
    for j, s in enumerate(with_engines):
        ids, fractions = s["engine"].get("engine", []), s["engine"].get("idle_fraction", [])
        for e, v in zip(ids, fractions):
            idle[pos[e], j] = math.nan if v is None else v
    r0, c0 = heatmap_windows(*idle.shape)
    cells = block_means(idle, r0, c0)
    out.update(
        view={"name": PAGE_VIEW},
        steps=[{k: s[k] for k in LONGTAIL_STEP_FIELDS if k in s} for s in steps],
        engine_heatmap={
            **_axes([s["step"] for s in with_engines], c0, engines, r0, "engine"),
            "idle_pct": [whole_percents(row) for row in cells.tolist()],
        },
    )
    return out


def imbalance_page(result: dict, load: str = "tokens") -> dict:
    if load not in LOADS:
        raise ValueError(f"unknown load '{load}' (one of {', '.join(LOADS)})")
    out = {k: v for k, v in result.items() if k != "steps"}
    steps = sorted(result.get("steps") or [], key=lambda s: s["step"])
    page = []
    for s in steps:
        entry: dict[str, Any] = {"step": s["step"]}
        f = s.get(load)
        if isinstance(f, dict):
            kept = {k: f[k] for k in IMBALANCE_STEP_FIELDS if k in f}
            if f.get("saving") is None:
                kept |= {k: f[k] for k in IMBALANCE_SAVING_FALLBACK if k in f}
            entry[load] = kept
        page.append(entry)
    drawn = [s for s in steps if isinstance(s.get(load), dict)]
    recorded = [s[load].get("recorded") or [] for s in drawn]
    ranks = max((len(r) for r in recorded), default=0)
    if all(len(r) == ranks for r in recorded):  # every step has every rank: one conversion (None: NaN)
        loads = np.array(recorded, dtype=np.float64).reshape(len(drawn), ranks).T
    else:
        loads = np.full((ranks, len(drawn)), np.nan)
        for j, rec in enumerate(recorded):
            loads[: len(rec), j] = np.array(rec, dtype=np.float64)
    r0, c0 = heatmap_windows(*loads.shape)
    cells = block_means(loads, r0, c0)
    means = np.array([[math.nan if s[load].get("mean") is None else s[load]["mean"] for s in drawn]])
    mean = block_means(means.reshape(1, len(drawn)), np.zeros(1, dtype=np.int64), c0)[0]
    out.update(
        view={"name": PAGE_VIEW, "load": load},
        steps=page,
        load_heatmap={
            **_axes([s["step"] for s in drawn], c0, list(range(ranks)), r0, "rank"),
            "mean": [v if math.isfinite(v) else None for v in mean.tolist()],
            "recorded": f4_bytes(cells),
        },
    )
    return out
