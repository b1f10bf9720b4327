"""Growing traces: attach files to a trace, live traces a trainer (or `rlvr-explorer
watch`) streams steps into, closing them, and per-step series for the metric explorer."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, File, Form, HTTPException, Query, Response, UploadFile, status
from fastapi.concurrency import run_in_threadpool
from pydantic import AfterValidator, BaseModel, Field

from backend.api.deps import CurrentTeam, SessionDep, SettingsDep, TraceDep, require_ready
from backend.api.errors import ERROR_RESPONSES
from backend.api.schemas import NO_NUL, TraceOut
from backend.api.upload_fields import TokenizerField, upload_items
from backend.api.views import trace_out
from backend.formats import FORMATS
from backend.formats.base import Source
from backend.ingest.attach import attach_sources, attach_stored, refresh_analyses
from backend.ingest.quota import team_usage
from backend.ingest.uploads import StoredUpload, store_upload
from backend.settings import get_settings
from backend.store.db import get_engine
from backend.store.models import Trace
from backend.store.queries import jobs as job_queries
from backend.store.queries import steps as step_queries
from backend.store.queries import traces as trace_queries
from backend.store.series import SERIES_LIMIT, analysis_series, series_keys, series_values

router = APIRouter(prefix="/traces", tags=["live traces"], responses=ERROR_RESPONSES)


class AttachOut(BaseModel):
    trace: TraceOut
    created: bool = Field(description="False: this content was attached before; nothing changed")
    tables: list[str] = []
    steps: list[int] = []
    skipped: list[str] = []


class LiveTraceIn(BaseModel):
    name: str = Field(min_length=1, max_length=300, pattern=NO_NUL)
    metadata: dict[str, Any] = Field(default_factory=dict)


# A metric value: a JSON number, finite (NaN, infinities and text are refused by key).
MetricValue = Annotated[float, Field(strict=True, allow_inf_nan=False)]

# A metric's name (text, stored as a series key: 1-300 characters, no NUL; declared as
# JSON Schema's propertyNames) and value: a JSON number (strict: true and "1" are
# refused, as the schema says number) or null (not logged at this step).
METRIC_NAME = {"minLength": 1, "maxLength": 300, "pattern": NO_NUL}


def _metric_names(metrics: dict) -> dict:
    if not metrics:
        raise ValueError("at least one metric")
    for name in metrics:
        if not 1 <= len(name) <= 300 or "\x00" in name:
            raise ValueError(f"metric name {name[:40]!r}: 1 to 300 characters, no NUL")
    return metrics


class StepMetrics(BaseModel):
    step: int = Field(ge=0, le=2**31 - 1)
    metrics: Annotated[
        dict[str, MetricValue | None],
        AfterValidator(_metric_names),
        # minProperties by hand: pydantic's min_length on a dict reaches the schema as minLength
        Field(description="at least one metric", json_schema_extra={"propertyNames": METRIC_NAME, "minProperties": 1}),
    ]


class StepLogIn(BaseModel):
    steps: list[StepMetrics] = Field(min_length=1, max_length=10_000)


class StepLogOut(BaseModel):
    created: bool
    steps: list[int]
    n_steps: int


class SeriesOut(BaseModel):
    trace_id: int
    live: bool
    steps: list[int] = Field(description="steps in order; a series' values align with them (null: missing)")
    series: dict[str, list[float | None]]
    keys: list[str] = Field(description="every per-step series the trace has")


@router.post("/live", status_code=status.HTTP_201_CREATED, response_model=TraceOut)
def create_live_trace(body: LiveTraceIn, session: SessionDep, team: CurrentTeam):
    """An empty trace marked live, for steps to stream into (watch, Client.log)."""
    trace = trace_queries.add_live_trace(session, team_id=team.id, name=body.name, meta=body.metadata)
    session.commit()
    return trace_out(session, trace)


@router.post(
    "/{trace_id}/files",
    status_code=status.HTTP_201_CREATED,
    response_model=AttachOut,
    responses={200: {"model": AttachOut, "description": "The same content was attached before: nothing changed."}},
)
async def attach_files(
    session: SessionDep,
    settings: SettingsDep,
    trace: TraceDep,
    response: Response,
    files: Annotated[list[UploadFile], File(description="Files of the same run, or one .zip / .tar.gz")],
    tokenizer: TokenizerField = None,
    format: Annotated[str | None, Form(description="Force a format instead of detecting it")] = None,
):
    """Add files to an existing trace, all-or-nothing and idempotent by content; bad
    input is a 422 naming file, line and field. The default analyses run again on the
    new data."""
    require_ready(trace)
    if format is not None and format not in FORMATS:
        raise HTTPException(
            422,
            detail={"message": f"unknown format '{format}'; known: {', '.join(sorted(FORMATS))}", "field": "format"},
        )
    usage = await run_in_threadpool(team_usage, session, trace.team_id, settings)
    usage.check()
    await run_in_threadpool(session.commit)
    stored = await run_in_threadpool(store_upload, upload_items(files, tokenizer), settings, usage)
    outcome = await run_in_threadpool(attach_stored, session, settings, trace.id, stored, format)
    session.expire_all()
    if not outcome.created:
        response.status_code = status.HTTP_200_OK
    return AttachOut(trace=trace_out(session, trace), **outcome.__dict__)


@router.post(
    "/{trace_id}/steps",
    status_code=status.HTTP_201_CREATED,
    response_model=StepLogOut,
    responses={200: {"model": StepLogOut, "description": "These exact steps were logged before."}},
)
def log_steps(body: StepLogIn, session: SessionDep, trace: TraceDep, response: Response):
    """Append (or merge) per-step metrics, keyed as verl logs them (``timing_s/gen`` ...
    fill the stage timings). Idempotent: the same steps with the same metrics again change
    nothing. Analyses are not re-run per call; closing the trace runs them."""
    require_ready(trace)
    lines = b"".join(
        orjson.dumps({"step": s.step, "data": {k: v for k, v in s.metrics.items() if v is not None}}) + b"\n"
        for s in body.steps
    )
    team_usage(session, trace.team_id, get_settings()).check(len(lines))
    digest = hashlib.sha256(b"client-log\0" + lines).hexdigest()
    name = f"client_log_step_{body.steps[0].step}.jsonl"
    outcome = attach_sources(
        get_engine(),
        trace.id,
        [Source(name, lambda: _BytesIO(lines), len(lines))],
        content_hash=digest,
        names=[name],
        size_bytes=len(lines),
        forced_format="verl-jsonl",
    )
    if not outcome.created:
        response.status_code = status.HTTP_200_OK
    session.expire_all()
    return StepLogOut(created=outcome.created, steps=outcome.steps, n_steps=trace.n_steps)


def _BytesIO(data: bytes):
    import io

    return io.BytesIO(data)


@router.post("/{trace_id}/close", response_model=TraceOut)
def close_trace(session: SessionDep, trace: TraceDep):
    """The run is over: the trace stops being live and its default analyses run on all
    of it."""
    was_live = trace.live
    trace.live = False
    session.commit()
    if was_live:
        refresh_analyses(
            session, trace.id, ["steps", "samples", "rank_timings", "turns", "tool_calls", "gpu_events"], force=True
        )
    return trace_out(session, trace)


@router.post("/{trace_id}/open", response_model=TraceOut)
def open_trace(session: SessionDep, trace: TraceDep):
    """Mark a trace live again (a watcher resuming a run)."""
    trace.live = True
    session.commit()
    return trace_out(session, trace)


@router.get("/{trace_id}/series", response_model=SeriesOut)
def get_series(
    session: SessionDep,
    trace: TraceDep,
    keys: Annotated[list[str] | None, Query(description="series to return (repeat, or comma-separated)")] = None,
    missing: Annotated[
        Literal["error", "skip"], Query(description="a key the trace lacks: 404 (error) or left out (skip)")
    ] = "error",
):
    """The trace's per-step series: every verl metric key, every stage timing
    (``t_gen`` ...) and every per-step length statistic (``response/p99`` ...), listed
    in `keys`; the chosen ones come back aligned with `steps`. O(steps)."""
    require_ready(trace)
    wanted = [k for entry in (keys or []) for k in entry.split(",") if k]
    if len(wanted) > SERIES_LIMIT:
        raise HTTPException(
            422, detail={"message": f"at most {SERIES_LIMIT} series per request, got {len(wanted)}", "field": "keys"}
        )
    rows = step_queries.step_series_rows(session, team_id=trace.team_id, trace_id=trace.id)
    available = series_keys(rows)
    from_analyses = _analysis_series(session, trace)
    available += sorted(from_analyses)
    unknown = [k for k in wanted if k not in available]
    if unknown and missing == "skip":
        wanted = [k for k in wanted if k in available]
    elif unknown:
        raise HTTPException(
            404, detail={"message": f"trace {trace.id} has no series {', '.join(unknown[:5])}", "field": "keys"}
        )
    extra = {k: from_analyses[k] for k in wanted if k in from_analyses}
    steps, series = series_values(rows, [k for k in wanted if k not in extra])
    if extra:
        all_steps = sorted(set(steps) | {s for v in extra.values() for s in v})
        index = {s: i for i, s in enumerate(steps)}
        series = {k: [v[index[s]] if s in index else None for s in all_steps] for k, v in series.items()}
        series.update({k: [v.get(s) for s in all_steps] for k, v in extra.items()})
        steps = all_steps
    series = {k: series[k] for k in wanted}
    return SeriesOut(trace_id=trace.id, live=trace.live, steps=steps, series=series, keys=available)


# {job id: its per-step series}: a finished job's result never changes, and results are
# big (a long-tail result of a 10 M-sample trace is ~11 MB of JSON), so each is read once
_SERIES_CACHE: OrderedDict[int, dict] = OrderedDict()
_SERIES_CACHE_SIZE = 64
_series_lock = threading.Lock()


def _analysis_series(session, trace: Trace) -> dict[str, dict[int, float]]:
    """The per-step series of the newest succeeded job of each per-step analysis run with
    default parameters (results made stale by an attach are not used)."""
    from backend.jobs.state import params_key
    from core.analysis.registry import ANALYSES, resolve_params

    out: dict[str, dict[int, float]] = {}
    for kind in [k for k, spec in ANALYSES.items() if spec.live_series]:
        job_id = job_queries.latest_succeeded_job_id(
            session,
            team_id=trace.team_id,
            trace_id=trace.id,
            kind=kind,
            params_key=params_key(kind, resolve_params(kind, {})),
        )
        if job_id is None:
            continue
        with _series_lock:
            cached = _SERIES_CACHE.get(job_id)
        if cached is None:
            result = job_queries.job_result(session, team_id=trace.team_id, job_id=job_id)
            cached = analysis_series({kind: result or {}})
            with _series_lock:
                _SERIES_CACHE[job_id] = cached
                while len(_SERIES_CACHE) > _SERIES_CACHE_SIZE:
                    _SERIES_CACHE.popitem(last=False)
        out.update(cached)
    return out


__all__ = ["router", "StoredUpload"]
