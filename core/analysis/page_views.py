"""Page views of the big analysis results: what the dashboard's pages draw, small.

A long-tail result of 256 engines x 1,000 steps is ~19 MB of JSON (eight per-engine
columns per step) and an imbalance result ~5 MB (two loads per rank per step); a page
draws a fraction of that. `page_view(kind, result, load=...)` keeps only the fields the
pages' figures and cards read, in a form from which they draw exactly the same figures:

- ``longtail``: the result without the per-engine column dicts; instead ``engines`` (the
  sorted union of engine ids over the steps) and per step ``engine_idle_pct``: each
  engine's idle fraction in whole percents, aligned with ``engines`` (None where the step
  has no such engine) -- the engine heatmap draws whole percents (round half to even of
  the float32 percent), so it draws the same cells from either form.
- ``imbalance``: one load (``load``: "tokens" or "cost", the page's choice), per step the
  ratios and savings the charts draw and ``recorded`` (load per rank) as float32 bytes
  {"dtype": "f4", "bdata": base64 little-endian} -- the precision the load heatmap draws
  (Plotly's own typed-array encoding); the whole-run ``summary`` of both loads as is.

Other kinds have no page view: their result is returned unchanged.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

PAGE_VIEW = "page"
LOADS = ("tokens", "cost")
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


def f4_bytes(values: Any) -> dict:
    """Numbers (None: NaN) as float32 bytes in base64, Plotly's typed-array form."""
    arr = np.array([math.nan if v is None else float(v) for v in values or []], dtype="<f4")
    return {"dtype": "f4", "bdata": base64.b64encode(arr.tobytes()).decode("ascii")}


def whole_percents(fractions: Any) -> list[int | None]:
    """The engine heatmap's cells: 100 x fraction as float32, rounded half to even (None
    for a missing or non-finite value)."""
    f = np.array([math.nan if v is None else float(v) for v in fractions], dtype=np.float64)
    cells = np.round((100.0 * f).astype(np.float32))
    return [int(c) if math.isfinite(c) else None for c in cells.tolist()]


def longtail_page(result: dict) -> dict:
    out = {k: v for k, v in result.items() if k != "steps"}
    steps = result.get("steps") or []
    with_engines = [s for s in steps if isinstance(s.get("engine"), dict)]
    engines = sorted({e for s in with_engines for e in s["engine"].get("engine", [])})
    pos = {e: i for i, e in enumerate(engines)}
    page = []
    for s in steps:
        entry = {k: s[k] for k in LONGTAIL_STEP_FIELDS if k in s}
        if isinstance(s.get("engine"), dict):
            row: list[int | None] = [None] * len(engines)
            ids, fractions = s["engine"].get("engine", []), s["engine"].get("idle_fraction", [])
            for e, v in zip(ids, whole_percents(fractions[: len(ids)])):
                row[pos[e]] = v
            entry["engine_idle_pct"] = row
        page.append(entry)
    out.update(view={"name": PAGE_VIEW}, engines=engines, steps=page)
    return out


def imbalance_page(result: dict, load: str = "tokens") -> dict:
    if load not in LOADS:
        raise ValueError(f"unknown load '{load}' (one of {', '.join(LOADS)})")
    out = {k: v for k, v in result.items() if k != "steps"}
    page = []
    for s in result.get("steps") or []:
        entry: dict[str, Any] = {"step": s["step"]}
        f = s.get(load)
        if isinstance(f, dict):
            kept = {k: f[k] for k in IMBALANCE_STEP_FIELDS if k in f}
            if f.get("saving") is None:
                kept |= {k: f[k] for k in IMBALANCE_SAVING_FALLBACK if k in f}
            entry[load] = {**kept, "recorded": f4_bytes(f.get("recorded"))}
        page.append(entry)
    out.update(view={"name": PAGE_VIEW, "load": load}, steps=page)
    return out
