"""Per-step summaries computed once at the end of ingestion.

While batches stream past, `StepCounter` keeps only per-step sample counts and the
running maximum response length (for the cap inference). Afterwards the pipeline reads
the just-loaded samples back in step ranges of bounded size and `summarize_steps` (pure
numpy) computes, per step: counts, token sums and, for prompt/response/total lengths
(all samples and per task), the statistics of `distribution_stats` plus a histogram on
the shared `LOG_BIN_EDGES`. A response's ``truncation_rate`` is the share at the cap
(None without one); ``truncation_rate_flag`` the share of samples flagged `truncated`
(for multi-turn traces the engine stop reason), when the trace has the flag. Memory stays bounded whatever the size of the upload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.analysis.grouping import composite_key, group_rows, sort_within_groups, sorted_run_starts
from core.analysis.stats import (
    grouped_distribution_stats,
    grouped_log_histogram,
)

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
    """Summaries of every step present in `cols` (the SUMMARY_COLUMNS of some samples).

    Vectorised over steps (and over (step, task) pairs): one grouping, one sort of each
    length within its group, then `grouped_distribution_stats` / `grouped_log_histogram`.
    """
    if len(cols["step"]) == 0:
        return []
    by_step = group_rows(np.asarray(cols["step"]))
    prompt = by_step.sort(np.asarray(cols["prompt_len"]))
    response = by_step.sort(np.asarray(cols["response_len"]))
    values = {"prompt": prompt, "response": response, "total": np.add(prompt, response, dtype=np.int64)}
    caps = {"prompt": None, "response": cap, "total": None}
    per_step = {name: _length_summaries(v, by_step.starts, by_step.counts, caps[name]) for name, v in values.items()}
    # two truncation definitions for responses: at the cap (truncation_rate) and, when the
    # trace flags it per sample (multi-turn: the engine's finish_reason == "length"), the flag
    if "truncated" in cols:
        flag = by_step.sort(np.asarray(cols["truncated"])) == 1
        flag_rate = (np.add.reduceat(flag.astype(np.int64), by_step.starts) / by_step.counts).tolist()
        for st, rate in zip(per_step["response"], flag_rate):
            st["truncation_rate_flag"] = rate

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
                stats = _length_summaries(pairs.sort(v[tasked]), pairs.starts, pairs.counts, caps[name])
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


def _length_summaries(values: np.ndarray, starts: np.ndarray, counts: np.ndarray, cap: int | None) -> list[dict]:
    """Distribution stats and log histogram of every group (rows back to back, in any order within a group)."""
    v = sort_within_groups(values, starts, counts)
    stats = grouped_distribution_stats(v, starts, counts, cap)
    hists = grouped_log_histogram(v, starts, counts).tolist()
    return [{**st, "hist": h} for st, h in zip(stats, hists)]


def _distinct_per_step(by_step, group: np.ndarray) -> list[int]:
    """Distinct group_idx values in each step (rows grouped by step)."""
    starts = sorted_run_starts(by_step.code(), group)
    if starts is None:  # groups not in order within steps: sort them first
        starts = sorted_run_starts(by_step.code(), sort_within_groups(group, by_step.starts, by_step.counts))
    return np.bincount(by_step.code()[starts], minlength=len(by_step)).tolist()
