"""Error responses: bad input becomes a 4xx whose detail names file, line and field."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from backend.api.schemas import ErrorResponse
from backend.formats.base import InputError
from backend.ingest.uploads import UploadTooLarge

ERROR_RESPONSES: dict = {
    401: {"model": ErrorResponse, "description": "Missing or invalid API key."},
    404: {"model": ErrorResponse, "description": "No such resource for this team."},
    413: {"model": ErrorResponse, "description": "Upload larger than the configured limit."},
    422: {"model": ErrorResponse, "description": "Bad input: the message names file, line and field."},
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InputError)
    async def _input_error(_request: Request, exc: InputError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": exc.as_dict()})

    @app.exception_handler(UploadTooLarge)
    async def _too_large(_request: Request, exc: UploadTooLarge) -> JSONResponse:
        return JSONResponse(status_code=413, content={"detail": {"message": str(exc)}})
