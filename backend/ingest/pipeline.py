"""Ingestion: sources -> readers -> bulk load -> per-step summaries -> trace ready.

All-or-nothing: on Postgres the whole load is one transaction; on SQLite (one writer
at a time, and progress must stay writable) rows are committed per batch and deleted
again on failure. Either way a trace is only `ready` once everything is in, and every
run starts by clearing rows a killed earlier attempt may have left.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict

import numpy as np
from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from backend.formats import read_sources, upload_format
from backend.formats.base import (
    InputError,
    ReadResult,
    Source,
    TableBatch,
    UploadInputError,
    files_named,
    runs_hint,
)
from backend.formats.kineto_events import EVENTS_DIR_STATE, remove_events
from backend.ingest.bounds import Bounds
from backend.ingest.bulk import bulk_insert
from backend.ingest.summaries import SUMMARY_COLUMNS, StepCounter, summarize_steps
from backend.ingest.truncation import settle_truncation, truncation_meta
from backend.ingest.uploads import UploadTooLarge
from backend.jobs.fence import Abandoned, Fence
from backend.settings import get_settings
from backend.store.columns import read_columns
from backend.store.deletion import clear_trace_rows
from backend.store.models import (
    Step,
    Trace,
    TraceStatus,
    utcnow,
)
from backend.store.trace_tables import KEYS, trace_events_dir
from core.analysis.tables import STEP_TIMING_COLUMNS
from core.analysis.truncation import Truncation

COUNT_COLUMN = {
    "samples": "n_samples",
    "turns": "n_turns",
    "tool_calls": "n_tool_calls",
    "rank_timings": "n_rank_timings",
    "gpu_events": "n_gpu_events",
}

Progress = Callable[[float, str], None]


_KEY_ORDER = ", ".join(KEYS["samples"][1:])
# Samples read back per query when computing the per-step summaries (bounds memory).
SUMMARY_RANGE_SAMPLES = 2_000_000


class StepRowLoader:
    """Folds reader batches into one trace's rows (within `bounds`, when given)."""

    def __init__(self, conn: Connection, trace_id: int, bounds: Bounds | None = None):
        self.conn, self.trace_id, self.bounds = conn, trace_id, bounds
        self.counts = {t: 0 for t in COUNT_COLUMN}
        self.steps = StepCounter()
        self.measured: dict[int, dict] = {}
        self.task_ids: dict[str, int] = {}
        self.kernel_ids: dict[str, int] = {}
        # Columns each table actually received: analyses read only those.
        self.columns: dict[str, set[str]] = {}
        # (table, step) -> the files that gave its rows: a duplicate key names them
        self.files_of: dict[tuple[str, int], list[str]] = {}

    def add(self, batch: TableBatch) -> None:
        cols = dict(batch.columns)
        n = len(batch)
        if n == 0:
            return
        if batch.table == "steps":
            self.columns.setdefault("steps", set()).update(c for c in cols if c != "metrics")
            self._add_measured(cols)
            return
        if batch.table == "samples":
            if "task" in cols:
                cols["task_id"] = self._ids(cols.pop("task"), self.task_ids).astype(np.int16)
            self.steps.add(np.asarray(cols["step"]), np.asarray(cols["response_len"]))
            if self.bounds is not None:
                self.bounds.count_samples(np.asarray(cols["step"]), self.steps.counts)
        elif batch.table == "gpu_events":
            cols["name_id"] = self._kernel_ids(cols.pop("name"))
            cols["event_idx"] = np.arange(self.counts["gpu_events"], self.counts["gpu_events"] + n, dtype=np.int64)
        self.columns.setdefault(batch.table, set()).update(cols)
        file = self.bounds.current_file if self.bounds is not None else None
        if batch.table in KEYS and file is not None:
            for step in np.unique(np.asarray(cols["step"])).tolist():
                files = self.files_of.setdefault((batch.table, int(step)), [])
                if file not in files and len(files) < MAX_FILES_NAMED:
                    files.append(file)
        cols["trace_id"] = np.full(n, self.trace_id, dtype=np.int64)
        try:
            inserted = bulk_insert(self.conn, batch.table, cols)
        except IntegrityError as exc:
            named = self._duplicate(batch.table, cols, exc, file)
            if named is None:
                raise
            raise named from exc
        # tables without a count on the trace (sample texts, extras) are counted here only
        self.counts[batch.table] = self.counts.get(batch.table, 0) + inserted

    def _duplicate(self, table: str, cols: dict, exc: IntegrityError, file: str | None) -> InputError | None:
        """A key given twice, in the upload's terms: the key and the files that gave it
        (None: the store's refusal is left to the caller)."""
        if self.conn.dialect.name == "postgresql":
            key = _pg_key(exc)  # (the transaction is aborted: nothing more can be read)
        else:
            self.conn.rollback()  # this batch's rows; earlier batches are committed (SQLite)
            key = _repeated_key(self.conn, self.trace_id, table, cols)
        if key is None or file is None or table not in KEYS:
            return InputError(file or "upload", _duplicate_message(exc))
        files = self.files_of.get((table, int(key["step"])), [file])
        return duplicate_error(table, key, [f for f in files if f != file] + [file])

    def _ids(self, names: np.ndarray | list, mapping: dict[str, int]) -> np.ndarray:
        return np.fromiter((mapping.setdefault(str(v), len(mapping)) for v in names), np.int64, len(names))

    def _kernel_ids(self, names: np.ndarray | list) -> np.ndarray:
        before = len(self.kernel_ids)
        ids = self._ids(names, self.kernel_ids)
        new = list(self.kernel_ids)[before:]
        if new:
            bulk_insert(
                self.conn,
                "gpu_kernel_names",
                {
                    "trace_id": np.full(len(new), self.trace_id, dtype=np.int64),
                    "name_id": np.arange(before, before + len(new), dtype=np.int64),
                    "name": new,
                },
            )
        return ids

    def _add_measured(self, cols: dict) -> None:
        metrics = cols.get("metrics")
        for i, step in enumerate(np.asarray(cols["step"]).tolist()):
            row = self.measured.setdefault(int(step), {"metrics": {}})
            for name in STEP_TIMING_COLUMNS:
                if name in cols:
                    value = float(cols[name][i])
                    if value == value:  # not NaN
                        row[name] = value
            if metrics is not None:
                row["metrics"].update(metrics[i])

    def settle_truncation(self, given: int | None, recorded: int | None, infer: bool) -> Truncation:
        """The trace's truncation, written into its samples (backend/ingest/truncation.py);
        `infer`: a cap may be inferred from the lengths (token lengths only)."""
        columns = self.columns.setdefault("samples", set()) if self.counts["samples"] else set()
        inferred = self.steps.inferred_cap() if infer else None
        return settle_truncation(self.conn, self.trace_id, columns, given=given, recorded=recorded, inferred=inferred)

    def _summaries(self, cap: int | None, progress: Callable[[float], None], length_cap: int | None = None):
        """Read the loaded samples back a bounded step range at a time and summarise."""
        columns = [c for c in SUMMARY_COLUMNS if c in self.columns.get("samples", ())]
        ranges = self.steps.step_ranges(SUMMARY_RANGE_SAMPLES)
        for i, (lo, hi) in enumerate(ranges):
            progress(i / len(ranges))
            # in key order: Postgres then packs each step's column into one message
            # instead of one per row (the per-row messages cost more than the summaries)
            cols = read_columns(self.conn, "samples", self.trace_id, columns, step_range=(lo, hi), order_by=_KEY_ORDER)
            yield from summarize_steps(cols, cap, list(self.task_ids), length_cap)
        # the last report before the steps are written: on SQLite a report (another
        # connection's write) would wait for this connection's write lock from then on
        progress(1.0)

    def write_steps(
        self, cap: int | None, progress: Callable[[float], None] = lambda _f: None, length_cap: int | None = None
    ) -> int:
        rows: dict[int, dict] = {}
        for summary in self._summaries(cap, progress, length_cap):
            rows[summary.step] = {**asdict(summary), "metrics": {}}
        for step, measured in self.measured.items():
            rows.setdefault(step, {"step": step, "summary": {}, "metrics": {}}).update(measured)
        # One INSERT per key set: steps with samples carry the summary columns, steps
        # measured only (a log's steps past the samples') do not.
        by_keys: dict[tuple, list[dict]] = {}
        for r in rows.values():
            by_keys.setdefault(tuple(sorted(r)), []).append({"trace_id": self.trace_id, **r})
        for group in by_keys.values():
            self.conn.execute(insert(Step), group)
        return len(rows)


