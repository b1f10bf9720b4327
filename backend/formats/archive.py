"""Uploads -> reader sources: archives, gzip and plain files, with bomb protection.

`expand_upload(path, name, limits)` returns one `Source` per file in the upload:

- ``.zip``: one source per file entry, opened lazily from the archive;
- ``.tar``, ``.tar.gz``/``.tgz`` (also ``.tar.bz2``, ``.tar.xz``): the members are
  streamed once into a private temporary folder next to the upload (a tar.gz has no
  random access); the folder is removed when the last of its sources is
  garbage-collected (or with the upload folder);
- ``.gz`` (a single file): a decompressing source;
- a directory (CLI use): one source per file below it;
- anything else: the file itself.

Entries that are ``.gz`` inside an archive decompress too. Kinds are recognised by
name and, failing that, by magic bytes.

Names inside archives are shown as ``archive.zip/inner/path``. Directory entries and
hidden OS junk (``__MACOSX/``, ``.DS_Store``, ``Thumbs.db``, any path component that
starts with a dot) are ignored.

Rejected with `InputError`: entries escaping their folder (``../x``, absolute paths,
drive letters), links and device entries in tars, symlinks and encrypted entries in
zips, more than `Limits.max_files` files, more than `Limits.max_total_uncompressed_bytes`
in total (declared sizes checked up front, streamed bytes counted while reading), and
a compression ratio above `Limits.max_ratio` once an entry passes `RATIO_FLOOR` bytes
(small files may compress well without being bombs). Truncated or corrupt compressed
data raises InputError naming the file when it is read.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, cast

from backend.formats.base import InputError, Source

# Below this many uncompressed bytes the ratio limit does not apply.
RATIO_FLOOR = 1 << 20
_READ_BUFFER = 1 << 20
_JUNK_NAMES = {"__MACOSX", "Thumbs.db", "desktop.ini"}
_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass(frozen=True)
class Limits:
    max_total_uncompressed_bytes: int = 32 * 1024**3
    max_files: int = 100_000
    max_ratio: float = 200.0


# --------------------------------------------------------------------------- guarded streams


class _GuardedReader(io.RawIOBase):
    """Counts decompressed bytes against a limit and turns decompression failures
    (truncated gzip, bad CRC, corrupt deflate data) into an InputError naming the file."""

    def __init__(self, inner: io.BufferedIOBase, name: str, limit: int, why: str):
        self._inner, self._name, self._limit, self._why = inner, name, limit, why
        self._count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            n = self._inner.readinto(buffer)
        except (EOFError, zlib.error, zipfile.BadZipFile, OSError) as exc:
            raise InputError(self._name, f"truncated or corrupt compressed data ({exc})") from None
        self._count += n
        if self._count > self._limit:
            raise InputError(
                self._name,
                f"decompresses to more than {self._limit:,} bytes ({self._why}); "
                "refusing a possible decompression bomb",
            )
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def _guarded(inner: io.BufferedIOBase, name: str, limit: int, why: str) -> IO[bytes]:
    return io.BufferedReader(_GuardedReader(inner, name, limit, why), _READ_BUFFER)


def _stream_limit(limits: Limits, compressed_size: int) -> tuple[int, str]:
    by_ratio = max(int(limits.max_ratio * compressed_size), RATIO_FLOOR)
    if by_ratio < limits.max_total_uncompressed_bytes:
        return by_ratio, f"compression ratio limit {limits.max_ratio:g}"
    return limits.max_total_uncompressed_bytes, "upload size limit"


def _is_gz(name: str) -> bool:
    return name.lower().endswith(".gz")


class _ClosingGzip(gzip.GzipFile):
    """A GzipFile that also closes the file object it was given."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _file_opener(path: Path) -> Callable[[], IO[bytes]]:
    return lambda: path.open("rb")


def _open_maybe_gz(open_raw: Callable[[], IO[bytes]], name: str, size: int, limits: Limits) -> Callable[[], IO[bytes]]:
    return _gunzip(open_raw, name, size, limits) if _is_gz(name) else open_raw


def _gunzip(open_raw: Callable[[], IO[bytes]], name: str, size: int, limits: Limits) -> Callable[[], IO[bytes]]:
    """An opener of the decompressed stream, limited by ratio and total size."""
    limit, why = _stream_limit(limits, size)

    def opener() -> IO[bytes]:
        return _guarded(_ClosingGzip(open_raw()), name, limit, why)

    return opener


# --------------------------------------------------------------------------- names


def _is_junk(parts: tuple[str, ...]) -> bool:
    return any(p in _JUNK_NAMES or p.startswith(".") for p in parts)


