"""Format registry, detection and the upload-level read loop.

`FORMATS` maps a format name to its reader (see `backend.formats.base` for the reader
contract and docs/formats.md for every format). `detect_format` decides by the file's
base name first (``.gz`` stripped), then by its first bytes:

==========================  ==================================================================
format                      detected by
==========================  ==================================================================
polytrace-packed            ``packed_lengths_step_N*.jsonl``; or a first line with input, output
polytrace-reward            ``reward_timings_step_N*.jsonl``; or a first line with reward_time_s
polytrace-multiturn         ``multiturn_workload_step_N*.jsonl``; or a first line with turns and
                            prompt_group_id
polytrace-compact           a JSON object whose first key is a step number (``{"0": ...``)
verl-jsonl                  a first line ``{"step": N, "data": {...}}``
verl-console                a line ``step:N - key:value - ...`` (in the first 64 KiB, or
                            anywhere in the first 64 MiB of ``.log``/``.txt``/``.out``/``.err``)
native-csv                  ``.csv`` (``.tsv`` is not supported)
native-jsonl                a first line with step, group_idx, sample_idx, prompt_len,
                            response_len
native-parquet              ``.parquet`` / ``.pq``
dapo-filter                 ``dapo_filter_indices*.jsonl`` (marks for the packed-length samples;
                            read before the other files of the upload)
kineto                      ``backend.formats.kineto.looks_like_kineto`` (``.json`` object with
                            traceEvents / schemaVersion / deviceProperties / distributedInfo)
==========================  ==================================================================

`read_sources` runs the readers over an upload's sources in natural name order
(``step_2`` before ``step_10``; the order also fixes PolyTrace group ordinals, so a
folder, its zip and its tar.gz give identical rows), notes undetected files in
`ReadResult.skipped` and raises InputError when nothing was readable.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

import orjson

from backend.formats.base import InputError, Reader, ReadResult, Source, TableBatch
from backend.formats.dapo import read_dapo_filter, unmatched_note
from backend.formats.kineto import looks_like_kineto, read_kineto
from backend.formats.native import (
    REQUIRED_SAMPLE_COLUMNS,
    read_native_csv,
    read_native_jsonl,
    read_native_parquet,
    stdlib_json,
)
from backend.formats.polytrace import (
    read_compact,
    read_multiturn_workload,
    read_packed_lengths,
    read_reward_timings,
)
from backend.formats.verl_logs import CONSOLE_STEP, read_verl_console, read_verl_jsonl

FORMATS: dict[str, Reader] = {
    "polytrace-packed": read_packed_lengths,
    "polytrace-reward": read_reward_timings,
    "polytrace-multiturn": read_multiturn_workload,
    "polytrace-compact": read_compact,
    "verl-jsonl": read_verl_jsonl,
    "verl-console": read_verl_console,
    "native-csv": read_native_csv,
    "native-jsonl": read_native_jsonl,
    "native-parquet": read_native_parquet,
    "kineto": read_kineto,
    "dapo-filter": read_dapo_filter,
}

_NAME_PATTERNS = (
    (re.compile(r"^packed_lengths_step_?\d+.*\.jsonl?$"), "polytrace-packed"),
    (re.compile(r"^reward_timings_step_?\d+.*\.jsonl?$"), "polytrace-reward"),
    (re.compile(r"^multiturn_workload_step_?\d+.*\.jsonl?$"), "polytrace-multiturn"),
    (re.compile(r".*\.(parquet|pq)$"), "native-parquet"),
    (re.compile(r".*\.csv$"), "native-csv"),
    (re.compile(r"^dapo_filter_indices.*\.jsonl?$"), "dapo-filter"),
)
# Files known to sit in run folders that no reader uses (yet): a friendlier note.
_KNOWN_UNUSED = (
    (re.compile(r"^enhanced_task_distribution_parameters.*\.json$"), "fitted distribution parameters, not a trace"),
    (re.compile(r"^readme(\.\w+)?$"), "documentation"),
)
_COMPACT_HEAD = re.compile(rb'^\s*(?:\xef\xbb\xbf)?\s*\{\s*"\d+"\s*:')
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
HEAD_BYTES = 64 << 10
FIRST_LINE_MAX = 16 << 20
LOG_SCAN_BYTES = 64 << 20


def _base_name(name: str) -> str:
    base = name.rsplit("/", 1)[-1].lower()
    return base[:-3] if base.endswith(".gz") else base


def _first_object(head: bytes, stream) -> dict | None:
    """The first line parsed as a JSON object, if it is one (reading on past `head`
    when the line is longer, up to FIRST_LINE_MAX)."""
    first = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not first.startswith(b"{"):
        return None
    line = first.split(b"\n", 1)[0]
    if b"\n" not in first:
        line += stream.readline(FIRST_LINE_MAX)
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            obj = stdlib_json(line)  # NaN / Infinity, as Python's json writes them
        except ValueError:
            return None
    return obj if type(obj) is dict else None


def _jsonl_kind(obj: dict) -> str | None:
    keys = obj.keys()
    if "step" in keys and type(obj.get("data")) is dict:
        return "verl-jsonl"
    if "input" in keys and type(obj.get("output")) is list:
        return "polytrace-packed"
    if "reward_time_s" in keys:
        return "polytrace-reward"
    if "turns" in keys and "prompt_group_id" in keys:
        return "polytrace-multiturn"
    if all(k in keys for k in REQUIRED_SAMPLE_COLUMNS):
        return "native-jsonl"
    return None


def _has_console_lines(source: Source, head: bytes, name: str) -> bool:
    if any(CONSOLE_STEP.search(line) for line in head.decode("utf-8", "replace").splitlines()):
        return True
    if not name.endswith(_LOG_SUFFIXES):
        return False
    with source.open() as stream:
        read = 0
        for raw in stream:
            read += len(raw)
            if b"step:" in raw and CONSOLE_STEP.search(raw.decode("utf-8", "replace")):
                return True
            if read > LOG_SCAN_BYTES:
                break
    return False


def detect_format(source: Source) -> str | None:
    """The format name of `source`, or None when no reader recognises it."""
    base = _base_name(source.name)
    for pattern, fmt in _NAME_PATTERNS:
        if pattern.match(base):
            return fmt
    if any(pattern.match(base) for pattern, _ in _KNOWN_UNUSED):
        return None
    with source.open() as stream:
        head = stream.read(HEAD_BYTES)
        if not head.strip():
            return None
        if looks_like_kineto(head, source.name):
            return "kineto"
        if _COMPACT_HEAD.match(head):
            return "polytrace-compact"
        first_obj = _first_object(head, stream)
    if first_obj is not None:
        kind = _jsonl_kind(first_obj)
        if kind is not None:
            return kind
    if _has_console_lines(source, head, base):
        return "verl-console"
    return None


def _skip_note(source: Source) -> str:
    base = _base_name(source.name)
    for pattern, why in _KNOWN_UNUSED:
        if pattern.match(base):
            return f"skipped {source.name}: {why}"
    if source.size == 0:
        return f"skipped {source.name}: empty file"
    return f"skipped {source.name}: unknown file format"


def natural_key(name: str) -> list:
    """Sort key that orders embedded numbers numerically (step_2 < step_10)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _upload_label(sources: list[Source]) -> str:
    if len(sources) == 1:
        return sources[0].name
    tops = {s.name.split("/", 1)[0] for s in sources}
    return tops.pop() if len(tops) == 1 else "upload"


def read_sources(sources: list[Source], forced_format: str | None, result: ReadResult) -> Iterator[TableBatch]:
    """Batches of every readable source; `forced_format` skips detection for all of them."""
    if forced_format is not None and forced_format not in FORMATS:
        raise InputError(
            _upload_label(sources) if sources else "upload",
            f"unknown format {forced_format!r}; known formats: {', '.join(FORMATS)}",
            field="format",
        )
    if not sources:
        raise InputError("upload", "no readable trace files: the upload holds no files")
    readable = 0

    # DAPO marks first: the packed-length reader attaches them to the samples it reads
    def order(s: Source) -> tuple:
        return (not _base_name(s.name).startswith("dapo_filter_indices"), natural_key(s.name))

    for source in sorted(sources, key=order):
        fmt = forced_format or detect_format(source)
        if fmt is None:
            result.skipped.append(_skip_note(source))
            continue
        readable += fmt != "dapo-filter"  # marks alone are no trace
        yield from FORMATS[fmt](source, result)
    note = unmatched_note(result)
    if note:
        result.skipped.append(note)
    if readable == 0:
        raise InputError(
            _upload_label(sources),
            "no readable trace files (see docs/formats.md for accepted formats): " + "; ".join(result.skipped),
        )


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
