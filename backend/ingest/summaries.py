"""Per-step summaries computed once at the end of ingestion.

While batches stream past, `StepCounter` keeps only per-step sample counts and the
running maximum response length (for the cap inference). Afterwards the pipeline reads
the just-loaded samples back in step ranges of bounded size and `summarize_steps` (pure
numpy) computes, per step: counts, token sums and, for prompt/response/total lengths
(all samples and per task), the statistics of `distribution_stats` plus a histogram on
the shared `LOG_BIN_EDGES`. Memory stays bounded whatever the size of the upload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workers.analysis.stats import distribution_stats, log_histogram

SUMMARY_COLUMNS = ["step", "group_idx", "prompt_len", "response_len", "task_id", "validate"]


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
class StepCounter:
    """Samples per step and the longest response (with how many samples reached it)."""

    counts: dict[int, int] = field(default_factory=dict)
    max_response: int = -1
    n_at_max: int = 0

    def add(self, step: np.ndarray, response_len: np.ndarray) -> None:
        steps, n = np.unique(np.asarray(step), return_counts=True)
        for s, c in zip(steps.tolist(), n.tolist()):
            self.counts[s] = self.counts.get(s, 0) + c
        if len(response_len):
            top = int(np.max(response_len))
            hits = int(np.count_nonzero(response_len == top))
            if top > self.max_response:
                self.max_response, self.n_at_max = top, hits
            elif top == self.max_response:
                self.n_at_max += hits

    def inferred_cap(self) -> int | None:
        """The max response length when the data shows a cap: the maximum reached by at
        least two samples (sampling stops there). A single longest sample proves nothing."""
        return self.max_response if self.n_at_max >= 2 else None

    def step_ranges(self, max_samples: int) -> list[tuple[int, int]]:
        """Half-open step ranges holding at most `max_samples` samples each (or one step)."""
        ranges, lo, size = [], None, 0
        steps = sorted(self.counts)
        for s in steps:
            if lo is not None and size + self.counts[s] > max_samples:
                ranges.append((lo, s))
                lo, size = None, 0
            if lo is None:
                lo = s
            size += self.counts[s]
        if lo is not None:
            ranges.append((lo, steps[-1] + 1))
        return ranges


def summarize_steps(cols: dict[str, np.ndarray], cap: int | None, task_names: list[str]) -> list[StepSummary]:
    """Summaries of every step present in `cols` (the SUMMARY_COLUMNS of some samples)."""
    if len(cols["step"]) == 0:
        return []
    order = np.argsort(cols["step"], kind="stable")
    cols = {k: np.asarray(v)[order] for k, v in cols.items()}
    steps, starts = np.unique(cols["step"], return_index=True)
    bounds = list(starts) + [len(order)]
    has_task = "task_id" in cols
    out = []
    for i, step in enumerate(steps):
        sl = slice(bounds[i], bounds[i + 1])
        prompt = cols["prompt_len"][sl].astype(np.int64)
        response = cols["response_len"][sl].astype(np.int64)
        task = cols["task_id"][sl] if has_task else np.full(len(prompt), -1)
        summary: dict = {}
        for name, values in (("prompt", prompt), ("response", response), ("total", prompt + response)):
            field_cap = cap if name == "response" else None
            entry = {"all": length_summary(values, field_cap)}
            for t_id in np.unique(task[task >= 0]):
                entry[task_names[t_id]] = length_summary(values[task == t_id], field_cap)
            summary[name] = entry
        validate = cols["validate"][sl] if "validate" in cols else np.zeros(1, bool)
        out.append(
            StepSummary(
                step=int(step),
                validate=bool(np.all(validate == 1)),
                n_groups=int(np.unique(cols["group_idx"][sl]).size),
                n_samples=int(sl.stop - sl.start),
                prompt_tokens=int(prompt.sum()),
                response_tokens=int(response.sum()),
                summary=summary,
            )
        )
    return out