def _checked_parts(archive: str, entry: str) -> tuple[str, ...]:
    """Path components of an archive entry; escaping entries are an InputError."""
    norm = entry.replace("\\", "/")
    shown = f"{archive}/{entry}"
    if norm.startswith("/") or _DRIVE.match(norm):
        raise InputError(shown, "archive entry has an absolute path")
    parts = tuple(p for p in PurePosixPath(norm).parts if p not in ("", "."))
    if ".." in parts:
        raise InputError(shown, "archive entry escapes its folder ('..')")
    return parts


def _kind(path: Path, name: str) -> str:
    lower = name.lower()
    if path.is_dir():
        return "dir"
    if lower.endswith(".zip"):
        return "zip"
    if lower.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")):
        return "tar"
    if lower.endswith(".gz"):
        return "gz"
    with path.open("rb") as f:
        head = f.read(512)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "gz"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    return "plain"


# --------------------------------------------------------------------------- expand


def expand_upload(path: Path, name: str, limits: Limits | None = None) -> list[Source]:
    """The reader sources of one uploaded file (see the module docstring)."""
    limits = limits or Limits()
    path = Path(path)
    kind = _kind(path, name)
    if kind == "zip":
        return _zip_sources(path, name, limits)
    if kind == "tar":
        return _tar_sources(path, name, limits)
    if kind == "dir":
        return _dir_sources(path, name, limits)
    size = path.stat().st_size
    if kind == "gz":
        return [Source(name, _gunzip(lambda: path.open("rb"), name, size, limits), None)]
    return [Source(name, lambda: path.open("rb"), size)]


def _zip_sources(path: Path, name: str, limits: Limits) -> list[Source]:
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise InputError(name, f"not a readable zip archive ({exc})") from None
    sources: list[Source] = []
    total = 0
    for info in infos:
        parts = _checked_parts(name, info.filename)
        shown = "/".join((name, *parts))
        if info.is_dir() or not parts or _is_junk(parts):
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            raise InputError(shown, "symbolic links are not allowed in archives")
        if info.flag_bits & 0x1:
            raise InputError(shown, "encrypted archive entries are not supported")
        total += info.file_size
        _check_counts(name, len(sources) + 1, total, limits)
        if info.file_size > RATIO_FLOOR and info.file_size > limits.max_ratio * max(info.compress_size, 1):
            raise InputError(
                shown,
                f"compression ratio {info.file_size / max(info.compress_size, 1):.0f} exceeds "
                f"{limits.max_ratio:g}; refusing a possible decompression bomb",
            )
        opener = _open_maybe_gz(_zip_entry_opener(path, info, shown), shown, info.file_size, limits)
        sources.append(Source(shown, opener, None if _is_gz(shown) else info.file_size))
    return sources


def _zip_entry_opener(path: Path, info: zipfile.ZipInfo, shown: str) -> Callable[[], IO[bytes]]:
    def opener() -> IO[bytes]:
        try:
            zf = zipfile.ZipFile(path)
            entry = zf.open(info)
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise InputError(shown, f"cannot open archive entry ({exc})") from None
        # The entry keeps the archive file open until it is closed itself.
        zf.close()
        # zipfile stops at the declared size and checks the CRC, so only errors need guarding.
        # ZipFile.open returns a ZipExtFile, a BufferedIOBase (typeshed says IO[bytes])
        return _guarded(cast(io.BufferedIOBase, entry), shown, info.file_size, "declared size")

    return opener


def _check_counts(name: str, files: int, total: int, limits: Limits) -> None:
    if files > limits.max_files:
        raise InputError(name, f"archive holds more than {limits.max_files:,} files")
    if total > limits.max_total_uncompressed_bytes:
        raise InputError(
            name,
            f"archive expands to more than {limits.max_total_uncompressed_bytes:,} bytes; "
            "refusing a possible decompression bomb",
        )


