"""Format detection: `detect_format` decides by the file's base name first (``.gz``
stripped; rules in `backend.formats.registry`), then by its first bytes:

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
nsys-sqlite                 an SQLite database (``SQLite format 3`` header): an Nsight Systems
                            export (``nsys export --type sqlite``), whatever its name
tensorboard                 ``events.out.tfevents.*``; or a first TFRecord whose length CRC checks
wandb-csv / wandb-parquet   a ``.csv`` / ``.parquet`` / ``.pq`` with a ``_step`` column (before
                            native-csv / native-parquet)
areal-perf                  ``traces-rN.jsonl``; or a first line with ph, ts and name (a Chrome
                            trace event)
areal-sessions              ``sessions-rN.jsonl``; or a first line with task_id and session_id
verl-rollouts               a first line with ``input`` and ``output`` strings (verl's
                            ``rollout_data_dir`` / validation dumps, ``<step>.jsonl``)
tokenizer                   ``tokenizer.json``; or a JSON object opening with added_tokens and
                            truncation (a Hugging Face fast tokenizer; read first)
otlp-json                   a JSON object whose first key is ``resourceSpans``
==========================  ==================================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable

import orjson

from backend.formats.base import Source
from backend.formats.jsonl import stdlib_json
from backend.formats.kineto import looks_like_kineto
from backend.formats.native import REQUIRED_SAMPLE_COLUMNS
from backend.formats.nsys import looks_like_nsys
from backend.formats.registry import KNOWN_UNUSED, NAME_PATTERNS
from backend.formats.tensorboard import looks_like_tfrecord
from backend.formats.tokenizer import looks_like_tokenizer
from backend.formats.verl_logs import CONSOLE_STEP
from backend.formats.wandb_history import STEP_COLUMN, parquet_columns

_OTLP_HEAD = re.compile(rb'^\s*(?:\xef\xbb\xbf)?\s*\{\s*"resourceSpans"\s*:')
_COMPACT_HEAD = re.compile(rb'^\s*(?:\xef\xbb\xbf)?\s*\{\s*"\d+"\s*:')
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
HEAD_BYTES = 64 << 10
FIRST_LINE_MAX = 16 << 20
LOG_SCAN_BYTES = 64 << 20


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


def _jsonl_kind(obj: dict) -> str | None:
    keys = obj.keys()
    if "step" in keys and type(obj.get("data")) is dict:
        return "verl-jsonl"
    if "input" in keys and type(obj.get("output")) is list:
        return "polytrace-packed"
    if type(obj.get("input")) is str and type(obj.get("output")) is str:
        return "verl-rollouts"
    if "reward_time_s" in keys:
        return "polytrace-reward"
    if "turns" in keys and "prompt_group_id" in keys:
        return "polytrace-multiturn"
    if all(k in keys for k in REQUIRED_SAMPLE_COLUMNS):
        return "native-jsonl"
    if "ph" in keys and "ts" in keys and "name" in keys:
        return "areal-perf"
    if "task_id" in keys and "session_id" in keys:
        return "areal-sessions"
    return None


def _wandb_history(source: Source, base: str) -> str | None:
    """wandb-csv / wandb-parquet when a CSV / Parquet file has a ``_step`` column."""
    import csv

    from backend.formats.native import seekable_stream

    if base.endswith(".csv"):
        with source.open() as stream:
            first = stream.readline(1 << 20).decode("utf-8-sig", errors="replace")
        header = next(csv.reader([first]), [])
        return "wandb-csv" if STEP_COLUMN in (h.strip() for h in header) else None
    if base.endswith((".parquet", ".pq")):
        with source.open() as raw, seekable_stream(raw) as stream:
            names = parquet_columns(stream)
        return "wandb-parquet" if names and STEP_COLUMN in names else None
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


# Content rules on a file's first bytes (and name), in order: the first match names it.
HEAD_RULES: tuple[tuple[Callable[[bytes, str], bool], str], ...] = (
    (lambda head, name: looks_like_nsys(head), "nsys-sqlite"),
    (lambda head, name: looks_like_tokenizer(head), "tokenizer"),
    (looks_like_kineto, "kineto"),
    (lambda head, name: bool(_COMPACT_HEAD.match(head)), "polytrace-compact"),
    (lambda head, name: bool(_OTLP_HEAD.match(head)), "otlp-json"),
    (lambda head, name: looks_like_tfrecord(head), "tensorboard"),
)


def detect_format(source: Source) -> str | None:
    """The format name of `source`, or None when no reader recognises it: by name (a W&B
    history first), then by the first bytes, the first JSON line, and console lines."""
    base = base_name(source.name)
    by_name = _wandb_history(source, base) or next((fmt for p, fmt in NAME_PATTERNS if p.match(base)), None)
    if by_name is not None or any(pattern.match(base) for pattern, _ in KNOWN_UNUSED):
        return by_name
    with source.open() as stream:
        head = stream.read(HEAD_BYTES)
        if not head.strip():
            return None
        by_head = next((fmt for rule, fmt in HEAD_RULES if rule(head, source.name)), None)
        if by_head is not None:
            return by_head
        first_obj = _first_object(head, stream)
    kind = _jsonl_kind(first_obj) if first_obj is not None else None
    if kind is not None:
        return kind
    return "verl-console" if _has_console_lines(source, head, base) else None


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
