"""The contract between format readers and the ingestion pipeline.

A reader turns one input file into a stream of `TableBatch`es: plain column arrays
for one table, never ORM objects. The pipeline adds `trace_id`, bulk-loads the batch
(COPY on Postgres) and folds it into the per-step summaries, so a reader only parses.

Table names and their columns (all optional columns may be omitted from a batch;
a column present in a batch has a value for every row):

``samples`` one rollout response
    step, group_idx, sample_idx (int32, required; (step, group_idx, sample_idx) unique
    within a trace), prompt_len, response_len (int32, required), rank, dp_rank, tp_rank
    (int32), task (str, mapped to a small id by the pipeline), truncated (bool),
    validate (bool), reward (float64), num_turns, num_tool_calls (int32),
    latency_s (float64, the trajectory's summed engine latency)
``turns`` one generation request of a multi-turn trajectory
    step, group_idx, sample_idx, turn (int32), prompt_tokens, cached_tokens,
    completion_tokens (int32), engine_latency_s (float64), tool_call_count (int32),
    finish_reason (str)
``tool_calls`` one tool call of a multi-turn trajectory
    step, group_idx, sample_idx, call_idx, turn (int32), tool_name (str),
    latency_s (float64), response_tokens (int32), status (str)
``rank_timings`` per step, rank and phase
    step, rank (int32), dp_rank, tp_rank (int32), phase (str, e.g. "reward"),
    seconds (float64), batch_size (int32), validate (bool)
``gpu_events`` one GPU activity from a Kineto trace
    rank, stream (int32), step (int32, -1 outside any ProfilerStep), kind (int8: see
    `GpuKind`), name (str), start_us, dur_us (float64), launch_us (float64, the start
    of the CPU runtime call that launched it, NaN when unknown)
``sample_texts`` a dumped sample's text (verl rollout dumps, backend/formats/rollouts.py)
    step, group_idx, sample_idx (int32), prompt, response (bytes, zstd), prompt_chars,
    response_chars (int32), gts (str or None); samples also get reward and
    repeat_period (int32)
``sample_extras`` one reward_extra_infos value of a dumped sample
    step, group_idx, sample_idx (int32), key (str), value_num (float64, NaN none),
    value_text (str or None)
``steps`` measured per-step figures from framework logs (merged on (step))
    step (int32), and any of the `STEP_TIMING_COLUMNS` of core.analysis.tables (float64, seconds), plus
    ``metrics``: a list of dicts with every other numeric key the log had.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO

import numpy as np

TABLES = ("samples", "turns", "tool_calls", "rank_timings", "gpu_events", "steps", "sample_texts", "sample_extras")


@dataclass
class TableBatch:
    """Rows for one table as equal-length columns (numpy arrays, or lists for str/dict)."""

    table: str
    columns: dict[str, np.ndarray | list]

    def __len__(self) -> int:
        first = next(iter(self.columns.values()), None)
        return 0 if first is None else len(first)


@dataclass
class TraceInfo:
    """Trace-level facts a reader learned (merged over all files of an upload)."""

    framework: str | None = None
    max_response_len: int | None = None
    metadata: dict = field(default_factory=dict)
    # "characters" when a reader could not count tokens (a rollout dump without the run's
    # tokenizer): the samples' lengths are then characters and no token cap is inferred
    length_unit: str = "tokens"


class InputError(ValueError):
    """Bad input. Names the file, the 1-based line (or record) and the field at fault."""

    def __init__(self, file: str, message: str, line: int | None = None, field: str | None = None):
        self.file, self.line, self.field, self.reason = file, line, field, message
        where = file
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "field": self.field, "message": str(self)}

    def __reduce__(self):  # pickled whole (from a reader in another process), not by its text
        return type(self), (self.file, self.reason, self.line, self.field)


class UploadInputError(InputError):
    """Bad input that concerns several files of an upload: its message names them all
    (it is not prefixed by `file`, the first of them); `errors`: each file's own error."""

    def __init__(
        self,
        file: str,
        message: str,
        line: int | None = None,
        field: str | None = None,
        errors: list[InputError] | None = None,
    ):
        super().__init__(file, message, line, field)
        self.args = (message,)
        self.errors = list(errors or [])

    def as_dict(self) -> dict:
        out = super().as_dict()
        if self.errors:
            out["message"] = str(self).replace(":\n  ", ": ", 1).replace("\n  ", "; ")  # one line
            out["errors"] = [e.as_dict() for e in self.errors]
        return out

    def __reduce__(self):
        return type(self), (self.file, self.reason, self.line, self.field, self.errors)


def files_named(files: list[str]) -> str:
    """Files of an upload in few words: "packed_lengths_step_0.jsonl in run_a/ and run_b/"
    when they share a name, else "a.jsonl and b.csv"."""
    bases = {f.rsplit("/", 1)[-1] for f in files}
    if len(bases) == 1 and len(files) > 1:
        return f"{bases.pop()} in " + " and ".join(f.rsplit("/", 1)[0] + "/" if "/" in f else "./" for f in files)
    return " and ".join(files)


def runs_hint(files: list[str]) -> str:
    """Advice when files of different folders collide: they are likely different runs."""
    folders = {f.rsplit("/", 1)[0] if "/" in f else "" for f in files}
    return "; an upload is one run: ingest each run's folder on its own" if len(folders) > 1 else ""


# An upload's errors listed at most (one per file).
MAX_ERRORS_LISTED = 20


def upload_errors(errors: list[InputError]) -> InputError:
    """The error of an upload whose files failed: a single file's own error, else one
    listing each file's (the first MAX_ERRORS_LISTED)."""
    if len(errors) == 1:
        return errors[0]
    shown = errors[:MAX_ERRORS_LISTED]
    many = f"more than {MAX_ERRORS_LISTED} (the first {MAX_ERRORS_LISTED})" if len(errors) > len(shown) else len(errors)
    first = shown[0]
    return UploadInputError(
        first.file,
        f"{many} files of the upload have errors:\n" + "\n".join(f"  {e}" for e in shown),
        first.line,
        first.field,
        errors=shown,
    )


@dataclass
class Source:
    """One input file: a display name (path inside the upload) and a way to open it.

    `open()` returns a binary stream, already decompressed for `.gz` names.
    """

    name: str
    open: Callable[[], IO[bytes]]
    size: int | None = None


@dataclass
class ReadResult:
    """What a reader hands back besides its batches: notes on what it skipped."""

    info: TraceInfo = field(default_factory=TraceInfo)
    skipped: list[str] = field(default_factory=list)
    # Readers' state shared across the files of one upload (e.g. PolyTrace group ordinals).
    state: dict = field(default_factory=dict)


# A reader: (source, result to fill in) -> batches. Readers are generators, so memory
# stays bounded by one batch, not by the file.
Reader = Callable[[Source, ReadResult], Iterator[TableBatch]]

# Values above this are treated as corrupt lengths, not long sequences.
MAX_TOKENS = 10_000_000
