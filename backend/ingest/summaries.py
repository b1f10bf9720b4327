"""Per-step summaries computed once at the end of ingestion (pure numpy).

`StepAccumulator` keeps only the few int32 columns a summary needs while batches stream
past (about 17 bytes per sample), then `summaries()` computes, per step: counts, token
sums and, for prompt/response/total lengths (all samples and per task), the statistics
of `distribution_stats` plus a histogram on the shared `LOG_BIN_EDGES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workers.analysis.stats import distribution_stats, log_histogram

LENGTH_FIELDS = ("prompt", "response", "total")


def length_summary(values: np.ndarray, cap: int | None) -> dict:
    return {**distribution_stats(values, cap), "hist": log_histogram(values)}


@dataclass
class StepSummary:
    step: int
    validate: bool
    n_groups: int
    n_samples: int
    prompt_tokens: int
    response_tokens: int
    summary: dict


@dataclass
class StepAccumulator:
    _parts: dict[str, list[np.ndarray]] = field(
        default_factory=lambda: {k: [] for k in ("step", "group", "prompt", "response", "task", "validate")}
    )

    def add(self, columns: dict) -> None:
        n = len(columns["step"])
        p = self._parts
        p["step"].append(np.asarray(columns["step"], dtype=np.int32))
        p["group"].append(np.asarray(columns["group_idx"], dtype=np.int32))
        p["prompt"].append(np.asarray(columns["prompt_len"], dtype=np.int32))
        p["response"].append(np.asarray(columns["response_len"], dtype=np.int32))
        task = columns.get("task_id")
        p["task"].append(np.asarray(task, dtype=np.int16) if task is not None else np.full(n, -1, np.int16))
        val = columns.get("validate")
        p["validate"].append(np.asarray(val, dtype=bool) if val is not None else np.zeros(n, bool))

    @property
    def max_response(self) -> np.ndarray:
        return np.concatenate(self._parts["response"]) if self._parts["response"] else np.empty(0, np.int32)

    def summaries(self, cap: int | None, task_names: list[str]) -> list[StepSummary]:
        if not self._parts["step"]:
            return []
        cols = {k: np.concatenate(v) for k, v in self._parts.items()}
        order = np.argsort(cols["step"], kind="stable")
        cols = {k: v[order] for k, v in cols.items()}
        steps, starts = np.unique(cols["step"], return_index=True)
        bounds = list(starts) + [len(order)]
        out = []
        for i, step in enumerate(steps):
            sl = slice(bounds[i], bounds[i + 1])
            prompt = cols["prompt"][sl].astype(np.int64)
            response = cols["response"][sl].astype(np.int64)
            task = cols["task"][sl]
            by_field = {"prompt": prompt, "response": response, "total": prompt + response}
            summary: dict = {}
            for name, values in by_field.items():
                field_cap = cap if name == "response" else None
                entry = {"all": length_summary(values, field_cap)}
                for t_id in np.unique(task[task >= 0]):
                    entry[task_names[t_id]] = length_summary(values[task == t_id], field_cap)
                summary[name] = entry
            out.append(
                StepSummary(
                    step=int(step),
                    validate=bool(cols["validate"][sl].all()),
                    n_groups=int(np.unique(cols["group"][sl]).size),
                    n_samples=int(sl.stop - sl.start),
                    prompt_tokens=int(prompt.sum()),
                    response_tokens=int(response.sum()),
                    summary=summary,
                )
            )
        return out


def infer_response_cap(response_lengths: np.ndarray) -> int | None:
    """The max response length when the data shows a cap: the maximum reached by at
    least two samples (sampling stops there). A single longest sample proves nothing."""
    if response_lengths.size == 0:
        return None
    top = int(response_lengths.max())
    return top if int((response_lengths == top).sum()) >= 2 else None
