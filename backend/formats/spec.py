"""What a trace format declares, in its own module (`FORMAT_SPECS`): its reader and every
rule the registry (`backend.formats.registry`) derives the rest from -- detection by
name and content, the hint naming the files that bring a table, the read order.

Detection runs in stages, each over the registered formats' rules (lower `order`
first, ties in registry order); the first match names the file:

1. ``sniff(source, base)``: a name that its content confirms (read before the plain
   name rules: a W&B history is a ``.csv`` with a ``_step`` column);
2. ``names``: regular expressions on the base name (lower case, ``.gz`` stripped);
3. ``head(head, name)``: the first 64 KiB;
4. ``line(obj)``: the first line, parsed as a JSON object;
5. ``scan(source, head, base)``: a last look through the file (verl console lines).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from backend.formats.base import Reader, Source

DEFAULT_ORDER = 50
# a rule by extension alone (``.csv``): after every rule that says more
CATCH_ALL_ORDER = 90


@dataclass(frozen=True)
class FormatSpec:
    name: str
    reader: Reader
    # how it is detected, one line for the detection table (`detect.detection_table`)
    detected_by: str
    names: tuple[str, ...] = ()
    sniff: Callable[[Source, str], bool] | None = None
    head: Callable[[bytes, str], bool] | None = None
    line: Callable[[dict], bool] | None = None
    scan: Callable[[Source, bytes, str], bool] | None = None
    # where its rules stand among the other formats' in each stage (lower first)
    order: int = DEFAULT_ORDER
    # {"table" or "table.column": the files of this format that bring it, in words}:
    # what an analysis lacking that data tells the user to upload (`registry.files_carrying`)
    carries: Mapping[str, str] = field(default_factory=dict)
    # read before the other files of an upload (in this order), and no trace on its own:
    # it prepares what those are read with (the tokenizer, DAPO marks)
    read_first: int | None = None
    # it gives every sample of a run: a folder holding several such formats (as
    # `rlvr-explorer generate` writes) is read in the one of lowest rank only
    representation: int | None = None
    patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(re.compile(p) for p in self.names))
