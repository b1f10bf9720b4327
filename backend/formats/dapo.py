"""verl DAPO dynamic-sampling marks: ``dapo_filter_indices.jsonl``.

One line per generation batch (the file sits beside the ``packed_lengths_step_N.jsonl``
files of the same run)::

    {"workload_step", "trainer_step", "gen_batch_index", "prompt_count", "n_sampling",
     "train_batch_size", "num_prompt_in_batch_before", "kept_prompt_count",
     "used_prompt_count", "kept_prompt_indices": [...], "used_prompt_indices": [...]}

``workload_step`` is the generation step N of ``packed_lengths_step_N.jsonl``; prompt
indices are positions of the prompt groups within that generation batch, in the line
order of ``packed_lengths_step_N.jsonl`` (the reader's ``group_idx``: the first line of
the step is prompt 0). ``kept``: groups DAPO's filter kept (reward std > 0); ``used``:
kept groups that went into the training batch of ``trainer_step`` (the batch is filled
from several generation batches and cut at ``train_batch_size``), so used <= kept.

Checked (InputError with file, line, field): counts equal the index lists' lengths,
indices are distinct and in [0, prompt_count), used indices are kept, one line per
workload_step.

The reader yields no rows itself: it keeps the marks in ``ReadResult.state`` and
`read_packed_lengths` adds to each sample of a marked generation step ``filter_mark``
(0 = generated and filtered out, 1 = kept but not used, 2 = used for training) and
``trainer_step``. A summary of every line goes to the trace metadata (``dapo_filter``).
`read_sources` reads DAPO files before the per-step files of an upload.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.jsonl import as_ids, chunk_lines, int_column, iter_json_chunks, list_column
from backend.formats.spec import FormatSpec

MARK_FILTERED, MARK_KEPT, MARK_USED = 0, 1, 2
FIELDS = (
    "workload_step",
    "trainer_step",
    "gen_batch_index",
    "prompt_count",
    "n_sampling",
    "train_batch_size",
    "num_prompt_in_batch_before",
    "kept_prompt_count",
    "used_prompt_count",
)
OPTIONAL = ("gen_batch_index", "n_sampling", "train_batch_size", "num_prompt_in_batch_before")


@dataclass
class StepMarks:
    """The marks of one generation step: mark per prompt group, and its trainer step."""

    trainer_step: int
    marks: np.ndarray  # int8 per prompt index 0..prompt_count-1
    source: str
    line: int


def dapo_marks(result: ReadResult) -> dict[int, StepMarks]:
    """{workload_step: StepMarks} of the upload (empty without a DAPO file)."""
    return result.state.setdefault("dapo_marks", {})


def _indices(values: list, count: int, prompt_count: int, name: str, line: int, field: str) -> np.ndarray:
    if not all(type(v) is int for v in values):
        i = next(i for i, v in enumerate(values) if type(v) is not int)
        raise InputError(name, f"expected integer prompt indices, got {values[i]!r:.40}", line, f"{field}[{i}]")
    idx = np.asarray(values, dtype=np.int64)
    count_field = field.replace("_indices", "_count")
    if len(idx) != count:
        raise InputError(name, f"has {len(idx)} indices but {count_field} is {count}", line, field)
    bad = np.flatnonzero((idx < 0) | (idx >= prompt_count))
    if len(bad):
        i = int(bad[0])
        raise InputError(
            name, f"prompt index {idx[i]} is outside the batch of prompt_count {prompt_count}", line, f"{field}[{i}]"
        )
    uniq, first = np.unique(idx, return_index=True)
    if len(uniq) != len(idx):
        dup = sorted(set(range(len(idx))) - set(first.tolist()))[0]
        raise InputError(name, f"prompt index {idx[dup]} appears twice", line, f"{field}[{dup}]")
    return idx


def read_dapo_filter(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """``dapo_filter_indices.jsonl`` -> marks kept in ``result.state`` (no rows)."""
    name = source.name
    marks = dapo_marks(result)
    lines = result.info.metadata.setdefault("dapo_filter", [])
    for chunk in iter_json_chunks(source):
        line_of = chunk_lines(chunk)
        cols = {}
        for key in FIELDS:
            if key in OPTIONAL:
                cols[key] = int_column(chunk, key, name, default=-1).tolist()
            else:
                values = as_ids(int_column(chunk, key, name), name=name, field=key, line_of=line_of)
                cols[key] = values.tolist()
        kept_lists = list_column(chunk, "kept_prompt_indices", name)
        used_lists = list_column(chunk, "used_prompt_indices", name)
        for i in range(len(chunk.rows)):
            line = line_of(i)
            step, count = cols["workload_step"][i], cols["prompt_count"][i]
            kept = _indices(kept_lists[i], cols["kept_prompt_count"][i], count, name, line, "kept_prompt_indices")
            used = _indices(used_lists[i], cols["used_prompt_count"][i], count, name, line, "used_prompt_indices")
            not_kept = np.setdiff1d(used, kept)
            if len(not_kept):
                j = int(np.flatnonzero(used == not_kept[0])[0])
                raise InputError(
                    name, f"prompt index {not_kept[0]} is used but not kept", line, f"used_prompt_indices[{j}]"
                )
            if step in marks:
                prev = marks[step]
                raise InputError(
                    name,
                    f"workload_step {step} again (first at {prev.source} line {prev.line})",
                    line,
                    "workload_step",
                )
            m = np.full(count, MARK_FILTERED, dtype=np.int8)
            m[kept] = MARK_KEPT
            m[used] = MARK_USED
            marks[step] = StepMarks(cols["trainer_step"][i], m, name, line)
            lines.append({key: (None if cols[key][i] < 0 else cols[key][i]) for key in FIELDS})
    lines.sort(key=lambda e: e["workload_step"])
    return
    yield  # a generator that yields no batches


def sample_marks(result: ReadResult, step: np.ndarray, group: np.ndarray, name: str, line_of) -> dict:
    """``filter_mark`` / ``trainer_step`` columns for one batch of prompt groups (one
    entry per group: its step and group ordinal), {} when no step of it is marked; -1
    where a step has no marks. A group beyond the step's prompt_count is an error."""
    marks = dapo_marks(result)
    if not marks:
        return {}
    step_list = np.asarray(step).tolist()
    if not any(s in marks for s in set(step_list)):
        return {}
    mark = np.full(len(step_list), -1, dtype=np.int16)
    trainer = np.full(len(step_list), -1, dtype=np.int32)
    group = np.asarray(group)
    for s in set(step_list):
        sm = marks.get(s)
        if sm is None:
            continue
        rows = np.flatnonzero(np.asarray(step) == s)
        g = group[rows]
        beyond = np.flatnonzero(g >= len(sm.marks))
        if len(beyond):
            raise InputError(
                name,
                f"prompt group {int(g[beyond[0]])} of step {s} is beyond the DAPO batch "
                f"(prompt_count {len(sm.marks)} in {sm.source} line {sm.line})",
                line_of(int(rows[beyond[0]])),
            )
        mark[rows] = sm.marks[g]
        trainer[rows] = sm.trainer_step
        result.state.setdefault("dapo_marked_steps", set()).add(s)
    return {"filter_mark": mark, "trainer_step": trainer}


def unmatched_note(result: ReadResult) -> str | None:
    """A note for marks of generation steps no packed-lengths file of the upload had."""
    marks = dapo_marks(result)
    left = sorted(set(marks) - result.state.get("dapo_marked_steps", set()))
    if not left:
        return None
    shown = ", ".join(map(str, left[:10])) + (", ..." if len(left) > 10 else "")
    return (
        f"{marks[left[0]].source}: DAPO marks for generation step(s) {shown} not used "
        "(no packed_lengths_step_N.jsonl for them in this upload)"
    )


FORMAT_SPECS = (
    FormatSpec(
        "dapo-filter",
        read_dapo_filter,
        "``dapo_filter_indices*.jsonl`` (marks for the packed-length samples; read before the other "
        "files of the upload)",
        names=(r"^dapo_filter_indices.*\.jsonl?$",),
        carries={
            "samples.filter_mark": "verl DAPO's dapo_filter_indices.jsonl beside the packed_lengths_step_N.jsonl files"
        },
        read_first=1,
    ),
)
