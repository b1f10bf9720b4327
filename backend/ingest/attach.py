"""Attach files to an existing trace: more steps, a verl metric log, Kineto traces of the
same run, reward timings, a DAPO filter file.

All-or-nothing on every database: the whole attach is one transaction (an attach is a
run's increment, small next to an upload), so a bad file leaves the trace as it was.
Idempotent by content: the hash of the attached files (names and bytes, as uploads are
hashed) is recorded per trace in `trace_attachments`; the same content again is a no-op.
Rows that collide with rows the trace already has (the same step/group/sample twice) are
an InputError naming the upload. Afterwards the per-step summaries of every step that
received samples are recomputed from all of that step's samples, measured step figures
(stage timings, metrics) are merged into the step rows, and the trace's counts, tasks,
columns and reader metadata are merged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from backend.formats import read_sources
from backend.formats.base import InputError, ReadResult, Source
from backend.formats.dapo import dapo_marks, unmatched_note
from backend.ingest.bounds import Bounds
from backend.ingest.pipeline import COUNT_COLUMN, StepRowLoader
from backend.ingest.rollout_attach import DumpMatcher, merge_rollouts, trace_length_unit
from backend.ingest.summaries import SUMMARY_COLUMNS, summarize_steps
from backend.ingest.truncation import settle_truncation, trace_truncation, truncation_meta
from backend.ingest.uploads import Room
from backend.settings import get_settings
from backend.store.columns import read_columns
from backend.store.models import GpuKernelName, Sample, Step, Trace, TraceAttachment, TraceStatus
from core.analysis.registry import ANALYSES
from core.analysis.tables import STEP_TIMING_COLUMNS


@dataclass
class AttachOutcome:
    created: bool  # False: this content was attached before (nothing changed)
    tables: list[str] = field(default_factory=list)  # tables that received or changed rows
    steps: list[int] = field(default_factory=list)  # steps touched
    skipped: list[str] = field(default_factory=list)


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    """Half-open ranges of consecutive steps."""
    out: list[tuple[int, int]] = []
    for s in sorted(set(steps)):
        if out and out[-1][1] == s:
            out[-1] = (out[-1][0], s + 1)
        else:
            out.append((s, s + 1))
    return out


def merge_meta(old: dict, new: dict) -> dict:
    """Trace metadata after an attach: columns unioned per table, Kineto facts merged per
    rank, DAPO lines appended, skip notes appended; other keys: the newer value."""
    kept = ("columns", "kineto", "dapo_filter", "skipped", "rollouts")
    out = {**old, **{k: v for k, v in new.items() if k not in kept}}
    if "rollouts" in new:
        out["rollouts"] = merge_rollouts(old.get("rollouts"), new["rollouts"])
    cols = {t: set(c) for t, c in (old.get("columns") or {}).items()}
    for t, c in (new.get("columns") or {}).items():
        cols.setdefault(t, set()).update(c)
    out["columns"] = {t: sorted(c) for t, c in cols.items()}
    if "kineto" in new:
        a, b = old.get("kineto") or {}, new["kineto"]
        k = {**a, **{x: y for x, y in b.items() if not isinstance(y, dict) and x != "ranks"}}
        k["ranks"] = sorted(set(a.get("ranks", [])) | set(b.get("ranks", [])))
        for name in ("files", "devices", "streams"):
            merged = {r: list(v) for r, v in (a.get(name) or {}).items()}
            for r, v in (b.get(name) or {}).items():
                merged[r] = sorted(set(merged.get(r, [])) | set(v))
            k[name] = merged
        counts = dict(a.get("gpu_events") or {})
        for r, n in (b.get("gpu_events") or {}).items():
            counts[r] = counts.get(r, 0) + n
        k["gpu_events"] = counts
        windows = {r: list(v) for r, v in (a.get("steps") or {}).items()}
        for r, v in (b.get("steps") or {}).items():
            windows[r] = sorted(windows.get(r, []) + list(v), key=lambda w: w[1])
        k["steps"] = windows
        out["kineto"] = k
    if "dapo_filter" in new:
        lines = list(old.get("dapo_filter") or []) + list(new["dapo_filter"])
        out["dapo_filter"] = sorted(lines, key=lambda e: e["workload_step"])
    if new.get("skipped"):
        out["skipped"] = list(old.get("skipped") or []) + list(new["skipped"])
    return out


class _AttachLoader(StepRowLoader):
    """A loader that continues a trace: task and kernel ids and event numbers go on from
    what the trace has."""

    def __init__(self, conn, trace, bounds: Bounds):
        super().__init__(conn, trace.id, bounds)
        self.start = {t: int(getattr(trace, c) or 0) for t, c in COUNT_COLUMN.items()}
        self.counts = dict(self.start)
        self.task_ids = {name: i for i, name in enumerate(trace.tasks or [])}
        names = conn.execute(
            select(GpuKernelName.name_id, GpuKernelName.name)
            .where(GpuKernelName.trace_id == trace.id)
            .order_by(GpuKernelName.name_id)
        ).all()
        self.kernel_ids = {name: int(i) for i, name in names}
        self.prior_sample_columns = set(((trace.meta or {}).get("columns") or {}).get("samples", ()))

    def _duplicate(self, table, cols, exc, file):
        return None  # rows the trace holds already: said by _load_attached, in its transaction


def _apply_dapo_marks(conn, trace_id: int, result: ReadResult) -> list[int]:
    """Marks of generation steps this attach brought no samples for go onto the trace's
    existing samples of those steps (by prompt group ordinal). Returns the steps marked."""
    marks = dapo_marks(result)
    done = result.state.setdefault("dapo_marked_steps", set())
    applied = []
    for step in sorted(set(marks) - done):
        sm = marks[step]
        n, marked, top = conn.execute(
            select(func.count(), func.count(Sample.filter_mark), func.max(Sample.group_idx)).where(
                Sample.trace_id == trace_id, Sample.step == step
            )
        ).one()
        if not n:
            continue
        if marked:
            raise InputError(sm.source, f"step {step} of the trace already has DAPO marks", sm.line, "workload_step")
        if top >= len(sm.marks):
            raise InputError(
                sm.source,
                f"the trace's step {step} has prompt group {top}, beyond prompt_count {len(sm.marks)}",
                sm.line,
                "prompt_count",
            )
        for mark in np.unique(sm.marks).tolist():
            groups = np.flatnonzero(sm.marks == mark).tolist()
            conn.execute(
                update(Sample)
                .where(Sample.trace_id == trace_id, Sample.step == step, Sample.group_idx.in_(groups))
                .values(filter_mark=int(mark), trainer_step=int(sm.trainer_step))
            )
        done.add(step)
        applied.append(step)
    return applied


def _settle(conn, trace, loader: _AttachLoader, result: ReadResult, marked: list[int]):
    """(the trace's truncation after this attach, the steps whose summaries to rewrite):
    the trace keeps its cap; a cap found only now applies to its earlier steps too."""
    kept = trace_truncation(trace)
    steps = sorted(set(loader.steps.counts) | set(marked))
    if not loader.steps.counts:
        return kept, steps
    tokens = result.info.length_unit == "tokens"  # a cap says nothing of character lengths
    truncation = settle_truncation(
        conn,
        trace.id,
        loader.columns.setdefault("samples", set()),
        given=None,
        recorded=result.info.max_response_len if tokens else None,
        inferred=loader.steps.inferred_cap() if tokens else None,
        kept=kept,
    )
    if truncation.cap != kept.cap or truncation.length_cap != kept.length_cap:
        earlier = conn.scalars(select(Step.step).where(Step.trace_id == trace.id, Step.n_samples > 0))
        steps = sorted(set(steps) | set(earlier))
    return truncation, steps


def _write_steps(
    conn, loader: _AttachLoader, cap: int | None, sample_steps: list[int], length_cap: int | None = None
) -> None:
    available = set(loader.columns.get("samples") or set()) | loader.prior_sample_columns
    columns = [c for c in SUMMARY_COLUMNS if c in available]
    rows: dict[int, dict] = {}
    for lo, hi in _runs(sample_steps):
        cols = read_columns(conn, "samples", loader.trace_id, columns, step_range=(lo, hi))
        for summary in summarize_steps(cols, cap, list(loader.task_ids), length_cap):
            rows[summary.step] = asdict(summary)
    touched = sorted(set(rows) | set(loader.measured))
    if not touched:
        return
    existing = {
        r.step: r
        for r in conn.execute(
            select(Step.step, Step.metrics).where(Step.trace_id == loader.trace_id, Step.step.in_(touched))
        ).all()
    }
    for step in touched:
        values = dict(rows.get(step, {}))
        values.pop("step", None)
        measured = loader.measured.get(step)
        if measured:
            values.update({k: v for k, v in measured.items() if k in STEP_TIMING_COLUMNS})
        if step in existing:
            if measured:
                values["metrics"] = {**(existing[step].metrics or {}), **measured["metrics"]}
            values.pop("step", None)
            if values:
                conn.execute(update(Step).where(Step.trace_id == loader.trace_id, Step.step == step).values(**values))
        else:
            values.setdefault("summary", {})
            values["metrics"] = (measured or {}).get("metrics", {})
            conn.execute(insert(Step).values(trace_id=loader.trace_id, step=step, **values))


def attach_sources(
    engine: Engine,
    trace_id: int,
    sources: list[Source],
    *,
    content_hash: str,
    names: list[str],
    size_bytes: int,
    forced_format: str | None = None,
    quota: Room | None = None,
) -> AttachOutcome:
    """Add `sources` to ready trace `trace_id` in one transaction (see the module doc);
    the bytes read count against `quota` (what the team has left), when given."""
    result = ReadResult()
    bounds = Bounds(get_settings(), quota)
    with engine.connect() as conn:
        with conn.begin():
            seen = conn.execute(
                select(TraceAttachment.trace_id).where(
                    TraceAttachment.trace_id == trace_id, TraceAttachment.content_hash == content_hash
                )
            ).first()
            if seen is not None:
                return AttachOutcome(created=False)
            trace = conn.execute(select(Trace.__table__).where(Trace.id == trace_id).with_for_update()).one()
            trace_meta = dict(trace.meta or {})
            loader = _AttachLoader(conn, trace, bounds)
            # a rollout dump's samples land on the trace's own when it has them (rollout_attach.py)
            dumps = DumpMatcher(conn, trace_id, result, trace_length_unit(trace_meta, trace.n_samples))
            marked = _load_attached(
                conn,
                trace_id,
                loader,
                dumps,
                read_sources(bounds.sources(sources), forced_format, result, marks_alone=True),
                result,
            )
            result.skipped = [s for s in result.skipped if "DAPO marks for generation step" not in s]
            note = unmatched_note(result)
            if note:
                result.skipped.append(note)
            if marked:
                loader.columns.setdefault("samples", set()).update({"filter_mark", "trainer_step"})
            if dumps.matched:
                loader.columns.setdefault("samples", set()).update({"reward", "repeat_period"})
            truncation, sample_steps = _settle(conn, trace, loader, result, marked)
            _write_steps(conn, loader, truncation.cap, sample_steps, truncation.length_cap)
            extra = {"truncation": truncation_meta(truncation)} if loader.steps.counts else {}
            merged, n_steps = _merged_meta(conn, trace_id, trace_meta, result, loader, extra)
            conn.execute(
                update(Trace)
                .where(Trace.id == trace_id)
                .values(
                    **{COUNT_COLUMN[t]: n for t, n in loader.counts.items() if t in COUNT_COLUMN},
                    n_steps=n_steps,
                    max_response_len=truncation.cap,
                    tasks=list(loader.task_ids),
                    framework=trace.framework or result.info.framework,
                    size_bytes=Trace.size_bytes + size_bytes,
                    stored_bytes=Trace.stored_bytes + max(size_bytes, int(bounds.bytes_read.value)),
                    meta=merged,
                    status=TraceStatus.READY,
                    error=None,
                )
            )
            tables = set(loader.columns) | ({"samples"} if marked or dumps.matched else set())
            if sample_steps or loader.measured:
                tables.add("steps")
            steps = sorted(set(sample_steps) | set(loader.measured))
            conn.execute(
                insert(TraceAttachment).values(
                    trace_id=trace_id,
                    content_hash=content_hash,
                    names=names,
                    size_bytes=size_bytes,
                    tables=sorted(tables),
                    steps=steps,
                )
            )
    return AttachOutcome(created=True, tables=sorted(tables), steps=steps, skipped=result.skipped)


def _load_attached(conn, trace_id: int, loader, dumps: DumpMatcher, batches, result: ReadResult) -> list[int]:
    """The upload's batches into the trace (a rollout dump's matched to its samples), then
    the DAPO marks; the steps marked. Rows the trace holds already are an
    InputError naming the clash."""
    try:
        for batch in dumps.batches(batches):
            loader.add(batch)
        return _apply_dapo_marks(conn, trace_id, result)
    except IntegrityError as exc:
        detail = " ".join(str(exc.orig).strip().splitlines()[:2])
        raise InputError(
            "upload",
            f"rows already in trace {trace_id} (the same step/group/sample, or step/rank/phase, "
            f"twice); attach only new steps or new kinds of data: {detail}",
        ) from exc


def _merged_meta(conn, trace_id: int, trace_meta: dict, result: ReadResult, loader, extra: dict) -> tuple[dict, int]:
    """The trace's metadata with the attach's (and `extra`) merged in, and its step count after it."""
    meta = dict(result.info.metadata)
    meta["columns"] = {t: sorted(c - {"trace_id", "event_idx"}) for t, c in loader.columns.items()}
    meta.update(extra)
    if result.skipped:
        meta["skipped"] = result.skipped
    merged = merge_meta(trace_meta, meta)
    n_steps = conn.scalar(select(func.count()).select_from(Step).where(Step.trace_id == trace_id)) or 0
    if not n_steps:  # GPU-only traces: their steps are the ProfilerStep windows
        windows = (merged.get("kineto") or {}).get("steps") or {}
        n_steps = len({int(w[0]) for ws in windows.values() for w in ws})
    return merged, n_steps


def attach_stored(session, settings, trace_id: int, stored, forced_format: str | None = None) -> AttachOutcome:
    """Attach a stored upload (backend.ingest.uploads) to a trace, then refresh what
    depends on it: results of analyses reading a changed table stop being reused and the
    default analyses are queued again."""
    from backend.ingest.quota import team_usage
    from backend.ingest.uploads import discard, upload_sources
    from backend.store.db import get_engine

    try:
        team_id = session.get_one(Trace, trace_id).team_id
        usage = team_usage(session, team_id, settings)
        usage.check_stored(stored, settings)  # what it expands to, before reading it
        session.commit()  # no transaction held while the files are read
        sources = upload_sources(stored.files, settings, stored.shown)
        outcome = attach_sources(
            get_engine(),
            trace_id,
            sources,
            content_hash=stored.content_hash,
            names=[f.name for f in stored.files],
            size_bytes=stored.size_bytes,
            forced_format=forced_format,
            quota=usage,
        )
    finally:
        discard(stored.folder)
    if outcome.created:
        refresh_analyses(session, trace_id, outcome.tables)
    return outcome


def refresh_analyses(session, trace_id: int, tables: list[str], *, force: bool = False) -> None:
    """Stop reuse of the results the change affects and queue the default analyses. For
    a live trace this is debounced: while its analyses are still queued or running, the
    next attach (or closing the trace) catches up instead."""
    from backend.jobs.analyses import invalidate_analyses, queue_default_analyses
    from backend.store.models import Job, JobStatus

    session.expire_all()
    trace = session.get(Trace, trace_id)
    if trace.live and not force:
        busy = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(
                Job.trace_id == trace_id,
                Job.kind.in_(list(ANALYSES)),
                Job.status.in_((JobStatus.QUEUED, JobStatus.RUNNING)),
            )
        )
        if busy:
            return
    invalidate_analyses(session, trace_id, tables)
    queue_default_analyses(session, session.get(Trace, trace_id))
    if "sample_texts" in tables:
        from backend.jobs.text_index import queue_text_index

        queue_text_index(session, session.get(Trace, trace_id))
