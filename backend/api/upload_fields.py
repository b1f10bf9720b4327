"""Upload fields shared by the upload and attach endpoints."""

from __future__ import annotations

from typing import Annotated, BinaryIO

from fastapi import File, UploadFile

from backend.formats.tokenizer import FILE_NAME

TokenizerField = Annotated[
    UploadFile | None,
    File(
        description="The run's tokenizer.json (a Hugging Face fast tokenizer): rollout dumps' lengths are then "
        "token counts, else characters"
    ),
]


def upload_items(files: list[UploadFile], tokenizer: UploadFile | None) -> list[tuple[str, BinaryIO]]:
    """(name, stream) of the upload's files; the tokenizer travels as tokenizer.json, so
    the reader finds it and the content hash covers it."""
    items = [(f.filename or "upload", f.file) for f in files]
    if tokenizer is not None:
        items.append((FILE_NAME, tokenizer.file))
    return items
