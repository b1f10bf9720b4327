"""Per-step summaries computed once at the end of ingestion.

While batches stream past, `StepCounter` keeps only per-step sample counts and the
running maximum response length (for the cap inference). Afterwards the pipeline reads
the just-loaded samples back in step ranges of bounded size and `summarize_steps` (pure
numpy) computes, per step: counts, token sums and, for prompt/response/total lengths
(all samples and per task), the statistics of `distribution_stats` plus a histogram on
the shared `LOG_BIN_EDGES`. A response's ``truncation_rate`` is the share of truncated
samples by the one definition (core/analysis/truncation.py: the stored ``truncated``
column, which ingestion settled, else the share at the cap; None when neither is known),
its ``at_cap_rate`` the share whose response reached the length cap (`Truncation.length_cap`,
whatever the stop reason; None when no cap is known).
Memory stays bounded whatever the size of the upload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from core.analysis.grouping import composite_key, group_rows, sort_within_groups, sorted_run_starts
from core.analysis.stats import (
    grouped_distribution_stats,
    grouped_log_histogram,
)
from core.analysis.truncation import INFER_MIN_HITS, at_cap_rows, truncated_rows

SUMMARY_COLUMNS = ["step", "group_idx", "prompt_len", "response_len", "task_id", "validate", "truncated"]


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
        return self.max_response if self.n_at_max >= INFER_MIN_HITS else None

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


def summarize_steps(
    cols: Mapping[str, np.ndarray | list], cap: int | None, task_names: list[str], length_cap: int | None = None
) -> list[StepSummary]:
    """Summaries of every step present in `cols` (the SUMMARY_COLUMNS of some samples);
    `cap` counts truncation without a stop reason, `length_cap` the share at the cap.

    Vectorised over steps (and over (step, task) pairs): one grouping, one sort of each
    length within its group, then `grouped_distribution_stats` / `grouped_log_histogram`.
    """
    if len(cols["step"]) == 0:
        return []
    by_step = group_rows(np.asarray(cols["step"]))
    prompt = by_step.sort(np.asarray(cols["prompt_len"]))
    response = by_step.sort(np.asarray(cols["response_len"]))
    values = {"prompt": prompt, "response": response, "total": np.add(prompt, response, dtype=np.int64)}
    flag = np.asarray(cols["truncated"]) if "truncated" in cols else None
    trunc = truncated_rows(response, None if flag is None else by_step.sort(flag), cap)
    truncs = {"prompt": None, "response": trunc, "total": None}
    at_cap = {"prompt": None, "response": at_cap_rows(response, length_cap), "total": None}
    per_step = {
        name: _length_summaries(v, by_step.starts, by_step.counts, truncs[name], at_cap[name])
        for name, v in values.items()
    }

    # per task: the rows of each (step, task) pair with a task, grouped the same way
    per_task: dict[str, list[list[tuple[int, dict]]]] = {name: [[] for _ in by_step.keys] for name in values}
    if "task_id" in cols:
        task = by_step.sort(np.asarray(cols["task_id"]))
        tasked = np.flatnonzero(task >= 0)
        if len(tasked):
            code = by_step.code()[tasked]
            pairs = group_rows(composite_key(code, task[tasked]))
            pair_step = pairs.sort(code)[pairs.starts].tolist()
            pair_task = pairs.sort(task[tasked])[pairs.starts].tolist()
            for name, v in values.items():
                t, c = truncs[name], at_cap[name]
                sub = None if t is None else pairs.sort(t[tasked])
                sub_cap = None if c is None else pairs.sort(c[tasked])
                stats = _length_summaries(pairs.sort(v[tasked]), pairs.starts, pairs.counts, sub, sub_cap)
                for g, t_id, st in zip(pair_step, pair_task, stats):
                    per_task[name][g].append((t_id, st))

    validate = by_step.sort(np.asarray(cols["validate"])) == 1 if "validate" in cols else None
    all_validate = (
        np.logical_and.reduceat(validate, by_step.starts).tolist() if validate is not None else [False] * len(by_step)
    )
    n_groups = _distinct_per_step(by_step, by_step.sort(np.asarray(cols["group_idx"])))
    prompt_tokens = np.add.reduceat(prompt, by_step.starts, dtype=np.int64).tolist()
    response_tokens = np.add.reduceat(response, by_step.starts, dtype=np.int64).tolist()
    out = []
    for i, step in enumerate(by_step.keys.tolist()):
        summary = {}
        for name in values:
            entry = {"all": per_step[name][i]}
            for t_id, st in per_task[name][i]:  # ascending task id, as the pairs are sorted
                entry[task_names[t_id]] = st
            summary[name] = entry
        out.append(
            StepSummary(
                step=int(step),
                validate=bool(all_validate[i]),
                n_groups=n_groups[i],
                n_samples=int(by_step.counts[i]),
                prompt_tokens=prompt_tokens[i],
                response_tokens=response_tokens[i],
                summary=summary,
            )
        )
    return out


def _length_summaries(
    values: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    truncated: np.ndarray | None,
    at_cap: np.ndarray | None = None,
) -> list[dict]:
    """Distribution stats and log histogram of every group (rows back to back, in any
    order within a group); `truncated` and `at_cap` (aligned with `values`) give
    truncation_rate and at_cap_rate (response lengths only)."""
    v = sort_within_groups(values, starts, counts)
    stats = grouped_distribution_stats(v, starts, counts, None)
    hists = grouped_log_histogram(v, starts, counts).tolist()
    rates, at_cap_rates = _shares(truncated, starts, counts), _shares(at_cap, starts, counts)
    out = [{**st, "truncation_rate": r, "hist": h} for st, r, h in zip(stats, rates, hists)]
    if at_cap is not None:
        for st, r in zip(out, at_cap_rates):
            st["at_cap_rate"] = r
    return out


def _shares(flags: np.ndarray | None, starts: np.ndarray, counts: np.ndarray) -> list[float | None]:
    """Per group, the share of rows flagged (None for every group without flags)."""
    if flags is None or not len(counts):
        return [None] * len(counts)
    return (np.add.reduceat(flags.astype(np.int64), starts) / np.maximum(counts, 1)).tolist()


def _distinct_per_step(by_step, group: np.ndarray) -> list[int]:
    """Distinct group_idx values in each step (rows grouped by step)."""
    starts = sorted_run_starts(by_step.code(), group)
    if starts is None:  # groups not in order within steps: sort them first
        starts = sorted_run_starts(by_step.code(), sort_within_groups(group, by_step.starts, by_step.counts))
    return np.bincount(by_step.code()[starts], minlength=len(by_step)).tolist()
