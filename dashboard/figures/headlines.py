"""Headline figures of analysis results (pure functions of API payloads), shared by the
overview cards and the many-run comparison."""

from __future__ import annotations


def dig(obj, *path, default=None):
    """obj[path[0]][path[1]]... or `default` when any level is missing."""
    for key in path:
        if isinstance(obj, dict) and key in obj:
            obj = obj[key]
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return default
    return obj


def _mean(values) -> float | None:
    vals = [float(v) for v in values or [] if v is not None]
    return sum(vals) / len(vals) if vals else None


def imbalance_headline(result: dict | None) -> tuple[float | None, float | None]:
    """(mean max/mean token load over steps, whole-run time saved by the best split)."""
    if not result:
        return None, None
    return (
        dig(result, "summary", "tokens", "max_over_mean", "mean"),
        _best_saved(dig(result, "summary", "tokens") or {}),
    )


def _best_saved(tokens: dict) -> float | None:
    """Whole-run time saved by the best split per step (never negative)."""
    v = tokens.get("time_saved")
    if isinstance(v, (int, float)):
        return max(0.0, float(v))
    found = [tokens.get(k) for k in ("kk_time_saved", "lpt_time_saved")]
    cands = [float(c) for c in found if isinstance(c, (int, float))]
    return max([0.0, *cands]) if cands else None


def rollout_idle_share(result: dict | None) -> float | None:
    """Mean rollout idle fraction over steps from a "longtail" result."""
    if not result:
        return None
    for path in (("summary", "idle_fraction", "mean"), ("summary", "idle_fraction"), ("summary", "idle_share")):
        v = dig(result, *path)
        if isinstance(v, (int, float)):
            return float(v)
    return _mean([s.get("idle_fraction") for s in result.get("steps", []) if isinstance(s, dict)])


def gpu_idle_share(result: dict | None) -> float | None:
    """Mean over ranks of the GPU idle share (0..1) from a "gpu_timeline" result
    (`temporal`: one row per rank with idle_pct)."""
    rows = dig(result, "temporal")
    pct = [r.get("idle_pct") for r in rows if isinstance(r, dict)] if isinstance(rows, list) else None
    m = _mean(pct) if pct else None
    return None if m is None else m / 100.0
