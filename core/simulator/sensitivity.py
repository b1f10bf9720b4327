"""How far a what-if speedup moves with the model's uncalibrated parameters.

A replay's speedup of policy B over A rests on parameters the trace may not pin down:
the engine's roofline efficiencies (unless the engine was calibrated), the training MFU
(unless fitted to measured update times), and the training scale and colocation
factors (never fitted: one layout cannot separate them from the MFU). `speedup_band`
replays A and B again with each such parameter at the low and then the high end of its
declared range (`RANGES`), one at a time and on both sides alike, and reports the
point estimate with the [min, max] of every speedup seen:

  speedup     the point estimate (the replay at the configured values)
  band        [min, max] over the point and every low/high replay
  parameters  [{parameter, low, high, speedup_low, speedup_high}] in `RANGES` order
  replays     how many extra replays of A and B it took (2 per parameter)

One at a time rather than every corner: 2·n replays instead of 2^n, and what moves the
band is named. The ranges are assumptions declared here, not measurements, except the
training scale and colocation ones (verl's table, docs/simulator.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.simulator.config import ClusterConfig


@dataclass(frozen=True)
class ParamRange:
    """A `ClusterConfig` field's plausible range; `part` says what calibration fixes it
    ("engine": calibrated coefficients, "train_mfu": a fitted MFU, "never")."""

    name: str
    low: float
    high: float
    part: str
    why: str


RANGES: tuple[ParamRange, ...] = (
    ParamRange(
        "bandwidth_efficiency", 0.5, 0.85, "engine", "achieved share of HBM bandwidth in decode (roofline engine)"
    ),
    ParamRange("rollout_mfu", 0.3, 0.7, "engine", "achieved share of peak FLOP/s in prefill (roofline engine)"),
    ParamRange("train_mfu", 0.2, 0.5, "train_mfu", "achieved MFU of a training rank"),
    ParamRange("train_serial_fraction", 0.012, 0.024, "never", "verl trainer-alone pairs (16, 32) and (32, 64) ranks"),
    ParamRange(
        "colocation_overhead",
        1.18,
        1.48,
        "never",
        "verl colocated vs trainer-alone pairs at 32-128 GPUs, s 0.012-0.024",
    ),
)


def uncalibrated(*, engine_calibrated: bool, mfu_calibrated: bool) -> tuple[ParamRange, ...]:
    """The ranges a replay's calibration left open."""
    fixed = {"engine"} if engine_calibrated else set()
    if mfu_calibrated:
        fixed.add("train_mfu")
    return tuple(r for r in RANGES if r.part not in fixed)


ReplayPair = Callable[[dict[str, float]], float | None]


def speedup_band(point: float, replay_pair: ReplayPair, ranges: Sequence[ParamRange] = RANGES) -> dict[str, Any]:
    """The band around `point`: `replay_pair(overrides)` replays A and B with the
    cluster fields in `overrides` changed and returns B's speedup over A (None when
    undefined, left out of the band)."""
    rows = []
    seen = [point]
    for r in ranges:
        lo, hi = replay_pair({r.name: r.low}), replay_pair({r.name: r.high})
        seen += [s for s in (lo, hi) if s is not None]
        rows.append({"parameter": r.name, "low": r.low, "high": r.high, "speedup_low": lo, "speedup_high": hi})
    return {"speedup": point, "band": [min(seen), max(seen)], "parameters": rows, "replays": 2 * len(rows)}


def with_overrides(cluster: ClusterConfig, overrides: dict[str, float]) -> ClusterConfig:
    """`cluster` with the fields in `overrides` (values from `RANGES`) replaced."""
    changed: dict[str, Any] = dict(overrides)
    return dataclasses.replace(cluster, **changed)


__all__ = ["RANGES", "ParamRange", "speedup_band", "uncalibrated", "with_overrides"]
