"""Weights & Biases history exports -> per-step metrics (``steps``).

A run's history as W&B exports it (``run.history()`` / ``run.scan_history()`` saved
with pandas, or the web UI's CSV download): one row per logged step with a ``_step``
column and one column per metric key (``train/loss``, ``timing_s/gen``, ...), blank
where the step did not log it. CSV (``.csv``) and Parquet (``.parquet``/``.pq``) are
read; a file is W&B history, not native samples, when it has a ``_step`` column.

Every numeric cell becomes ``metrics[column]`` of its ``_step`` (rows of one step are
merged, later rows win); ``timing_s/*`` also fill the stage timings t_gen ... t_step,
as for verl logs. Non-numeric cells (media, strings, dicts) are skipped, and so are
``_timestamp`` and ``_wandb``-internal columns; ``_runtime`` is kept. Rows are
streamed (memory is bounded by `StepMetrics`, not by the file).

W&B offline run folders (``wandb/offline-run-*/run-*.wandb``) are not read: the only
reader of that record format is the ``wandb`` package itself (its
``wandb.sdk.internal.datastore``), far too heavy a dependency; such files are noted as
skipped with this advice: ``wandb sync`` the run, then export its history.
"""

from __future__ import annotations

import codecs
import csv
import math
from collections.abc import Iterator

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.jsonl import INT32_MAX
from backend.formats.native import seekable_stream
from backend.formats.spec import FormatSpec
from backend.formats.step_metrics import StepMetrics

STEP_COLUMN = "_step"
_DROPPED = ("_timestamp", "_wandb")


def _kept(column: str) -> bool:
    return column != STEP_COLUMN and not column.startswith(_DROPPED)


def _step_value(text, name: str, line: int) -> int | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(name, f"expected an integer step, got {text!r:.40}", line, STEP_COLUMN) from None
    if not math.isfinite(value) or value != int(value) or not 0 <= value <= INT32_MAX:
        raise InputError(name, f"expected an integer step in 0..{INT32_MAX}, got {text!r:.40}", line, STEP_COLUMN)
    return int(value)


def _finish(buffer: StepMetrics, name: str) -> Iterator[TableBatch]:
    last = buffer.finish()
    if last is None:
        raise InputError(name, "no rows with a _step value")
    yield last


def read_wandb_csv(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """A W&B history CSV -> ``steps`` batches."""
    name = source.name
    buffer = StepMetrics()
    with source.open() as raw:
        text = codecs.getreader("utf-8-sig")(raw, "replace")
        reader = csv.reader(text)
        header = next(reader, None)
        if not header:
            raise InputError(name, "empty file: no CSV header", line=1)
        header = [h.strip() for h in header]
        if STEP_COLUMN not in header:
            raise InputError(name, "missing required column", 1, STEP_COLUMN)
        step_at = header.index(STEP_COLUMN)
        kept = [(i, h) for i, h in enumerate(header) if _kept(h)]
        add = buffer.add
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise InputError(name, f"expected {len(header)} cells, found {len(row)}", line)
            step = _step_value(row[step_at], name, line)
            if step is None:
                continue
            for i, key in kept:
                cell = row[i]
                if not cell:
                    continue
                try:
                    value = float(cell)
                except ValueError:
                    continue
                spilled = add(step, key, value)
                if spilled is not None:
                    yield spilled
    yield from _finish(buffer, name)


def parquet_columns(stream) -> list[str] | None:
    """The column names of a Parquet stream, or None when it is not Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(stream).schema_arrow.names
    except (pa.ArrowInvalid, OSError):
        return None


def read_wandb_parquet(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """A W&B history Parquet file -> ``steps`` batches, a row group batch at a time."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = source.name
    buffer = StepMetrics()
    with source.open() as raw, seekable_stream(raw) as stream:
        try:
            pf = pq.ParquetFile(stream)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(name, f"not a readable Parquet file ({exc})") from None
        schema = pf.schema_arrow
        if STEP_COLUMN not in schema.names:
            raise InputError(name, "missing required column", field=STEP_COLUMN)
        numeric = [
            f.name for f in schema if _kept(f.name) and (pa.types.is_integer(f.type) or pa.types.is_floating(f.type))
        ]
        row0 = 1
        for batch in pf.iter_batches(batch_size=65_536, columns=[STEP_COLUMN, *numeric]):
            steps = batch.column(0).to_numpy(zero_copy_only=False).astype(np.float64)
            for i in np.flatnonzero(
                ~np.isfinite(steps) | (steps < 0) | (steps > INT32_MAX) | (steps != np.floor(steps))
            ):
                if not np.isnan(steps[i]):
                    raise InputError(name, f"expected an integer step, got {steps[i]!r}", row0 + int(i), STEP_COLUMN)
            valid = ~np.isnan(steps)
            step_list = steps.astype(np.int64, copy=False).tolist() if valid.all() else None
            for j, key in enumerate(numeric, start=1):
                values = batch.column(j).to_numpy(zero_copy_only=False).astype(np.float64)
                present = np.flatnonzero(valid & ~np.isnan(values))
                for row, v in zip(present.tolist(), values[present].tolist()):
                    spilled = buffer.add(step_list[row] if step_list is not None else int(steps[row]), key, v)
                    if spilled is not None:
                        yield spilled
            row0 += batch.num_rows
    yield from _finish(buffer, name)


def has_step_column(source: Source, base: str) -> bool:
    """A CSV (``.csv``) or Parquet (``.parquet``/``.pq``) file with a ``_step`` column."""
    if base.endswith(".csv"):
        with source.open() as stream:
            first = stream.readline(1 << 20).decode("utf-8-sig", errors="replace")
        header = next(csv.reader([first]), [])
        return STEP_COLUMN in (h.strip() for h in header)
    if base.endswith((".parquet", ".pq")):
        with source.open() as raw, seekable_stream(raw) as stream:
            names = parquet_columns(stream)
        return names is not None and STEP_COLUMN in names
    return False


FORMAT_SPECS = (
    FormatSpec(
        "wandb-csv",
        read_wandb_csv,
        "a ``.csv`` with a ``_step`` column (before native-csv)",
        sniff=lambda source, base: base.endswith(".csv") and has_step_column(source, base),
        carries={"steps": "W&B history"},
    ),
    FormatSpec(
        "wandb-parquet",
        read_wandb_parquet,
        "a ``.parquet`` / ``.pq`` with a ``_step`` column (before native-parquet)",
        sniff=lambda source, base: base.endswith((".parquet", ".pq")) and has_step_column(source, base),
        carries={"steps": "W&B history"},
    ),
)
