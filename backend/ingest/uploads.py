"""Uploaded files on disk: streamed in with a size limit and a content hash, expanded
into reader sources (archives and .gz included), removed once ingested."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from backend.formats.archive import Limits, declared_size, expand_upload, gzip_isize
from backend.formats.base import InputError, Source
from backend.settings import Settings

CHUNK = 1024 * 1024


class UploadTooLarge(ValueError):
    pass


class Room(Protocol):
    """What is left of a team's storage quota (backend.ingest.quota.Usage)."""

    @property
    def remaining(self) -> int | None: ...

    def refusal(self, incoming: int = 0) -> Exception: ...


@dataclass
class StoredUpload:
    folder: Path | None  # owned copy to remove after ingestion; None for files left in place
    files: list[Path]
    size_bytes: int
    content_hash: str
    # names shown in messages, by file, when not the file's own (a folder's files: with
    # their path in it, "run_a/packed_lengths_step_0.jsonl")
    shown: dict[Path, str] = field(default_factory=dict)


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


def store_upload(items: Iterable[tuple[str, BinaryIO]], settings: Settings, quota: Room | None = None) -> StoredUpload:
    """Copy uploaded streams into a fresh folder, hashing names and content in order;
    refused (nothing kept) past `max_upload_bytes` or what is left of the team's `quota`."""
    room = quota.remaining if quota is not None else None
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
                    if quota is not None and room is not None and total > room:
                        raise quota.refusal(total)
                    digest.update(chunk)
                    out.write(chunk)
            files.append(target)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return StoredUpload(folder, files, total, digest.hexdigest())


def upload_limits(settings: Settings) -> Limits:
    return Limits(
        max_total_uncompressed_bytes=settings.max_uncompressed_bytes,
        max_files=settings.max_archive_files,
        max_ratio=settings.max_compression_ratio,
    )


def upload_sources(files: list[Path], settings: Settings, shown: dict[Path, str] | None = None) -> list[Source]:
    """The reader sources of stored files, named as `shown` says (else by file name)."""
    limits = upload_limits(settings)
    sources: list[Source] = []
    for path in sorted(files):
        expanded = expand_upload(path, (shown or {}).get(path, path.name), limits)
        if len(expanded) == 1 and expanded[0].size is None and path.name.lower().endswith(".gz"):
            # a .gz file's size once decompressed, for the ingest's progress
            expanded[0].size = gzip_size(path)
        sources.extend(expanded)
    return sources


def gzip_size(path: Path) -> int | None:
    """The decompressed size a gzip file records in its trailer (modulo 2**32, so exact
    below 4 GiB; one member assumed, as a size estimate)."""
    try:
        return gzip_isize(path)
    except OSError:
        return None


def declared_upload_size(files: list[Path], settings: Settings, cap: int | None = None) -> int:
    """What the stored files say they expand to (archive directories, tar headers, gzip
    trailers), counted up to just past `cap`: the quota's pre-check."""
    limits = upload_limits(settings)
    total = 0
    for path in files:
        total += declared_size(path, path.name, limits, None if cap is None else cap - total)
        if cap is not None and total > cap:
            break
    return total


# An ingest job names its stored upload by folder name (its `upload` parameter), found
# under the data folder of whichever process runs it: no server path in the job.
def local_files(paths: list[Path]) -> StoredUpload:
    """Files already on this machine (the CLI): hashed like an upload, ingested in place."""
    # a folder's files by their path in it (in several folders: from the folders' parent)
    roots = {p: p if len(paths) == 1 else p.parent for p in paths if p.is_dir()}
    shown = {f: f.relative_to(root).as_posix() for p, root in roots.items() for f in p.rglob("*") if f.is_file()}
    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())
    digest = hashlib.sha256()
    total = 0
    for f in files:
        digest.update(_safe_name(f.name).encode() + b"\0")
        with f.open("rb") as stream:
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
                total += len(chunk)
    return StoredUpload(None, files, total, digest.hexdigest(), shown)


def discard(folder: Path | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
