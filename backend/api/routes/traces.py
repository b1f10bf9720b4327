"""Traces: upload, list, get, rename, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, HTTPException, Query, Response, UploadFile, status
from fastapi.concurrency import run_in_threadpool
from pydantic import AfterValidator, BaseModel, Field

from backend.api.deps import CurrentTeam, SessionDep, SettingsDep, TraceDep
from backend.api.errors import ERROR_RESPONSES
from backend.api.schemas import NO_NUL, ErrorResponse, JobOut, TraceOut, TracePage, UploadAccepted
from backend.api.upload_fields import TokenizerField, upload_items
from backend.api.views import trace_out, traces_out
from backend.formats import FORMATS
from backend.formats.kineto_events import remove_events
from backend.ingest.naming import MAX_NAME, clean_trace_name
from backend.ingest.quota import team_usage
from backend.ingest.service import accept_upload, changed_options
from backend.ingest.uploads import discard, store_upload
from backend.jobs.contracts import INGEST_KIND, remove_artefacts
from backend.store.deletion import delete_traces
from backend.store.ids import ID_MAX, INT4_MAX
from backend.store.models import Trace
from backend.store.queries import jobs as job_queries
from backend.store.queries import traces as trace_queries
from backend.store.trace_tables import trace_events_dir

router = APIRouter(prefix="/traces", tags=["traces"])


def _queued_ingest_of(session, team_id: int, folder) -> bool:
    """An ingest job was committed for this upload folder (the worker will read it)."""
    if folder is None:
        return True
    try:
        params = job_queries.recent_job_params(session, team_id=team_id, kind=INGEST_KIND, limit=20)
        return any((p or {}).get("upload") == folder.name for p in params)
    except Exception:
        return True  # the database is unreachable: keep the files rather than lose a queued upload


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TraceOut | UploadAccepted,
    responses={
        200: {"model": TraceOut, "description": "The team uploaded the same content before: that trace."},
        202: {"model": UploadAccepted, "description": "Large upload: a worker job ingests it."},
        **ERROR_RESPONSES,
        409: {
            "model": ErrorResponse,
            "description": "The team uploaded the same content before and `name`, `format` or `max_response_len` "
            "differ from that trace's: `detail.changed` says what each would change (nothing was applied), "
            "`detail.trace_id` is that trace.",
        },
    },
)
async def upload_trace(
    session: SessionDep,
    settings: SettingsDep,
    team: CurrentTeam,
    response: Response,
    files: Annotated[list[UploadFile], File(description="Trace files, or one .zip / .tar.gz of a run folder")],
    name: Annotated[str | None, Form(max_length=300, pattern=NO_NUL)] = None,
    tokenizer: TokenizerField = None,
    format: Annotated[
        str | None, Form(max_length=50, pattern=NO_NUL, description="Force a format instead of detecting it")
    ] = None,
    max_response_len: Annotated[int | None, Form(gt=0, le=INT4_MAX)] = None,
):
    """Upload trace files. Small uploads are ingested during the request (201, or a 4xx
    naming file, line and field); large ones return 202 with the ingest job."""
    if format is not None and format not in FORMATS:
        raise HTTPException(
            422,
            detail={"message": f"unknown format '{format}'; known: {', '.join(sorted(FORMATS))}", "field": "format"},
        )
    # The team's quota is checked before anything is kept (full: 413 now), and while the
    # upload streams in. The key's lookup and this end their transaction here: no
    # connection is held while the upload is copied and hashed (seconds for a large one).
    usage = await run_in_threadpool(team_usage, session, team.id, settings)
    usage.check()
    await run_in_threadpool(session.commit)
    stored = await run_in_threadpool(store_upload, upload_items(files, tokenizer), settings, usage)
    try:
        outcome = await run_in_threadpool(
            accept_upload,
            session,
            settings,
            team_id=team.id,
            stored=stored,
            name=name,
            forced_format=format,
            max_response_len=max_response_len,
        )
    except Exception:  # (not a cancellation: the ingest thread may still be reading the folder)
        # a failed creation leaves no upload folder behind (a queued ingest keeps its own)
        session.rollback()
        if not _queued_ingest_of(session, team.id, stored.folder):
            discard(stored.folder)
        raise
    if not outcome.created:
        _refuse_changed_options(outcome.trace, name=name, forced_format=format, max_response_len=max_response_len)
    trace = trace_out(session, outcome.trace)
    if outcome.job is not None:
        response.status_code = status.HTTP_202_ACCEPTED
        return UploadAccepted(trace=trace, job=JobOut.model_validate(outcome.job))
    if not outcome.created:
        response.status_code = status.HTTP_200_OK
    return trace


def _refuse_changed_options(trace: Trace, **options) -> None:
    """Content the team uploaded before, with options that would make another trace of
    it: 409 naming them. Dedupe is by content (one trace per content and team), so the
    options cannot be applied silently, and answering with the old trace would look like
    they were."""
    changed = changed_options(trace, **options)
    if changed:
        said = "; ".join(f"{k}: {v}" for k, v in changed.items())
        raise HTTPException(
            409,
            detail={
                "message": f"trace {trace.id} holds this content already; these options would change it: {said}. "
                f"Not applied: delete trace {trace.id} first to ingest the content with them",
                "field": next(iter(changed)),
                "changed": changed,
                "trace_id": trace.id,
            },
        )


@router.get("", response_model=TracePage)
def list_traces(
    session: SessionDep,
    team: CurrentTeam,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=ID_MAX)] = 0,
    status_: Annotated[str | None, Query(alias="status", max_length=20, pattern=NO_NUL)] = None,
    q: Annotated[str | None, Query(max_length=300, pattern=NO_NUL, description="Substring of the name")] = None,
):
    # q: a literal substring (% and _ match themselves)
    total, page = trace_queries.list_traces(
        session, team_id=team.id, status=status_, name_contains=q, limit=limit, offset=offset
    )
    return TracePage(items=traces_out(session, page), total=total)


@router.get("/{trace_id}", response_model=TraceOut, responses=ERROR_RESPONSES)
def get_trace(session: SessionDep, trace: TraceDep):
    return trace_out(session, trace)


class TraceRename(BaseModel):
    name: Annotated[
        str, AfterValidator(clean_trace_name), Field(min_length=1, max_length=MAX_NAME, description="The new name")
    ]


@router.patch("/{trace_id}", response_model=TraceOut, responses=ERROR_RESPONSES)
def rename_trace(session: SessionDep, trace: TraceDep, body: TraceRename):
    """Rename a trace (the name legends and lists show; its content is unchanged)."""
    trace.name = body.name
    session.commit()
    return trace_out(session, trace)


@router.delete("/{trace_id}", status_code=status.HTTP_204_NO_CONTENT, responses=ERROR_RESPONSES)
def delete_trace(session: SessionDep, trace: TraceDep) -> Response:
    # Rows of every table and the trace's jobs go with it (backend/store/deletion.py);
    # the files its jobs wrote under the data folder (replays, workloads) are removed after.
    jobs = job_queries.trace_job_refs(session, team_id=trace.team_id, trace_id=trace.id)
    delete_traces(session, Trace.id == trace.id)
    session.commit()
    remove_events(trace_events_dir(trace.id))  # the Kineto events kept beside the database
    remove_artefacts(jobs)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
