"""An ingest's refusal in the user's words: every error of the upload, one line each,
and where `--format` forced a reader onto a file that is something else, that the file
is not of that format and what it looks like (instead of the reader's complaint about
bytes it was never meant to read)."""

from __future__ import annotations

import orjson

from rlvr_explorer.errors import error_items, error_lines

# What a forced format expects, where its name alone does not say it.
EXPECTED = {"kineto": "a Kineto trace (one Chrome-trace JSON object with traceEvents, from the PyTorch profiler)"}
HEAD_BYTES = 64 << 10


def ingest_error_lines(exc: Exception, stored_files: list, forced_format: str | None, settings) -> list[str]:
    """The lines to print for an ingest's InputError (or several)."""
    if forced_format is None:
        return error_lines(exc)
    sources = None
    lines = []
    for item in error_items(exc):
        name = getattr(item, "file", None)
        if name is not None:
            if sources is None:
                sources = _sources(stored_files, settings)
            source = sources.get(name)
            hint = forced_format_mismatch(source, forced_format) if source is not None else None
            if hint is not None:
                lines.append(hint)
                continue
        lines += error_lines(item)
    return lines


def _sources(stored_files: list, settings) -> dict:
    from backend.ingest.uploads import upload_sources

    try:
        return {s.name: s for s in upload_sources(stored_files, settings)}
    except ValueError:  # an archive past its limits: the error already says so
        return {}


def forced_format_mismatch(source, forced: str) -> str | None:
    """'F: not a <forced> file: it looks like JSON lines, detected format X (...)', or
    None when the file is of the forced format as far as detection can tell."""
    from backend.formats import detect_format

    detected = detect_format(source)
    if detected == forced:
        return None
    with source.open() as stream:
        head = stream.read(HEAD_BYTES)
    looks = shape_of(head) + (f", detected format {detected}" if detected else ", in no format this reads")
    instead = f", or give --format {detected}" if detected else ""
    expected = EXPECTED.get(forced, f"a {forced} file")
    return (
        f"{source.name}: not {expected}: it looks like {looks} "
        f"(drop --format to detect each file's format{instead}; docs/formats.md)"
    )


def shape_of(head: bytes) -> str:
    """What a file's first bytes look like, in words."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        return "an empty file"
    if text.startswith(b"SQLite format 3\0"):
        return "an SQLite database"
    if text.startswith(b"PAR1"):
        return "a Parquet file"
    if b"\0" in text[:4096]:
        return "binary data"
    if text[:1] in (b"{", b"["):
        lines = [line for line in text.splitlines()[:3] if line.strip()]
        if len(lines) > 1 and all(_json_value(line) for line in lines[:-1]):
            return "JSON lines (one JSON value per line)"
        return "one JSON object" if text[:1] == b"{" else "a JSON array"
    return "text"


def _json_value(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True
