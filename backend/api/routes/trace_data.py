"""A trace's data: steps, precomputed per-step summaries, samples, rank timings, GPU events.

Summaries and steps cost O(steps); samples and GPU events are paged or windowed.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import orjson
from fastapi import APIRouter, HTTPException, Path, Query, Response, status
from pydantic import AliasChoices, Field
from sqlalchemy import func, select

from backend.api.deps import ID_DIGITS, CurrentTeam, SessionDep, TraceDep, trace_of_team
from backend.api.errors import ERROR_RESPONSES
from backend.api.schemas import (
    NO_NUL,
    GpuEventOut,
    GpuEventPage,
    RankTimingList,
    RankTimingOut,
    SampleOut,
    SamplePage,
    StepList,
    StepOut,
    StepStats,
    SummaryOut,
    TrajectoryList,
    TrajectoryOut,
    TruncationOut,
    TurnList,
    TurnOut,
)
from backend.formats.kineto_events import load_events
from backend.ingest.truncation import trace_truncation
from backend.store.columns import read_columns
from backend.store.ids import ID_MAX, ID_MIN, INT4_MAX, INT4_MIN
from backend.store.models import (
    GpuEvent,
    GpuKernelName,
    RankTiming,
    Sample,
    Step,
    ToolCall,
    Trace,
    TraceStatus,
    Turn,
)
from backend.store.trace_tables import trace_events_dir
from core.analysis.gpu_diff import trace_diff
from core.analysis.gpu_export import chrome_trace_export, full_chrome_trace, select_events
from core.analysis.gpu_kinds import GpuKind
from core.analysis.stats import LOG_BIN_EDGES

router = APIRouter(prefix="/traces/{trace_id}", tags=["trace data"], responses=ERROR_RESPONSES)

KIND_NAMES = {k.value: k.name.lower() for k in GpuKind}

# Steps and ranks are int4 columns; a value outside their range matches nothing, and is
# refused (422) before the database sees it. Offsets are bounded by the row counts (int8).
StepQuery = Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Only this step")]
RankQuery = Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Only this rank")]
OffsetQuery = Annotated[int, Query(ge=0, le=2**62)]
TimeQuery = Annotated[float | None, Query(allow_inf_nan=False, ge=-1e300, le=1e300)]
Int4Path = Annotated[int, Path(ge=INT4_MIN, le=INT4_MAX)]


def require_ready(trace: Trace) -> None:
    if trace.status != TraceStatus.READY:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail={
                "message": f"trace {trace.id} is {trace.status}, not ready"
                + (f": {trace.error}" if trace.error else "")
            },
        )


@router.get("/steps", response_model=StepList)
def list_steps(session: SessionDep, trace: TraceDep):
    require_ready(trace)
    steps = session.scalars(select(Step).where(Step.trace_id == trace.id).order_by(Step.step))
    return StepList(items=[StepOut.model_validate(s) for s in steps])


@router.get("/summaries", response_model=SummaryOut)
def step_summaries(
    session: SessionDep,
    trace: TraceDep,
    field: Literal["response", "prompt", "total"] = "response",
    task: Annotated[
        str | None, Query(max_length=300, pattern=NO_NUL, description="A task name; all samples when omitted")
    ] = None,
):
    """Per-step length statistics and log-bin histograms, precomputed at ingestion."""
    require_ready(trace)
    if task is not None and task not in (trace.tasks or []):
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, detail={"message": f"no task '{task}' in trace {trace.id}", "field": "task"}
        )
    rows = session.execute(
        select(Step.step, Step.validate, Step.summary).where(Step.trace_id == trace.id).order_by(Step.step)
    )
    items = []
    for step, validate, summary in rows:
        stats = (summary or {}).get(field, {}).get(task or "all")
        if stats:
            items.append(StepStats(step=step, validate_=validate, **stats))
    return SummaryOut(
        field=field,
        task=task,
        tasks=trace.tasks or [],
        max_response_len=trace.max_response_len,
        truncation=TruncationOut(**trace_truncation(trace).as_dict()),
        bin_edges=LOG_BIN_EDGES.tolist(),
        steps=items,
    )


SampleSort = Literal[
    "step",
    "group_idx",
    "sample_idx",
    "rank",
    "dp_rank",
    "prompt_len",
    "response_len",
    "truncated",
    "reward",
    "num_turns",
    "num_tool_calls",
    "latency_s",
]
# Counting stops here: a filter over 10 M samples answers in O(page + cap), not O(trace).
SAMPLE_COUNT_CAP = 2_000


@router.get("/samples", response_model=SamplePage)
def list_samples(
    session: SessionDep,
    trace: TraceDep,
    step: StepQuery = None,
    step_min: Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Steps from (inclusive)")] = None,
    step_max: Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Steps up to (inclusive)")] = None,
    response_len_min: Annotated[
        int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Response length from (inclusive)")
    ] = None,
    response_len_max: Annotated[
        int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Response length below (exclusive)")
    ] = None,
    dp_rank: Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX)] = None,
    num_turns: Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX)] = None,
    truncated: bool | None = None,
    sort: Annotated[SampleSort, Query(description="A sample column")] = "step",
    order: Literal["asc", "desc"] = "asc",
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    offset: OffsetQuery = 0,
):
    """Samples matching every given filter, sorted by `sort` (ties in (step, group,
    sample) order) and paged. Step filters use the primary key, length filters and
    length sorts the (trace_id, response_len) index; `total` is exact from the steps
    table when only steps are filtered, else counts at most SAMPLE_COUNT_CAP matches
    (`total_is_lower_bound` says when it stopped)."""
    require_ready(trace)
    where = [Sample.trace_id == trace.id]
    if step is not None:
        where.append(Sample.step == step)
    if step_min is not None:
        where.append(Sample.step >= step_min)
    if step_max is not None:
        where.append(Sample.step <= step_max)
    if response_len_min is not None:
        where.append(Sample.response_len >= response_len_min)
    if response_len_max is not None:
        where.append(Sample.response_len < response_len_max)
    if dp_rank is not None:
        where.append(Sample.dp_rank == dp_rank)
    if num_turns is not None:
        where.append(Sample.num_turns == num_turns)
    known = trace_truncation(trace).known
    if truncated is not None:
        where.append(_truncated_filter(trace, truncated))
    step_only = all(v is None for v in (response_len_min, response_len_max, dp_rank, num_turns, truncated))
    total, capped = _sample_total(session, trace, where, (step, step_min, step_max) if step_only else None)
    key = getattr(Sample, sort)
    if sort == "response_len" and (step is not None or step_min is not None or step_max is not None):
        # Within steps the primary key range plus a top-k sort is cheap; walking the
        # whole trace's length index for a step's rows is not (the planner may pick it).
        key = key + 0
    primary = key.desc() if order == "desc" else key.asc()
    if sort in ("rank", "dp_rank", "truncated", "reward", "num_turns", "num_tool_calls", "latency_s"):
        primary = primary.nulls_last()
    tiebreak = [c.desc() if order == "desc" else c.asc() for c in (Sample.step, Sample.group_idx, Sample.sample_idx)]
    rows = session.scalars(select(Sample).where(*where).order_by(primary, *tiebreak).limit(limit).offset(offset))
    tasks = trace.tasks or []
    items = [
        SampleOut(
            **{c: getattr(r, c) for c in SampleOut.model_fields if c not in ("task", "validate_", "truncated")},
            task=tasks[r.task_id] if r.task_id is not None and 0 <= r.task_id < len(tasks) else None,
            validate_=r.validate,
            truncated=bool(r.truncated) if known else None,
        )
        for r in rows
    ]
    return SamplePage(items=items, total=int(total), total_is_lower_bound=capped)


def _sample_total(session, trace: Trace, where: list, steps: tuple | None) -> tuple[int, bool]:
    """(total, total_is_lower_bound): with only step filters (`steps` = step, min, max)
    exact and O(steps) from the per-step counts written at ingestion, else at most
    SAMPLE_COUNT_CAP matches counted."""
    if steps is not None:
        step, lo, hi = steps
        step_where = [Step.trace_id == trace.id]
        if step is not None:
            step_where.append(Step.step == step)
        if lo is not None:
            step_where.append(Step.step >= lo)
        if hi is not None:
            step_where.append(Step.step <= hi)
        return session.scalar(select(func.coalesce(func.sum(Step.n_samples), 0)).where(*step_where)) or 0, False
    matching = select(Sample.step).where(*where).limit(SAMPLE_COUNT_CAP + 1).subquery()
    total = session.scalar(select(func.count()).select_from(matching)) or 0
    return min(total, SAMPLE_COUNT_CAP), total > SAMPLE_COUNT_CAP


def _truncated_filter(trace: Trace, truncated: bool):
    """The one definition (backend/ingest/truncation.py) as a filter: the stored column
    holds it, samples below the cap being NULL; 422 when the trace has no truncation."""
    definition = trace_truncation(trace)
    if not definition.known:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY, detail={"message": definition.definition(), "field": "truncated"}
        )
    return Sample.truncated.is_(True) if truncated else Sample.truncated.is_not(True)


@router.get("/samples/{step}/{group_idx}/{sample_idx}/turns", response_model=TurnList)
def sample_turns(session: SessionDep, trace: TraceDep, step: Int4Path, group_idx: Int4Path, sample_idx: Int4Path):
    """One trajectory's turns in order: engine latency, the tool time of the calls made
    after the turn, cached vs new prompt tokens."""
    require_ready(trace)
    key = (
        Sample.trace_id == trace.id,
        Sample.step == step,
        Sample.group_idx == group_idx,
        Sample.sample_idx == sample_idx,
    )
    if session.scalar(select(func.count()).select_from(Sample).where(*key)) == 0:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail={"message": f"no sample ({step}, {group_idx}, {sample_idx}) in trace {trace.id}"},
        )
    turn_key = (
        Turn.trace_id == trace.id,
        Turn.step == step,
        Turn.group_idx == group_idx,
        Turn.sample_idx == sample_idx,
    )
    call_key = (
        ToolCall.trace_id == trace.id,
        ToolCall.step == step,
        ToolCall.group_idx == group_idx,
        ToolCall.sample_idx == sample_idx,
    )
    tool_time = dict(
        session.execute(
            select(ToolCall.turn, func.sum(ToolCall.latency_s)).where(*call_key).group_by(ToolCall.turn)
        ).all()
    )
    items = []
    for t in session.scalars(select(Turn).where(*turn_key).order_by(Turn.turn)):
        new = None
        if t.prompt_tokens is not None:
            new = t.prompt_tokens - (t.cached_tokens or 0)
        items.append(
            TurnOut(
                turn=t.turn,
                prompt_tokens=t.prompt_tokens,
                cached_tokens=t.cached_tokens,
                new_prompt_tokens=new,
                completion_tokens=t.completion_tokens,
                engine_latency_s=t.engine_latency_s,
                tool_call_count=t.tool_call_count,
                tool_latency_s=tool_time.get(t.turn),
                finish_reason=t.finish_reason,
            )
        )
    return TurnList(step=step, group_idx=group_idx, sample_idx=sample_idx, items=items)


DISCARD_FINISH = ("abort", "aborted", "error", "cancelled", "canceled")
DISCARD_TOOL_STATUS = ("error", "failed", "timeout", "rejected", "dropped")
TRAJECTORY_LIMIT = 20_000


@router.get("/steps/{step}/trajectories", response_model=TrajectoryList)
def step_trajectories(session: SessionDep, trace: TraceDep, step: Int4Path):
    """One step's trajectories as measured request timelines: each turn's engine time
    then its tool calls' time, back to back from 0 (the engine and tool time a
    trajectory spent, not wall-clock placement, which traces do not record). Sorted by
    end: the long tail are the last. Truncated = the sample's flag; discarded = a turn
    that finished with abort/error or a tool call that failed (DISCARD_* above). At
    most TRAJECTORY_LIMIT trajectories."""
    require_ready(trace)
    samples = session.execute(
        select(
            Sample.group_idx,
            Sample.sample_idx,
            Sample.response_len,
            Sample.num_turns,
            Sample.truncated,
            Sample.latency_s,
        )
        .where(Sample.trace_id == trace.id, Sample.step == step)
        .order_by(Sample.group_idx, Sample.sample_idx)
        .limit(TRAJECTORY_LIMIT)
    ).all()
    if not samples:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, detail={"message": f"no samples at step {step} in trace {trace.id}"}
        )
    turns: dict[tuple[int, int], list] = {}
    for g, i, turn, engine, finish in session.execute(
        select(Turn.group_idx, Turn.sample_idx, Turn.turn, Turn.engine_latency_s, Turn.finish_reason)
        .where(Turn.trace_id == trace.id, Turn.step == step)
        .order_by(Turn.group_idx, Turn.sample_idx, Turn.turn)
    ):
        turns.setdefault((g, i), []).append((turn, engine, finish))
    tools: dict[tuple[int, int, int | None], float] = {}
    failed: set[tuple[int, int]] = set()
    for g, i, tool_turn, latency, tool_status in session.execute(
        select(ToolCall.group_idx, ToolCall.sample_idx, ToolCall.turn, ToolCall.latency_s, ToolCall.status).where(
            ToolCall.trace_id == trace.id, ToolCall.step == step
        )
    ):
        tools[(g, i, tool_turn)] = tools.get((g, i, tool_turn), 0.0) + (latency or 0.0)
        if (tool_status or "").lower() in DISCARD_TOOL_STATUS:
            failed.add((g, i))
    items = []
    for g, i, response_len, num_turns, truncated, latency in samples:
        segments: list[tuple[str, float, float]] = []
        t = 0.0
        discarded = (g, i) in failed
        for turn, engine, finish in turns.get((g, i), []):
            if engine:
                segments.append(("engine", t, engine))
                t += engine
            tool = tools.get((g, i, turn))
            if tool:
                segments.append(("tool", t, tool))
                t += tool
            discarded = discarded or (finish or "").lower() in DISCARD_FINISH
        if not segments and latency:
            segments.append(("engine", 0.0, latency))
            t = latency
        items.append(
            TrajectoryOut(
                group_idx=g,
                sample_idx=i,
                response_len=response_len,
                num_turns=num_turns,
                truncated=bool(truncated),
                discarded=discarded,
                segments=segments,
                end_s=t,
            )
        )
    items.sort(key=lambda x: x.end_s)
    return TrajectoryList(step=step, items=items)


@router.get("/rank-timings", response_model=RankTimingList)
def list_rank_timings(session: SessionDep, trace: TraceDep, step: StepQuery = None):
    require_ready(trace)
    where = [RankTiming.trace_id == trace.id]
    if step is not None:
        where.append(RankTiming.step == step)
    rows = session.scalars(select(RankTiming).where(*where).order_by(RankTiming.step, RankTiming.rank))
    return RankTimingList(items=[RankTimingOut.model_validate(r) for r in rows])


@router.get("/gpu-events", response_model=GpuEventPage)
def list_gpu_events(
    session: SessionDep,
    trace: TraceDep,
    rank: RankQuery = None,
    step: StepQuery = None,
    start_us: TimeQuery = None,
    end_us: TimeQuery = None,
    limit: Annotated[int, Query(ge=1, le=200_000)] = 20_000,
    name: Annotated[
        str | None, Query(max_length=200, pattern=NO_NUL, description="kernel name contains (case-insensitive)")
    ] = None,
):
    """GPU events overlapping [start_us, end_us) on a rank, in time order (optionally only
    those whose kernel name contains `name`)."""
    require_ready(trace)
    where = [GpuEvent.trace_id == trace.id]
    if rank is not None:
        where.append(GpuEvent.rank == rank)
    if step is not None:
        where.append(GpuEvent.step == step)
    if end_us is not None:
        where.append(GpuEvent.start_us < end_us)
    if start_us is not None:
        where.append(GpuEvent.start_us + GpuEvent.dur_us > start_us)
    if name:
        where.append(func.lower(GpuKernelName.name).contains(name.lower(), autoescape=True))
    rows = session.execute(
        select(GpuEvent, GpuKernelName.name)
        .join(
            GpuKernelName,
            (GpuKernelName.trace_id == GpuEvent.trace_id) & (GpuKernelName.name_id == GpuEvent.name_id),
        )
        .where(*where)
        .order_by(GpuEvent.rank, GpuEvent.start_us)
        .limit(limit + 1)
    ).all()
    items = [
        GpuEventOut(
            rank=e.rank,
            stream=e.stream,
            step=e.step,
            kind=KIND_NAMES.get(e.kind, "compute"),
            name=name,
            start_us=e.start_us,
            dur_us=e.dur_us,
            launch_us=None if e.launch_us is None or e.launch_us != e.launch_us else e.launch_us,
        )
        for e, name in rows[:limit]
    ]
    return GpuEventPage(items=items, truncated=len(rows) > limit)


@router.get("/gpu-events/search")
def search_trace_events(
    session: SessionDep,
    trace: TraceDep,
    q: Annotated[
        str,
        Query(
            min_length=1,
            max_length=200,
            pattern=NO_NUL,
            description="name contains (case-insensitive); `name=` is taken too (its former name)",
            validation_alias=AliasChoices("q", "name"),
        ),
    ],
    rank: Annotated[list[Annotated[int, Field(ge=INT4_MIN, le=INT4_MAX)]] | None, Query(max_length=10_000)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
):
    """Events of any kind (CPU ops, annotations, runtime calls, GPU kernels...) whose name
    contains `q`, in time order: `{"items": [{rank, cat, name, ts_us, dur_us,
    stream}], "total": matches}`. Needs the events kept at ingest (409 otherwise).
    `name` is the parameter's former name, still accepted."""
    needle = q.lower()
    require_ready(trace)
    kept = load_events(trace_events_dir(trace.id))
    if kept is None:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail={"message": f"trace {trace.id} has no kept Kineto events (search its GPU events instead)"},
        )
    wanted = {n for n in kept.names if needle in n.lower()}
    hit = kept.name_mask(wanted) & (kept.ph == 0) & (kept.cat != kept.cat_id("Trace"))
    if rank:
        hit &= np.isin(kept.rank, rank)
    idx = np.flatnonzero(hit)
    idx = idx[np.argsort(kept.ts[idx], kind="stable")]
    items = [
        {
            "rank": int(kept.rank[i]),
            "cat": kept.cats[kept.cat[i]],
            "name": kept.names[kept.name[i]],
            "ts_us": float(kept.ts[i]),
            "dur_us": float(kept.dur[i]),
            "stream": int(kept.stream[i]),
        }
        for i in idx[:limit].tolist()
    ]
    return {"items": items, "total": int(len(idx))}


