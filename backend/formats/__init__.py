"""Trace formats: the registry (`registry`), detection (`detect`) and the upload-level
read loop here.

`read_sources` runs the readers over an upload's sources in natural name order
(``step_2`` before ``step_10``; the order also fixes PolyTrace group ordinals, so a
folder, its zip and its tar.gz give identical rows), after the files that prepare the
others' reading (`registry.read_first()`: the run's tokenizer, DAPO marks), notes
undetected files in `ReadResult.skipped` and raises InputError when nothing was readable.
A run folder holding several representations of its samples (`registry.representations()`)
is read in one, the others noted as skipped. A bad file does not stop the reading: the
upload's error lists every file's (up to MAX_ERRORS_LISTED).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator

from backend.formats.base import MAX_ERRORS_LISTED, InputError, ReadResult, Source, TableBatch, upload_errors
from backend.formats.dapo import unmatched_note
from backend.formats.detect import base_name, detect_format, natural_key, skip_note
from backend.formats.kineto_ahead import kineto_read_ahead
from backend.formats.registry import FORMATS, read_first, representations
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
    detected = [detect_format(s) if forced_format is None or _is_tokenizer(s) else forced_format for s in sources]

    first = read_first()

    # files that prepare the others' reading first (read_first), then in natural name order
    def order(item: tuple[Source, str | None]) -> tuple:
        fmt = item[1]
        return (first.index(fmt) if fmt in first else len(first), natural_key(item[0].name))

    pairs = list(zip(sources, detected))
    if forced_format is None:
        pairs = one_representation(pairs, result)
    pairs.sort(key=order)
    ahead = kineto_read_ahead([s for s, f in pairs if f == "kineto"], result)
    try:
        readable = yield from _read_each(pairs, ahead, result, marks_alone)
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


def _read_each(pairs, ahead, result: ReadResult, marks_alone: bool) -> Generator[TableBatch, None, int]:
    """Batches of each (source, format); returns how many trace files were read. Every
    file's error is reported (up to MAX_ERRORS_LISTED): after one, the others are still
    read (the upload fails whole)."""
    readable = 0
    errors: list[InputError] = []
    first = read_first()
    for source, fmt in pairs:
        if fmt is None:
            result.skipped.append(skip_note(source))
            continue
        readable += (marks_alone and fmt == "dapo-filter") or fmt not in first  # marks alone are no trace
        reader = ahead.reader if ahead is not None and fmt == "kineto" else FORMATS[fmt]
        try:
            yield from reader(source, result)
        except InputError as exc:
            errors.append(exc)
            if len(errors) > MAX_ERRORS_LISTED:
                break
    if errors:
        raise upload_errors(errors)
    return readable


def one_representation(pairs: list[tuple[Source, str | None]], result: ReadResult) -> list[tuple[Source, str | None]]:
    """The (source, format) pairs less the files of a second representation of their
    folder's run, each with a note in `result.skipped` saying which was read instead."""

    def folder(source: Source) -> str:
        return source.name.rsplit("/", 1)[0] if "/" in source.name else ""

    ranked = representations()
    present: dict[str, set[str]] = {}
    for source, fmt in pairs:
        if fmt in ranked:
            present.setdefault(folder(source), set()).add(fmt)
    kept = {d: next(f for f in ranked if f in fmts) for d, fmts in present.items() if len(fmts) > 1}
    out = []
    for source, fmt in pairs:
        d = folder(source)
        if d in kept and fmt in ranked and fmt != kept[d]:
            result.skipped.append(
                f"skipped {source.name}: {fmt}, another representation of the samples "
                f"the run's {kept[d]} files give (those were read)"
            )
            continue
        out.append((source, fmt))
    return out


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
