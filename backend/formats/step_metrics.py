"""Shared by the per-step metric readers (TensorBoard, W&B history): fold (step, key,
value) points into ``steps`` batches the way `backend.formats.verl_logs` does.

`StepMetrics` keeps at most `max_steps` steps in memory; past that it hands back the
lowest half as a batch (the pipeline merges ``steps`` batches on (step), later keys
win), so memory stays bounded however long the file is.
"""

from __future__ import annotations

import math

import numpy as np

from backend.formats.base import TableBatch
from backend.formats.verl_logs import TIMING_ALIASES

MAX_BUFFERED_STEPS = 4096


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def steps_batch(merged: dict[int, dict[str, float]]) -> TableBatch:
    """One ``steps`` batch: `step`, the stage timings found (`timing_s/*` etc. onto
    t_gen ... t_step, first alias wins) and ``metrics`` with every key."""
    steps = sorted(merged)
    cols: dict = {"step": np.asarray(steps, dtype=np.int32)}
    keys: set[str] = set()
    for data in merged.values():
        keys.update(data)
    for column, aliases in TIMING_ALIASES.items():
        present = [k for k in aliases if k in keys]
        if not present:
            continue
        values = np.full(len(steps), np.nan)
        for i, step in enumerate(steps):
            data = merged[step]
            key = next((k for k in present if k in data), None)
            if key is not None:
                values[i] = data[key]
        if not np.isnan(values).all():
            cols[column] = values
    cols["metrics"] = [{k: _finite(v) for k, v in merged[s].items()} for s in steps]
    return TableBatch("steps", cols)


class StepMetrics:
    """A bounded buffer of per-step metrics."""

    def __init__(self, max_steps: int = MAX_BUFFERED_STEPS):
        self.max_steps = max_steps
        self.merged: dict[int, dict[str, float]] = {}
        self.points = 0

    def add(self, step: int, key: str, value: float) -> TableBatch | None:
        """Record one point; returns a batch to yield when the buffer overflowed."""
        self.points += 1
        row = self.merged.get(step)
        if row is None:
            row = self.merged[step] = {}
            if len(self.merged) > self.max_steps:
                row[key] = value
                return self._spill()
        row[key] = value
        return None

    def _spill(self) -> TableBatch:
        keep = sorted(self.merged)[len(self.merged) // 2 :]
        out = {s: v for s, v in self.merged.items() if s < keep[0]}
        self.merged = {s: self.merged[s] for s in keep}
        return steps_batch(out)

    def finish(self) -> TableBatch | None:
        if not self.merged:
            return None
        batch, self.merged = steps_batch(self.merged), {}
        return batch
