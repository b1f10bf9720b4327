"""The name a trace gets when its upload names none (browser, REST and CLI alike).

A run is known by its folder or archive, not by its first file: a lone archive gives
its name without the archive suffix (``run_7.tar.gz`` -> ``run_7``), files of one
folder on this machine (the CLI) that folder's name, and otherwise the kinds of file it
holds, their step/rank numbers dropped (``packed_lengths_step_0.jsonl`` +
``reward_timings_step_0.jsonl`` -> ``packed_lengths + reward_timings``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath

# Longest first: ".tar.gz" before ".gz".
_ARCHIVE_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tbz2", ".txz", ".tar", ".zip")
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst")
# A trailing step / rank / part number: "_step_12", "-rank3", "_r0", ".0"
_NUMBERED = re.compile(r"[._-]*(?:step|rank|part|r|s)?[._-]*\d+$", re.IGNORECASE)
MAX_NAME = 300  # the trace name column's length


def _strip_suffix(name: str, suffixes: tuple[str, ...]) -> str | None:
    lower = name.lower()
    return next((name[: -len(s)] for s in suffixes if lower.endswith(s) and len(name) > len(s)), None)


def file_stem(name: str) -> str:
    """A file's name without its format and compression suffixes."""
    archive = _strip_suffix(name, _ARCHIVE_SUFFIXES)
    if archive is not None:
        return archive
    name = _strip_suffix(name, _COMPRESSED) or name
    return PurePath(name).stem or name


def default_trace_name(paths: Sequence[PurePath], given: Sequence[PurePath] | None = None) -> str:
    """The name of a trace uploaded as `paths` (the stored files) when none was given;
    `given`: what the user named on this machine (the CLI's folders and files)."""
    if given and len(given) == 1 and given[0].name and _is_folder(given[0], paths):
        return given[0].name[:MAX_NAME]  # a run folder
    if given:
        parents = {p.parent for p in paths}
        if len(paths) > 1 and len(parents) == 1 and next(iter(parents)).name:
            return next(iter(parents)).name[:MAX_NAME]  # files of one run folder
    if len(paths) == 1:
        return file_stem(paths[0].name)[:MAX_NAME]
    kinds: list[str] = []
    for p in paths:
        kind = _NUMBERED.sub("", file_stem(p.name)) or file_stem(p.name)
        if kind not in kinds:
            kinds.append(kind)
    shown = " + ".join(kinds[:3]) + (f" + {len(kinds) - 3} more" if len(kinds) > 3 else "")
    return shown[:MAX_NAME]


def _is_folder(path: PurePath, files: Sequence[PurePath]) -> bool:
    return any(path in f.parents for f in files)


def clean_trace_name(name: str) -> str:
    """A name a user gives a trace, without surrounding blanks; ValueError when it is
    empty, holds a NUL byte or is longer than the column."""
    if "\0" in name:
        raise ValueError("name: must not contain NUL bytes")
    name = name.strip()
    if not name:
        raise ValueError("name: must not be empty")
    if len(name) > MAX_NAME:
        raise ValueError(f"name: at most {MAX_NAME} characters (got {len(name)})")
    return name
