"""Error responses: bad input becomes a 4xx whose detail names file, line and field."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from backend.api.schemas import ErrorResponse
from backend.formats.base import InputError
from backend.ingest.uploads import UploadTooLarge
from backend.jobs.dispatch import QueueUnavailable

ERROR_RESPONSES: dict = {
    401: {"model": ErrorResponse, "description": "Missing or invalid API key."},
    404: {"model": ErrorResponse, "description": "No such resource for this team."},
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


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InputError)
    async def _input_error(_request: Request, exc: InputError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": exc.as_dict()})

    @app.exception_handler(QueueUnavailable)
    async def _queue_unavailable(_request: Request, exc: QueueUnavailable) -> JSONResponse:
        # Jobs committed before the broker failed are in the outbox: the workers send them
        # when it is back, and the same request then finds them (no duplicate is made).
        return _unavailable("the job queue is unavailable; the request is kept and will run when it is back")

    @app.exception_handler(OperationalError)
    async def _database_unavailable(_request: Request, _exc: OperationalError) -> JSONResponse:
        # A connection refused or dropped (a restart): nothing was committed half-way
        # (ingestion is one transaction on Postgres), so the request can simply be retried.
        return _unavailable("the database is unavailable")

    @app.exception_handler(UploadTooLarge)
    async def _too_large(_request: Request, exc: UploadTooLarge) -> JSONResponse:
        return JSONResponse(status_code=413, content={"detail": {"message": str(exc)}})
