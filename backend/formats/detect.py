"""Format detection: `detect_format` tries the registered formats' rules (each format's
`FormatSpec`, see `backend.formats.spec` for the stages) on the file's base name
(``.gz`` stripped), then on its first bytes. `detection_table()` says how each format is
detected (docs/formats.md has the same table with each format's fields).
"""

from __future__ import annotations

import re

import orjson

from backend.formats import registry
from backend.formats.base import Source
from backend.formats.jsonl import stdlib_json
from backend.formats.registry import KNOWN_UNUSED

HEAD_BYTES = 64 << 10
FIRST_LINE_MAX = 16 << 20


def base_name(name: str) -> str:
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
        except (ValueError, RecursionError):
            return None
    return obj if type(obj) is dict else None


def detect_format(source: Source) -> str | None:
    """The format name of `source`, or None when no reader recognises it: by name (a name
    its content confirms first), then by the first bytes, the first JSON line, and a
    last scan (console lines)."""
    base = base_name(source.name)
    by_name = next((s.name for s in registry.ordered("sniff") if s.sniff and s.sniff(source, base)), None)
    by_name = by_name or next((fmt for p, fmt in registry.name_patterns() if p.match(base)), None)
    if by_name is not None or any(pattern.match(base) for pattern, _ in KNOWN_UNUSED):
        return by_name
    with source.open() as stream:
        head = stream.read(HEAD_BYTES)
        if not head.strip():
            return None
        by_head = next((s.name for s in registry.ordered("head") if s.head and s.head(head, source.name)), None)
        if by_head is not None:
            return by_head
        first_obj = _first_object(head, stream)
    if first_obj is not None:
        by_line = next((s.name for s in registry.ordered("line") if s.line and s.line(first_obj)), None)
        if by_line is not None:
            return by_line
    return next((s.name for s in registry.ordered("scan") if s.scan and s.scan(source, head, base)), None)


def detection_table() -> str:
    """How each registered format is detected (its `detected_by`), as a
    reStructuredText table in registry order."""
    rows = [(s.name, s.detected_by) for s in registry.SPECS.values()]
    width = max(len("format"), *(len(n) for n, _ in rows)) + 2
    rule = "=" * (width - 2) + "  " + "=" * max(len(w) for _, w in rows)
    lines = [rule, "format".ljust(width) + "detected by", rule]
    lines += [name.ljust(width) + words for name, words in rows]
    return "\n".join([*lines, rule])


def skip_note(source: Source) -> str:
    base = base_name(source.name)
    for pattern, why in KNOWN_UNUSED:
        if pattern.match(base):
            return f"skipped {source.name}: {why}"
    if source.size == 0:
        return f"skipped {source.name}: empty file"
    return f"skipped {source.name}: unknown file format"


def natural_key(name: str) -> list:
    """Sort key that orders embedded numbers numerically (step_2 < step_10)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