def _tar_sources(path: Path, name: str, limits: Limits) -> list[Source]:
    compressed = path.stat().st_size
    try:
        workdir = tempfile.TemporaryDirectory(prefix=".expand-", dir=path.parent, ignore_cleanup_errors=True)
    except OSError:
        workdir = tempfile.TemporaryDirectory(prefix="rlvr-expand-", ignore_cleanup_errors=True)
    sources: list[Source] = []
    total = 0
    try:
        with tarfile.open(path, mode="r|*") as tf:
            for member in tf:
                parts = _checked_parts(name, member.name)
                shown = "/".join((name, *parts))
                if member.isdir() or not parts:
                    continue
                if member.issym() or member.islnk():
                    raise InputError(shown, "links are not allowed in archives")
                if not member.isfile():
                    raise InputError(shown, "special files (devices, FIFOs) are not allowed in archives")
                if _is_junk(parts):
                    continue
                total += member.size
                _check_counts(name, len(sources) + 1, total, limits)
                if total > RATIO_FLOOR and total > limits.max_ratio * max(compressed, 1):
                    raise InputError(
                        name,
                        f"compression ratio exceeds {limits.max_ratio:g}; refusing a possible decompression bomb",
                    )
                target = Path(workdir.name) / f"{len(sources):06d}"
                src = tf.extractfile(member)
                assert src is not None  # a regular file (checked above) always has a stream
                with src, target.open("wb") as out:
                    shutil.copyfileobj(src, out, _READ_BUFFER)
                if target.stat().st_size != member.size:
                    raise InputError(shown, "truncated archive entry")
                sources.append(_tar_member_source(target, shown, member.size, limits, workdir))
    except InputError:
        workdir.cleanup()
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        workdir.cleanup()
        raise InputError(name, f"truncated or corrupt archive ({exc})") from None
    if not sources:
        workdir.cleanup()
    return sources


def _tar_member_source(target: Path, shown: str, size: int, limits: Limits, workdir) -> Source:
    def open_raw() -> IO[bytes]:
        _ = workdir  # keeps the extraction folder alive while this source exists
        return target.open("rb")

    return Source(shown, _open_maybe_gz(open_raw, shown, size, limits), None if _is_gz(shown) else size)


def _dir_sources(path: Path, name: str, limits: Limits) -> list[Source]:
    sources: list[Source] = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not _is_junk((d,)))
        for file in sorted(files):
            if _is_junk((file,)):
                continue
            full = Path(root) / file
            rel = full.relative_to(path).as_posix()
            shown = f"{name}/{rel}"
            size = full.stat().st_size
            opener = _open_maybe_gz(_file_opener(full), shown, size, limits)
            sources.append(Source(shown, opener, None if _is_gz(shown) else size))
            if len(sources) > limits.max_files:
                raise InputError(name, f"folder holds more than {limits.max_files:,} files")
    return sources


# --------------------------------------------------------------------------- declared sizes


def declared_size(path: Path, name: str, limits: Limits | None = None, cap: int | None = None) -> int:
    """What one uploaded file says it expands to, read without expanding it: a zip's
    central directory, a tar's member headers, a gzip's trailer (ISIZE), a folder's files;
    at least its own size. Counting stops once past `cap` (any larger answer is as good).
    A declaration can lie: the bytes read are counted again while the upload is ingested
    (backend/ingest/bounds.py)."""
    limits = limits or Limits()
    path = Path(path)
    kind = _kind(path, name)
    if kind == "dir":
        total = 0
        for f in sorted(path.rglob("*")):
            if f.is_file() and not _is_junk(f.relative_to(path).parts):
                total += declared_size(f, f.name, limits, None if cap is None else cap - total)
                if cap is not None and total > cap:
                    break
        return total
    own = path.stat().st_size
    if kind == "zip":
        return max(own, _zip_declared(path, name))
    if kind == "tar":
        return max(own, _tar_declared(path, name, limits, cap))
    if kind == "gz":
        return max(own, gzip_isize(path))
    return own


def _zip_declared(path: Path, name: str) -> int:
    try:
        with zipfile.ZipFile(path) as zf:
            return sum(i.file_size for i in zf.infolist() if not i.is_dir())
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise InputError(name, f"not a readable zip archive ({exc})") from None


def gzip_isize(path: Path) -> int:
    """The decompressed size a gzip file records in its last 4 bytes (modulo 2**32)."""
    with path.open("rb") as f:
        if f.seek(0, os.SEEK_END) < 18:  # shorter than a gzip header and trailer
            return 0
        f.seek(-4, os.SEEK_END)
        return int.from_bytes(f.read(4), "little")


def _tar_declared(path: Path, name: str, limits: Limits, cap: int | None) -> int:
    """A tar's member sizes (an uncompressed tar seeks from header to header); a .tar.gz
    by its gzip trailer; other compressed tars by their headers, read in one pass."""
    lower = name.lower()
    if lower.endswith((".tar.gz", ".tgz")) or (not lower.endswith(".tar") and _gzip_magic(path)):
        return gzip_isize(path)
    total, files = 0, 0
    try:
        with tarfile.open(path, mode="r:" if lower.endswith(".tar") else "r|*") as tf:
            for member in tf:
                total += member.size
                files += 1
                if files > limits.max_files or (cap is not None and total > cap):
                    break
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise InputError(name, f"truncated or corrupt archive ({exc})") from None
    return total


def _gzip_magic(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"