@router.get(
    "/gpu-events/chrome-trace",
    responses={200: {"description": "Chrome trace-event JSON (opens in Perfetto / chrome://tracing)"}},
)
def export_chrome_trace(
    session: SessionDep,
    trace: TraceDep,
    rank: Annotated[list[Annotated[int, Field(ge=INT4_MIN, le=INT4_MAX)]] | None, Query(max_length=10_000)] = None,
    step: StepQuery = None,
    start_us: TimeQuery = None,
    end_us: TimeQuery = None,
    events: Annotated[
        Literal["all", "gpu"],
        Query(
            description="all: every event kept from the Kineto files (CPU ops, CUDA runtime calls, "
            "annotations, flows, GPU work); gpu: GPU kernels / memcpy / memset only"
        ),
    ] = "all",
):
    """A rank/step/time window (or the whole trace) as a downloadable Chrome trace.

    With `events=all` (the default, when the ingest kept the trace's events) the export
    holds every kind of event of the uploaded files in the window: events overlapping
    [start_us, end_us); for a `step`, the CPU-side events inside its ProfilerStep plus the
    GPU work and flow arrows they launched. Traces ingested before events were kept fall
    back to the GPU events."""
    require_ready(trace)
    window = None
    if start_us is not None or end_us is not None:
        window = (start_us if start_us is not None else float("-inf"), end_us if end_us is not None else float("inf"))
    filename = f"trace-{trace.id}" + (f"-step{step}" if step is not None else "") + ".json"
    kept = load_events(trace_events_dir(trace.id)) if events == "all" else None
    if kept is not None:
        steps = ((trace.meta or {}).get("kineto") or {}).get("steps")
        idx = select_events(kept, ranks=rank, window_us=window, step=step, step_windows=steps)
        body = full_chrome_trace(kept, idx)
    else:
        conn = session.connection()
        gpu = read_columns(
            conn,
            "gpu_events",
            trace.id,
            ["rank", "stream", "step", "kind", "name_id", "start_us", "dur_us"],
            order_by="event_idx",
        )
        names = dict(
            session.execute(
                select(GpuKernelName.name_id, GpuKernelName.name).where(GpuKernelName.trace_id == trace.id)
            ).all()
        )
        body = chrome_trace_export(gpu, ranks=rank, step=step, window_us=window, names=names)
    return Response(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/gpu-diff")
def gpu_trace_diff(
    session: SessionDep,
    trace: TraceDep,
    team: CurrentTeam,
    test_trace_id: Annotated[
        int, Query(ge=ID_MIN, le=ID_MAX, description="The trace compared against this one (same team)"), ID_DIGITS
    ],
    control_rank: RankQuery = None,
    test_rank: RankQuery = None,
    control_step: StepQuery = None,
    test_step: StepQuery = None,
    device: Literal["all", "cpu", "gpu"] = "all",
):
    """Ops and kernels added, removed and changed in count and time from this trace (the
    control) to `test_trace_id` (HTA TraceDiff.compare_traces: by default the first rank
    and the first ProfilerStep of each). Both must be Kineto traces whose events were
    kept at ingest."""
    require_ready(trace)
    other = trace_of_team(session, team, test_trace_id)
    require_ready(other)
    kept = []
    for t in (trace, other):
        ev = load_events(trace_events_dir(t.id))
        if ev is None:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                detail={
                    "message": f"trace {t.id} has no kept Kineto events (not a Kineto trace, or ingested "
                    "before events were kept: upload it again)"
                },
            )
        kept.append(ev)
    try:
        result = trace_diff(
            kept[0],
            kept[1],
            control_rank=control_rank,
            test_rank=test_rank,
            control_iteration=control_step,
            test_iteration=test_step,
            device=device,
        )
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, detail={"message": str(exc)}) from None
    result["control"]["trace_id"] = trace.id
    result["test"]["trace_id"] = other.id
    return Response(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")
