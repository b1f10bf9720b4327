"""The format registry: the formats' own declarations (`FORMAT_SPECS` of each module in
`MODULES`, see `backend.formats.spec`) collected in `SPECS`, and what follows from them:
the readers (`FORMATS`: upload, ``format=``, the CLI's ``--format`` and the refusal of an
unknown format), the detection rules in the order they are tried (`backend.formats.detect`
runs them), the read order and the files that carry a table (`files_carrying`). See
docs/formats.md for every format."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping

from backend.formats import (
    areal,
    dapo,
    kineto,
    native,
    nsys,
    otlp,
    polytrace,
    rollouts,
    tensorboard,
    tokenizer,
    verl_logs,
    wandb_history,
)
from backend.formats.base import Reader
from backend.formats.spec import FormatSpec

# The modules declaring formats, in registry order (an upload's dominant format is the
# earlier on ties; the CLI lists them in this order).
MODULES = (
    polytrace,
    verl_logs,
    native,
    kineto,
    nsys,
    dapo,
    tensorboard,
    wandb_history,
    areal,
    otlp,
    rollouts,
    tokenizer,
)

SPECS: dict[str, FormatSpec] = {spec.name: spec for module in MODULES for spec in module.FORMAT_SPECS}


class _Readers(Mapping[str, Reader]):
    """{format name: reader}, read through from SPECS (so an entry added there later, as
    tests do, is in it)."""

    def __getitem__(self, name: str) -> Reader:
        return SPECS[name].reader

    def __iter__(self) -> Iterator[str]:
        return iter(SPECS)

    def __len__(self) -> int:
        return len(SPECS)


FORMATS: Mapping[str, Reader] = _Readers()


def ordered(rule: str) -> list[FormatSpec]:
    """The formats having `rule` ("sniff", "patterns", "head", "line", "scan"), in the
    order detection tries them: by `order`, ties in registry order."""
    specs = [s for s in SPECS.values() if getattr(s, rule)]
    return sorted(specs, key=lambda s: s.order)


def name_patterns() -> list[tuple[re.Pattern[str], str]]:
    """(base-name rule, format) in the order they are tried."""
    return [(p, s.name) for s in ordered("patterns") for p in s.patterns]


def read_first() -> tuple[str, ...]:
    """Formats read before the other files of an upload (they prepare what those are read
    with, the tokenizer then DAPO marks), and no trace on their own."""
    specs = [s for s in SPECS.values() if s.read_first is not None]
    return tuple(s.name for s in sorted(specs, key=lambda s: s.read_first or 0))


def representations() -> tuple[str, ...]:
    """Formats that each give every sample of a run, in order of preference: a folder
    holding several (as `rlvr-explorer generate` writes, and its zip) is read in the
    first only."""
    specs = [s for s in SPECS.values() if s.representation is not None]
    return tuple(s.name for s in sorted(specs, key=lambda s: s.representation or 0))


# Files known to sit in run folders that no reader uses (yet): a friendlier note.
KNOWN_UNUSED = (
    (re.compile(r"^enhanced_task_distribution_parameters.*\.json$"), "fitted distribution parameters, not a trace"),
    (re.compile(r"^readme(\.\w+)?$"), "documentation"),
    (
        re.compile(r".*\.(nsys-rep|qdrep|qdstrm)$"),
        "Nsight Systems report (not read: export it with `nsys export --type sqlite` and upload the .sqlite)",
    ),
    (
        re.compile(r"^run-.*\.wandb$"),
        "W&B offline run (not read: only the wandb package reads it; `wandb sync` it and export the history as CSV/Parquet)",
    ),
)

# What a table is, leading the files that carry it.
CARRIED_WHAT = {"samples": "per-step lengths", "samples.reward": "per-sample rewards"}


def _either(phrases: list[str]) -> str:
    return " or ".join(phrases) if len(phrases) <= 2 else ", ".join(phrases[:-1]) + ", or " + phrases[-1]


def carried_by() -> dict[str, str]:
    """Which files carry a table, or a sample column not every format has, in words (from
    each format's `carries`): what to upload when an analysis lacks its data. Keys:
    "table.column", else "table"."""
    phrases: dict[str, list[str]] = {}
    for spec in SPECS.values():
        for key, phrase in spec.carries.items():
            if phrase not in phrases.setdefault(key, []):
                phrases[key].append(phrase)
    out = {}
    for key, found in phrases.items():
        files = _either(found)
        out[key] = f"{CARRIED_WHAT[key]}: {files}" if key in CARRIED_WHAT else files
    return out


def files_carrying(alternatives: list[list[tuple[str, str]]], present: Collection[str] = ()) -> str:
    """The files that would provide missing (table, column)s, per alternative, in words.
    A column of a table the trace already has (`present`) is named as that column, never
    as the files bringing the table it has."""
    carried = carried_by()

    def carrying(table: str, column: str) -> str:
        if f"{table}.{column}" in carried:
            return carried[f"{table}.{column}"]
        if table in present:
            return f"files with a {column} column for its {table} (docs/formats.md)"
        return carried.get(table, table)

    options = []
    for alt in alternatives:
        files = list(dict.fromkeys(carrying(t, c) for t, c in alt))
        options.append(" plus ".join(files))
    return "; or ".join(o for o in options if o) or "nothing"
