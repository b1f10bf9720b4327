"""Error responses: bad input becomes a 4xx whose detail names file, line and field."""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from backend.api.schemas import ErrorResponse
from backend.formats.base import InputError
from backend.ingest.service import IngestionInProgress
from backend.ingest.uploads import UploadTooLarge
from backend.jobs.dispatch import QueueUnavailable

ERROR_RESPONSES: dict = {
    400: {"model": ErrorResponse, "description": "Malformed request (e.g. an unreadable multipart body)."},
    401: {"model": ErrorResponse, "description": "Missing or invalid API key."},
    404: {"model": ErrorResponse, "description": "No such resource for this team."},
    409: {
        "model": ErrorResponse,
        "description": "Not in a state for this request (a trace not ready, a job not finished, no kept events).",
    },
    413: {"model": ErrorResponse, "description": "Upload larger than the configured limit."},
    422: {"model": ErrorResponse, "description": "Bad input: the message names file, line and field."},
    503: {
        "model": ErrorResponse,
        "description": "The database or the job queue is unavailable; retry after Retry-After.",
    },
}

# Seconds a client is asked to wait when the database or the job queue is unavailable.
RETRY_AFTER_S = 5


def _unavailable(message: str) -> JSONResponse:
    return JSONResponse(
        status_code=503,
        content={"detail": {"message": f"{message}; retry in {RETRY_AFTER_S} s"}},
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


_LOCATIONS = ("body", "query", "path", "header", "cookie", "form")
# a message that starts by naming a field: "rollout_tp: must be ...", "gpu.peak_flops: ..."
_NAMED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\])*): ")
# Pydantic's own wording for what the project's checks say otherwise
_PLAIN = {"missing": "required", "extra_forbidden": "unknown field"}


def _loc_field(parts) -> str | None:
    """Location parts as a field name: ("cluster", "n_gpus") -> "cluster.n_gpus", list
    indices as [i]."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or None


def _path_parts(path: str) -> list:
    return [int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\[\d+\]|[^.\[\]]+", path)]


def locate(loc, msg: str) -> tuple[str | None, str]:
    """(field, message naming it) of a validation error at `loc` (its leading location
    kind, "body" or "query", left out). A check names what it checks relative to the
    field it validates ("rollout_tp: must be >= 1", "gpu.peak_flops: required"): that
    name is joined to the location, the parts both have counted once."""
    parts = list(loc)
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    named = _NAMED.match(msg)
    if named:
        head = _path_parts(named.group(1))
        shared = next((k for k in range(min(len(parts), len(head)), 0, -1) if parts[-k:] == head[:k]), 0)
        parts, msg = parts + head[shared:], msg[named.end() :]
    field = _loc_field(parts)
    return field, (f"{field}: {msg}" if field else msg)


def error_message(error: dict) -> tuple[str | None, str]:
    """(field, message naming it) of one pydantic error (its "loc", "type", "msg")."""
    msg = str(error.get("msg", "invalid request")).removeprefix("Value error, ")
    if error.get("type") == "string_pattern_mismatch" and "\\x00" in str(error.get("ctx", {}).get("pattern", "")):
        msg = "must not contain NUL characters"
    msg = _PLAIN.get(str(error.get("type")), msg)
    return locate(error.get("loc", ()), msg)


def validation_detail(exc: RequestValidationError) -> dict:
    """FastAPI's own validation errors in the declared ErrorResponse shape: the first
    error's field and a message naming it (the values are not echoed in full)."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        error = first.get("ctx", {}).get("error", first.get("msg"))
        return {"message": f"body: invalid JSON ({error})", "field": "body"}
    field, message = error_message(first)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return {"message": message, "field": field}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # every error in the ErrorResponse shape: framework errors ("Invalid multipart
        # data.", "Method Not Allowed") carry a plain string detail
        detail = exc.detail if isinstance(exc.detail, dict) else {"message": str(exc.detail)}
        return JSONResponse(status_code=exc.status_code, content={"detail": detail}, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": validation_detail(exc)})

    @app.exception_handler(InputError)
    async def _input_error(_request: Request, exc: InputError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": exc.as_dict()})

    @app.exception_handler(QueueUnavailable)
    async def _queue_unavailable(_request: Request, exc: QueueUnavailable) -> JSONResponse:
        # Jobs committed before the broker failed are in the outbox: the workers send them
        # when it is back, and the same request then finds them (no duplicate is made).
        return _unavailable("the job queue is unavailable; the request is kept and will run when it is back")

    @app.exception_handler(IngestionInProgress)
    async def _in_progress(_request: Request, _exc: IngestionInProgress) -> JSONResponse:
        # Not acknowledged while another request ingests it (that one may yet fail):
        # the retry gets the trace once it is ready, or starts the upload again.
        return _unavailable("the same upload is being ingested by another request")

    @app.exception_handler(OperationalError)
    async def _database_unavailable(_request: Request, _exc: OperationalError) -> JSONResponse:
        # A connection refused or dropped (a restart): nothing was committed half-way
        # (ingestion is one transaction on Postgres), so the request can simply be retried.
        return _unavailable("the database is unavailable")

    @app.exception_handler(UploadTooLarge)
    async def _too_large(_request: Request, exc: UploadTooLarge) -> JSONResponse:
        return JSONResponse(status_code=413, content={"detail": {"message": str(exc)}})