def _touch(conn: Connection, trace_id: int) -> None:
    """Before a commit on SQLite: the trace was not deleted meanwhile, and its
    `updated_at` (the liveness of an inline ingestion) says now, committed with the
    batch. While this connection holds the write lock the heartbeat (another connection)
    cannot write, so a batch longer than two leases would otherwise leave the trace
    looking dead to a sweeper, whose delete, waiting for the same lock, then finds it
    stale and removes it under the ingestion."""
    if not conn.execute(update(Trace).where(Trace.id == trace_id).values(updated_at=utcnow())).rowcount:
        raise Abandoned(f"trace {trace_id} was deleted during its ingestion")


def _still_there(conn: Connection, trace_id: int) -> None:
    """Before a commit: the trace was not deleted meanwhile (the bulk tables have no
    foreign key to refuse its rows). The row lock (Postgres; SQLite's write lock is
    already held) keeps a delete waiting until this commit, so it then removes them."""
    if conn.scalar(select(Trace.id).where(Trace.id == trace_id).with_for_update()) is None:
        raise Abandoned(f"trace {trace_id} was deleted during its ingestion")


_PG_KEY = re.compile(r"Key \(trace_id, ([\w, ]+)\)=\(\d+, ([^)]*)\)")
# Files a duplicate-key error names at most (per table and step).
MAX_FILES_NAMED = 4
_KEY_WORDS = {"group_idx": "group", "sample_idx": "sample", "call_idx": "tool call"}


