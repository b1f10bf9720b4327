"""Per-step series of a trace, from its step rows (O(steps)): the metric explorer's data.

Keys: the stage timings (``t_gen`` ... ``t_step``), the step counts (``n_samples``,
``prompt_tokens``, ``response_tokens``), every per-step length statistic of the
summaries over all samples (``response/p99``, ``prompt/mean``, ``total/tail_ratio`` ...)
and every metric key the framework logged (``actor/entropy``, ``timing_s/gen`` ...),
plus the per-step figures of the trace's finished default analyses, named
``<kind>/<field>`` (``longtail/idle_fraction``, ``imbalance/tokens.max_over_mean`` ...):
every number of a result's per-step entries, one level of nesting deep.
"""

from __future__ import annotations

from core.analysis.tables import STEP_TIMING_COLUMNS

SERIES_LIMIT = 64
COUNT_KEYS = ("n_samples", "prompt_tokens", "response_tokens")
SUMMARY_FIELDS = ("response", "prompt", "total")
# summary entries that are not one number per step
_NOT_SCALAR = {"hist"}


def _summary_values(summary: dict) -> dict[str, float]:
    out = {}
    for field in SUMMARY_FIELDS:
        stats = ((summary or {}).get(field) or {}).get("all") or {}
        for name, value in stats.items():
            if name not in _NOT_SCALAR and (type(value) in (int, float) or value is None):
                out[f"{field}/{name}"] = value
    return out


def _row_values(row) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for key in STEP_TIMING_COLUMNS:
        v = getattr(row, key)
        if v is not None:
            values[key] = v
    if row.n_samples:
        for key in COUNT_KEYS:
            values[key] = getattr(row, key)
    values.update(_summary_values(row.summary))
    for key, v in (row.metrics or {}).items():
        values.setdefault(key, v)
    return values


def analysis_series(results: dict[str, dict]) -> dict[str, dict[int, float]]:
    """{"<kind>/<field>": {step: value}} from analysis results with per-step entries."""
    out: dict[str, dict[int, float]] = {}
    for kind, result in results.items():
        for entry in (result or {}).get("steps") or []:
            if not isinstance(entry, dict) or type(entry.get("step")) is not int:
                continue
            step = entry["step"]
            for name, value in entry.items():
                if name == "step":
                    continue
                if type(value) in (int, float):
                    out.setdefault(f"{kind}/{name}", {})[step] = value
                elif isinstance(value, dict):
                    for sub, v in value.items():
                        if type(v) in (int, float):
                            out.setdefault(f"{kind}/{name}.{sub}", {})[step] = v
    return out


def series_keys(rows) -> list[str]:
    """Every key with a value at some step: timings, counts, length statistics, metrics."""
    seen: dict[str, None] = {}
    for row in rows:
        for key, v in _row_values(row).items():
            if v is not None:
                seen.setdefault(key, None)
    timing = [k for k in STEP_TIMING_COLUMNS if k in seen]
    counts = [k for k in COUNT_KEYS if k in seen]
    stats = sorted(k for k in seen if k.split("/", 1)[0] in SUMMARY_FIELDS and k not in timing)
    rest = sorted(k for k in seen if k not in set(timing) | set(counts) | set(stats))
    return timing + counts + stats + rest


def series_values(rows, keys: list[str]) -> tuple[list[int], dict[str, list[float | None]]]:
    """(steps, {key: value per step, None where the step lacks it})."""
    steps = [int(r.step) for r in rows]
    per_row = [_row_values(r) for r in rows]
    return steps, {k: [v.get(k) for v in per_row] for k in keys}
