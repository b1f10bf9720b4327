"""A trace's data: steps, precomputed per-step summaries, samples, rank timings, GPU events.

Summaries and steps cost O(steps); samples and GPU events are paged or windowed.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import orjson
from fastapi import APIRouter, HTTPException, Query, Response, status
from pydantic import AliasChoices, Field

from backend.api.deps import ID_DIGITS, CurrentTeam, SessionDep, TraceDep, require_ready, trace_of_team
from backend.api.errors import ERROR_RESPONSES
from backend.api.params import Int4Path, OffsetQuery, RankQuery, StepQuery, TimeQuery
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
from backend.store.models import Trace
from backend.store.queries import gpu_events, samples, steps, turns
from backend.store.queries.samples import SampleFilter
from backend.store.trace_tables import trace_events_dir
from core.analysis.gpu_diff import trace_diff
from core.analysis.gpu_export import chrome_trace_export, full_chrome_trace, select_events
from core.analysis.gpu_kinds import GpuKind
from core.analysis.stats import LOG_BIN_EDGES

router = APIRouter(prefix="/traces/{trace_id}", tags=["trace data"], responses=ERROR_RESPONSES)

KIND_NAMES = {k.value: k.name.lower() for k in GpuKind}


@router.get("/steps", response_model=StepList)
def list_steps(session: SessionDep, trace: TraceDep):
    require_ready(trace)
    found = steps.list_steps(session, team_id=trace.team_id, trace_id=trace.id)
    return StepList(items=[StepOut.model_validate(s) for s in found])


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
    rows = steps.step_summaries(session, team_id=trace.team_id, trace_id=trace.id)
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
    known = trace_truncation(trace).known
    if truncated is not None:
        _require_truncation(trace)
    filters = SampleFilter(
        step=step,
        step_min=step_min,
        step_max=step_max,
        response_len_min=response_len_min,
        response_len_max=response_len_max,
        dp_rank=dp_rank,
        num_turns=num_turns,
        truncated=truncated,
    )
    owner = trace.team_id
    total, capped = samples.count_samples(
        session, team_id=owner, trace_id=trace.id, filters=filters, cap=SAMPLE_COUNT_CAP
    )
    rows = samples.sample_page(
        session, team_id=owner, trace_id=trace.id, filters=filters, sort=sort, order=order, limit=limit, offset=offset
    )
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


def _require_truncation(trace: Trace) -> None:
    """The truncated filter reads the one definition (backend/ingest/truncation.py),
    which the stored column holds: 422 when the trace has none."""
    definition = trace_truncation(trace)
    if not definition.known:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY, detail={"message": definition.definition(), "field": "truncated"}
        )


@router.get("/samples/{step}/{group_idx}/{sample_idx}/turns", response_model=TurnList)
def sample_turns(session: SessionDep, trace: TraceDep, step: Int4Path, group_idx: Int4Path, sample_idx: Int4Path):
    """One trajectory's turns in order: engine latency, the tool time of the calls made
    after the turn, cached vs new prompt tokens."""
    require_ready(trace)
    key = (step, group_idx, sample_idx)
    if not samples.sample_exists(session, team_id=trace.team_id, trace_id=trace.id, key=key):
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail={"message": f"no sample ({step}, {group_idx}, {sample_idx}) in trace {trace.id}"},
        )
    found, tool_time = turns.sample_turns(session, team_id=trace.team_id, trace_id=trace.id, key=key)
    items = []
    for t in found:
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


TRAJECTORY_LIMIT = 20_000


@router.get("/steps/{step}/trajectories", response_model=TrajectoryList)
def step_trajectories(session: SessionDep, trace: TraceDep, step: Int4Path):
    """One step's trajectories as measured request timelines: each turn's engine time
    then its tool calls' time, back to back from 0 (the engine and tool time a
    trajectory spent, not wall-clock placement, which traces do not record). Sorted by
    end: the long tail are the last. Truncated = the sample's flag; discarded = a turn
    that finished with abort/error/cancelled or a tool call that failed (error, timeout,
    rejected, dropped). At most TRAJECTORY_LIMIT trajectories."""
    require_ready(trace)
    found = turns.step_trajectories(
        session, team_id=trace.team_id, trace_id=trace.id, step=step, limit=TRAJECTORY_LIMIT
    )
    if not found:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, detail={"message": f"no samples at step {step} in trace {trace.id}"}
        )
    items = [TrajectoryOut(**vars(t)) for t in found]
    return TrajectoryList(step=step, items=items)


@router.get("/rank-timings", response_model=RankTimingList)
def list_rank_timings(session: SessionDep, trace: TraceDep, step: StepQuery = None):
    require_ready(trace)
    rows = gpu_events.rank_timings(session, team_id=trace.team_id, trace_id=trace.id, step=step)
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
    rows = gpu_events.gpu_event_window(
        session,
        team_id=trace.team_id,
        trace_id=trace.id,
        rank=rank,
        step=step,
        start_us=start_us,
        end_us=end_us,
        name_contains=name,
        limit=limit + 1,
    )
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
        step_windows = ((trace.meta or {}).get("kineto") or {}).get("steps")
        idx = select_events(kept, ranks=rank, window_us=window, step=step, step_windows=step_windows)
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
        names = gpu_events.kernel_names(session, team_id=trace.team_id, trace_id=trace.id)
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
