"""Reward against response length, per step: does the long tail pay for itself?

Reads the `samples` columns step, response_len, reward (NaN: unknown), validate and
repeat_period (core/analysis/repetition.py; -1: no text). Per step, over the training
samples with a known reward (validation samples only with `include_validation`):

``buckets``: response lengths in fixed power-of-two buckets [0, 64), [64, 128), …,
    [2^k, 2^(k+1)) (the same edges for every step and trace): per step and bucket the
    sample count, the mean reward and the share of samples with no reward (reward <=
    `no_reward_at`, 0 by default: verl's failed answers score 0, DAPO's -1).
``steps``: per step ``n``; the tail — the longest `tail_fraction` (10%) of the step's
    samples: every sample at least as long as the k-th longest, k = ceil(10% x n), so
    ties at the cut are all in — with ``tail_n``, ``tail_min_len``,
    ``tail_no_reward_share`` and ``tail_mean_reward``; the same for the rest
    (``rest_no_reward_share``, ``rest_mean_reward``); ``no_reward_share`` over the step;
    ``repetition_share`` (share of the step's samples with text whose response ends in a
    repetition; null without text) and ``tail_repetition_share``; ``partial``: fewer than
    `min_samples` (10) samples with a reward, so the tail is one or two samples — shown,
    kept out of the summary.
``summary``: means over the steps that are not partial (``eligible_steps`` of them) of
    tail_no_reward_share, rest_no_reward_share, no_reward_share and repetition_share;
    ``partial_steps`` lists the others.

The figure that says whether the long tail pays: a tail whose no-reward share is well
above the rest's spends the longest (most expensive) generations on answers that earn
nothing.
"""

from __future__ import annotations

import math

import numpy as np

from core.analysis.grouping import training_mask
from core.analysis.tables import TraceData
from core.jsonable import json_safe

BUCKET_FIRST = 64  # [0, 64) then doubling
DEFINITIONS = {
    "no_reward": "reward <= {no_reward_at} (verl scores a failed answer 0, DAPO -1)",
    "tail": "the step's longest {pct:g}% of samples: all at least as long as the k-th longest, k = ceil({pct:g}% x n)",
    "bucket": "response length in [lo, hi): [0, 64), then powers of two",
    "repetition": "the response's last 1,000 characters repeat a period of at most 333 characters "
    "(core/analysis/repetition.py)",
    "summary": "mean over steps with at least {min_samples} rewarded samples (partial steps left out)",
}


def bucket_of(lengths: np.ndarray) -> np.ndarray:
    """Bucket index: 0 for [0, 64), k for [64 * 2^(k-1), 64 * 2^k)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.zeros(len(lengths), dtype=np.int64)
    long = lengths >= BUCKET_FIRST
    out[long] = np.floor(np.log2(lengths[long] / BUCKET_FIRST)).astype(np.int64) + 1
    return out


def bucket_edges(index: int) -> tuple[int, int]:
    return (0, BUCKET_FIRST) if index == 0 else (BUCKET_FIRST << (index - 1), BUCKET_FIRST << index)


def analyze_reward_length(
    data: TraceData,
    tail_fraction: float = 0.1,
    no_reward_at: float = 0.0,
    min_samples: int = 10,
    include_validation: bool = False,
) -> dict:
    """Per-step reward by length bucket and the tail's no-reward share (module docstring)."""
    s = data.samples
    steps: list[dict] = []
    buckets: list[dict] = []
    if s is not None and s.reward is not None and len(s):
        reward = np.asarray(s.reward, dtype=np.float64)
        keep = training_mask(s.validate, len(s), include_validation) & ~np.isnan(reward)
        step = np.asarray(s.step, dtype=np.int64)[keep]
        length = np.asarray(s.response_len, dtype=np.int64)[keep]
        repeat = None if s.repeat_period is None else np.asarray(s.repeat_period, dtype=np.int64)[keep]
        reward = reward[keep]
        for st in np.unique(step).tolist():
            sel = step == st
            rep = None if repeat is None else repeat[sel]
            steps.append(_step_row(st, length[sel], reward[sel], rep, tail_fraction, no_reward_at, min_samples))
            buckets.extend(_bucket_rows(st, length[sel], reward[sel], no_reward_at))
    return _finish(steps, buckets, tail_fraction, no_reward_at, min_samples)


def _share(mask: np.ndarray) -> float | None:
    return float(mask.mean()) if len(mask) else None


def _step_row(
    step: int,
    length: np.ndarray,
    reward: np.ndarray,
    repeat: np.ndarray | None,
    fraction: float,
    no_reward_at: float,
    min_samples: int,
) -> dict:
    n = len(length)
    k = max(1, math.ceil(fraction * n))
    cut = np.sort(length)[n - k]
    tail = length >= cut
    none = reward <= no_reward_at
    row = {
        "step": int(step),
        "n": n,
        "tail_n": int(tail.sum()),
        "tail_min_len": int(cut),
        "no_reward_share": _share(none),
        "tail_no_reward_share": _share(none[tail]),
        "rest_no_reward_share": _share(none[~tail]),
        "tail_mean_reward": float(reward[tail].mean()),
        "rest_mean_reward": float(reward[~tail].mean()) if (~tail).any() else None,
        "repetition_share": None,
        "tail_repetition_share": None,
        "partial": n < min_samples,
    }
    if repeat is not None and (repeat >= 0).any():
        known = repeat >= 0
        row["repetition_share"] = _share(repeat[known] > 0)
        row["tail_repetition_share"] = _share(repeat[known & tail] > 0)
    return row


def _bucket_rows(step: int, length: np.ndarray, reward: np.ndarray, no_reward_at: float) -> list[dict]:
    index = bucket_of(length)
    rows = []
    for b in np.unique(index).tolist():
        sel = index == b
        lo, hi = bucket_edges(b)
        rows.append(
            {
                "step": int(step),
                "bucket": b,
                "lo": lo,
                "hi": hi,
                "n": int(sel.sum()),
                "mean_reward": float(reward[sel].mean()),
                "no_reward_share": float((reward[sel] <= no_reward_at).mean()),
            }
        )
    return rows


def _finish(steps: list[dict], buckets: list[dict], fraction: float, no_reward_at: float, min_samples: int) -> dict:
    steps = sorted(steps, key=lambda r: r["step"])
    eligible = [r for r in steps if not r["partial"]]

    def mean(key: str) -> float | None:
        values = [r[key] for r in eligible if r[key] is not None]
        return float(np.mean(values)) if values else None

    summary = {
        "eligible_steps": len(eligible),
        "partial_steps": [r["step"] for r in steps if r["partial"]],
        **{k: mean(k) for k in ("tail_no_reward_share", "rest_no_reward_share", "no_reward_share", "repetition_share")},
    }
    pct = 100 * fraction
    definitions = {
        k: v.format(no_reward_at=no_reward_at, pct=pct, min_samples=min_samples) for k, v in DEFINITIONS.items()
    }
    return json_safe(
        {
            "kind": "reward_length",
            "steps": steps,
            "buckets": sorted(buckets, key=lambda r: (r["step"], r["bucket"])),
            "summary": summary,
            "definitions": definitions,
        }
    )


def reduce_reward_length(
    partials: list[dict], tail_fraction: float = 0.1, no_reward_at: float = 0.0, min_samples: int = 10
) -> dict:
    """Merge results over disjoint step ranges (every figure is per step)."""
    steps = [r for p in partials for r in p.get("steps", [])]
    buckets = [r for p in partials for r in p.get("buckets", [])]
    return _finish(steps, buckets, tail_fraction, no_reward_at, min_samples)
