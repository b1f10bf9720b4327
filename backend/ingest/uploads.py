"""Uploaded files on disk: streamed in with a size limit and a content hash, expanded
into reader sources (archives and .gz included), removed once ingested."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from backend.formats.archive import Limits, expand_upload
from backend.formats.base import InputError, Source
from backend.settings import Settings

CHUNK = 1024 * 1024


class UploadTooLarge(ValueError):
    pass


@dataclass
class StoredUpload:
    folder: Path | None  # owned copy to remove after ingestion; None for files left in place
    files: list[Path]
    size_bytes: int
    content_hash: str


# A file name is one path component on disk: at most 255 bytes (ext4, APFS, NTFS).
MAX_NAME_BYTES = 255


def _safe_name(name: str) -> str:
    base = Path(name.replace("\\", "/").replace("\0", "")).name.strip() or "upload"
    base = base.lstrip(".") or "upload"
    if len(base.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise InputError(
            base[:60] + "...", f"file name longer than {MAX_NAME_BYTES} bytes (UTF-8); rename the file", field="files"
        )
    return base


def store_upload(items: Iterable[tuple[str, BinaryIO]], settings: Settings) -> StoredUpload:
    """Copy uploaded streams into a fresh folder, hashing names and content in order."""
    folder = settings.upload_dir / uuid.uuid4().hex
    folder.mkdir(parents=True)
    digest = hashlib.sha256()
    total = 0
    files = []
    try:
        for name, stream in items:
            safe = _safe_name(name)
            target = folder / safe
            n = 1
            while target.exists():
                target = folder / f"{n}-{safe}"
                n += 1
            digest.update(safe.encode() + b"\0")
            with target.open("wb") as out:
                while chunk := stream.read(CHUNK):
                    total += len(chunk)
                    if total > settings.max_upload_bytes:
                        raise UploadTooLarge(f"{safe}: upload exceeds the limit of {settings.max_upload_bytes:,} bytes")
                    digest.update(chunk)
                    out.write(chunk)
            files.append(target)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return StoredUpload(folder, files, total, digest.hexdigest())


def upload_sources(files: list[Path], settings: Settings) -> list[Source]:
    limits = Limits(
        max_total_uncompressed_bytes=settings.max_uncompressed_bytes,
        max_files=settings.max_archive_files,
        max_ratio=settings.max_compression_ratio,
    )
    sources: list[Source] = []
    for path in sorted(files):
        sources.extend(expand_upload(path, path.name, limits))
    return sources


def local_files(paths: list[Path]) -> StoredUpload:
    """Files already on this machine (the CLI): hashed like an upload, ingested in place."""
    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())
    digest = hashlib.sha256()
    total = 0
    for f in files:
        digest.update(_safe_name(f.name).encode() + b"\0")
        with f.open("rb") as stream:
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
                total += len(chunk)
    return StoredUpload(None, files, total, digest.hexdigest())


def discard(folder: Path | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
