"""Trace formats: the registry (`registry`), detection (`detect`) and the upload-level
read loop here.

`read_sources` runs the readers over an upload's sources in natural name order
(``step_2`` before ``step_10``; the order also fixes PolyTrace group ordinals, so a
folder, its zip and its tar.gz give identical rows), after the files that prepare the
others' reading (`registry.READ_FIRST`: the run's tokenizer, DAPO marks), notes
undetected files in `ReadResult.skipped` and raises InputError when nothing was readable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.dapo import unmatched_note
from backend.formats.detect import base_name, detect_format, natural_key, skip_note
from backend.formats.kineto_ahead import kineto_read_ahead
from backend.formats.registry import FORMATS, READ_FIRST
from backend.formats.tokenizer import FILE_NAME as TOKENIZER_FILE

__all__ = ["FORMATS", "detect_format", "natural_key", "read_sources", "upload_format"]


def _upload_label(sources: list[Source]) -> str:
    if len(sources) == 1:
        return sources[0].name
    tops = {s.name.split("/", 1)[0] for s in sources}
    return tops.pop() if len(tops) == 1 else "upload"


def read_sources(
    sources: list[Source], forced_format: str | None, result: ReadResult, *, marks_alone: bool = False
) -> Generator[TableBatch, None, None]:
    """Batches of every readable source; `forced_format` skips detection for all of them.
    `marks_alone`: a DAPO filter file alone is readable (attaching marks to a trace)."""
    if forced_format is not None and forced_format not in FORMATS:
        raise InputError(
            _upload_label(sources) if sources else "upload",
            f"unknown format {forced_format!r}; known formats: {', '.join(FORMATS)}",
            field="format",
        )
    if not sources:
        raise InputError("upload", "no readable trace files: the upload holds no files")
    readable = 0
    detected = [detect_format(s) if forced_format is None or _is_tokenizer(s) else forced_format for s in sources]

    # files that prepare the others' reading first (READ_FIRST), then in natural name order
    def order(item: tuple[Source, str | None]) -> tuple:
        fmt = item[1]
        return (READ_FIRST.index(fmt) if fmt in READ_FIRST else len(READ_FIRST), natural_key(item[0].name))

    pairs = sorted(zip(sources, detected), key=order)
    ordered, formats = [s for s, _ in pairs], [f for _, f in pairs]
    ahead = kineto_read_ahead([s for s, f in zip(ordered, formats) if f == "kineto"], result)
    try:
        for source, fmt in zip(ordered, formats):
            if fmt is None:
                result.skipped.append(skip_note(source))
                continue
            readable += (marks_alone and fmt == "dapo-filter") or fmt not in READ_FIRST  # marks alone are no trace
            reader = ahead.reader if ahead is not None and fmt == "kineto" else FORMATS[fmt]
            yield from reader(source, result)
    finally:
        if ahead is not None:
            ahead.close()
    note = unmatched_note(result)
    if note:
        result.skipped.append(note)
    if readable == 0:
        raise InputError(
            _upload_label(sources),
            "no readable trace files (see docs/formats.md for accepted formats): " + "; ".join(result.skipped),
        )


def _is_tokenizer(source: Source) -> bool:
    """A forced format leaves the upload's tokenizer.json a tokenizer."""
    return base_name(source.name) == TOKENIZER_FILE


def upload_format(sources: list[Source], forced_format: str | None = None) -> str:
    """The dominant format of an upload (most files; ties go to the earlier entry of
    FORMATS), or "unknown"."""
    if forced_format is not None:
        return forced_format
    counts = Counter(f for f in (detect_format(s) for s in sources) if f is not None)
    if not counts:
        return "unknown"
    order = list(FORMATS)
    return max(counts, key=lambda f: (counts[f], -order.index(f)))