def _duplicate_message(exc: IntegrityError) -> str:
    """The store's unique-key refusal in the upload's terms (the key's columns and values
    when the database names them), never the database's raw text."""
    key = _pg_key(exc)
    said = (": " + ", ".join(f"{c} {v}" for c, v in key.items())) if key else ""
    return "duplicate rows in the upload (the same step/group/sample, or step/rank/phase, twice)" + said


def _pg_key(exc: IntegrityError) -> dict[str, str] | None:
    """The key Postgres names in its refusal ("Key (trace_id, step, ...)=(1, 0, ...)")."""
    match = _PG_KEY.search(str(exc.orig))
    if not match:
        return None
    return {c.strip(): v.strip() for c, v in zip(match.group(1).split(","), match.group(2).split(","))}


def _repeated_key(conn: Connection, trace_id: int, table: str, cols: dict) -> dict[str, str] | None:
    """The first key of a refused batch already stored, or given twice in the batch."""
    names = KEYS[table][1:]
    batch = list(zip(*(np.asarray(cols[c]).tolist() for c in names)))
    steps = sorted({k[0] for k in batch})
    columns = read_columns(conn, table, trace_id, list(names), step_range=(steps[0], steps[-1] + 1))
    seen = set(zip(*(np.asarray(columns[c]).tolist() for c in names)))
    for k in batch:
        if k in seen:
            return {c: str(v) for c, v in zip(names, k)}
        seen.add(k)
    return None


def duplicate_error(table: str, key: dict[str, str], files: list[str]) -> InputError:
    """ "packed_lengths_step_0.jsonl in run_a/ and run_b/ both give step 0 group 0 sample 0"
    (the last file is the one being read)."""
    said = " ".join(f"{_KEY_WORDS.get(c, c)} {v}" for c, v in key.items())
    what = "" if table == "samples" else f" of {table.replace('_', ' ')}"
    if len(files) == 1:
        return InputError(files[0], f"gives {said}{what} twice")
    verb = "both give" if len(files) == 2 else "all give"
    return UploadInputError(files[-1], f"{files_named(files)} {verb} {said}{what}{runs_hint(files)}")


# Shares of the progress bar: reading and loading the rows, then the per-step summaries;
# the rest is the commit (and on Postgres refreshing the planner's statistics).
LOAD_SHARE, SUMMARY_SHARE = 0.85, 0.12
# A source of unknown size (a .gz inside an archive) counts as this many bytes.
UNKNOWN_SIZE_GUESS = 64 * 1024**2


class _Reporter:
    """Progress of one ingestion: bytes read against the sources' sizes while loading,
    then the summaries' step ranges (at most every 0.5 s); writing the steps and the
    commit take the rest."""

    def __init__(self, progress: Progress | None, bounds: Bounds, sources: list[Source]):
        self.progress, self.bytes_read = progress, bounds.bytes_read
        known = [s.size for s in sources if s.size is not None]
        guess = (sum(known) // len(known)) if known else UNKNOWN_SIZE_GUESS
        self.total = max(1, sum(s.size if s.size is not None else guess for s in sources))
        self.last = 0.0

    def _send(self, fraction: float, message: str, force: bool = False) -> None:
        now = time.monotonic()
        if self.progress and (force or now - self.last > 0.5):
            self.last = now
            self.progress(fraction, message)

    def loaded(self, rows: int) -> None:
        self._send(LOAD_SHARE * min(self.bytes_read.value / self.total, 1.0), f"loaded {rows:,} rows")

    def summaries(self, done: float) -> None:
        self._send(LOAD_SHARE + SUMMARY_SHARE * done, "per-step summaries", force=done >= 1.0)


def ingest_trace(  # noqa: C901 -- the ingest's stages and their failure paths, in order, in one place
    engine: Engine,
    trace_id: int,
    sources: list[Source],
    *,
    forced_format: str | None = None,
    max_response_len: int | None = None,
    progress: Progress | None = None,
    fence: Fence | None = None,
    bounds: Bounds | None = None,
) -> None:
    """Load `sources` into trace `trace_id` and mark it ready; on any error mark it failed
    with the reason, leave no rows behind, and re-raise. With a `fence`, an ingestion
    another process has taken over commits nothing and touches neither trace nor rows.
    `bounds` (default: the settings') refuse files that expand past them while read."""
    bounds = bounds or Bounds(get_settings())
    reporter = _Reporter(progress, bounds, sources)
    result = ReadResult()
    # Kineto files keep every event beside the database (CPU-side analyses, full export)
    events_dir = trace_events_dir(trace_id)
    remove_events(events_dir)
    result.state[EVENTS_DIR_STATE] = events_dir
    atomic = engine.dialect.name == "postgresql"

    def ours() -> bool:
        if fence is None:
            return True
        try:
            with engine.begin() as check:
                fence(check)
        except Abandoned:
            return False
        except Exception:
            return True  # cannot tell (the database is down): clean up as usual
        return True

    set_trace_status(engine, trace_id, TraceStatus.INGESTING, None)
    try:
        with engine.connect() as conn:
            clear_trace_rows(conn, trace_id)
            conn.commit()
            loader = StepRowLoader(conn, trace_id, bounds)
            try:
                _load(conn, loader, bounds.sources(sources), forced_format, result, reporter, atomic)
                # a token cap says nothing of lengths counted in characters (no tokenizer)
                tokens = result.info.length_unit == "tokens"
                truncation = loader.settle_truncation(
                    max_response_len if tokens else None, result.info.max_response_len if tokens else None, tokens
                )
                if not atomic:
                    # committed as each batch is: the summaries' progress reports (writes
                    # of another connection) would otherwise wait for this write lock
                    _touch(conn, trace_id)
                    conn.commit()
                _still_there(conn, trace_id)  # (else the steps' foreign key refuses them)
                n_steps = loader.write_steps(truncation.cap, reporter.summaries, truncation.length_cap)
                _finish(conn, trace_id, loader, result, truncation, n_steps, upload_format(sources), bounds)
                if fence is not None:
                    fence(conn)
                _still_there(conn, trace_id)
                conn.commit()
            except BaseException as exc:
                conn.rollback()
                if not isinstance(exc, Abandoned) and ours():
                    remove_events(events_dir)  # the kept Kineto events of this attempt
                if not atomic and not isinstance(exc, Abandoned) and ours():
                    clear_trace_rows(conn, trace_id)
                    conn.commit()
                raise
    except Abandoned:
        raise
    except Exception as exc:
        if not ours():  # e.g. duplicate rows because another process loads the trace now
            raise Abandoned(f"trace {trace_id}: another process owns its ingestion now") from exc
        _fail(engine, trace_id, exc)
    if atomic:
        _refresh_planner_statistics(engine)
    if progress:
        progress(1.0, "ready")


def _load(conn, loader: StepRowLoader, sources, forced_format, result: ReadResult, reporter: _Reporter, atomic: bool):
    """Every batch of the sources into the loader (committed per batch on SQLite)."""
    # closed at once on an error: files still being read ahead are waited for before
    # the clean-up removes what they wrote
    with closing(read_sources(sources, forced_format, result)) as batches:
        for batch in batches:
            loader.add(batch)
            if not atomic:
                _touch(conn, loader.trace_id)
                conn.commit()
            reporter.loaded(sum(loader.counts.values()))


def _fail(engine: Engine, trace_id: int, exc: Exception) -> None:
    """Mark the trace failed with the reason and re-raise (duplicates as bad input)."""
    if isinstance(exc, IntegrityError):
        message = _duplicate_message(exc)
        set_trace_status(engine, trace_id, TraceStatus.FAILED, message)
        raise InputError("upload", message) from exc
    if isinstance(exc, (InputError, UploadTooLarge)):  # bad input, or past the team's quota
        set_trace_status(engine, trace_id, TraceStatus.FAILED, str(exc))
        raise exc
    set_trace_status(engine, trace_id, TraceStatus.FAILED, f"ingestion failed: {exc}")
    raise exc


def _finish(
    conn: Connection,
    trace_id: int,
    loader: StepRowLoader,
    result: ReadResult,
    truncation: Truncation,
    n_steps: int,
    detected_format: str,
    bounds: Bounds,
) -> None:
    info = result.info
    meta = dict(info.metadata)
    meta["columns"] = {t: sorted(c - {"trace_id", "event_idx"}) for t, c in loader.columns.items()}
    if loader.counts["samples"]:
        meta["truncation"] = truncation_meta(truncation)
    if result.skipped:
        meta["skipped"] = result.skipped
    values = {COUNT_COLUMN[t]: n for t, n in loader.counts.items() if t in COUNT_COLUMN}
    if not n_steps:
        # GPU-only traces have no step rows: their steps are the ProfilerStep windows
        # (the same count the trace's overview shows)
        windows = (meta.get("kineto") or {}).get("steps") or {}
        n_steps = len({int(w[0]) for ws in windows.values() for w in ws})
    trace = conn.execute(
        select(Trace.meta, Trace.framework, Trace.source_format, Trace.size_bytes).where(Trace.id == trace_id)
    ).one()
    conn.execute(
        update(Trace)
        .where(Trace.id == trace_id)
        .values(
            **values,
            n_steps=n_steps,
            max_response_len=truncation.cap,
            tasks=list(loader.task_ids),
            framework=info.framework or trace.framework,
            source_format=trace.source_format or detected_format,
            meta={**(trace.meta or {}), **meta},
            # against the team's quota: what the upload expanded to, if more than it was
            stored_bytes=max(int(trace.size_bytes or 0), int(bounds.bytes_read.value)),
            status=TraceStatus.READY,
            error=None,
        )
    )


def _refresh_planner_statistics(engine: Engine) -> None:
    """ANALYZE the bulk tables (sampled, so cheap): without fresh statistics Postgres
    sorts a just-loaded trace instead of walking its primary key, doubling the first
    read, which is the default analyses' read."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in ("samples", "turns", "tool_calls", "gpu_events", "steps"):
            conn.exec_driver_sql(f"ANALYZE {table}")


def set_trace_status(engine: Engine, trace_id: int, status: str, error: str | None) -> None:
    with engine.begin() as conn:
        conn.execute(update(Trace).where(Trace.id == trace_id).values(status=status, error=error))
