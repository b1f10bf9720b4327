"""verl metric logs -> ``steps`` batches (measured per-step figures, no samples).

Two shapes are read:

- the file logger's JSON lines (``trainer.logger=[...,"file"]``, written to
  ``VERL_FILE_LOGGER_PATH``): ``{"step": N, "data": {"timing_s/gen": 41.2, ...}}``
  (a flat ``{"step": N, "timing_s/gen": ...}`` is accepted too; extra top-level keys
  such as ``elapsed_seconds`` are ignored). NaN/Infinity, which Python's json writes,
  are accepted.
- the console logger's lines ``step:N - key:value - key:value ...``. Values are what
  verl prints (``1.500``, ``12``, ``nan``) or numpy/torch reprs (``np.float64(1.5)``,
  ``tensor(1.5, device='cuda:0')``); non-numeric values are dropped. Anything before
  ``step:`` on a line (Ray's ``(TaskRunner pid=1)``, timestamps, log levels, colour
  codes) is tolerated, and lines without ``step:N -`` are ignored.

Rows of one step (validation and training are logged separately) are merged, later
keys win. Output columns, one row per step in ascending order:

``step`` (int32); ``t_gen, t_reward, t_old_log_prob, t_ref, t_adv, t_update_actor,
t_step`` (float64 seconds, NaN where the step did not log it; a column is present when
any step has it), from the first key found of `TIMING_ALIASES`; ``metrics``: a dict
per step with every numeric key the log had (timing keys included, under their verl
names; non-finite values become None so the dicts stay valid JSON).
``ReadResult.info.framework`` is set to "verl".
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import numpy as np

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.jsonl import INT32_MAX, iter_json_chunks, stdlib_json
from backend.formats.spec import FormatSpec
from core.analysis.tables import STEP_TIMING_COLUMNS

# Step timing column -> verl keys, first match wins. `timing_s/*` is current verl
# (compute_timing_metrics); `timing/*` is verl before 0.3; generate_sequences is the
# rollout worker's own timer, used when the trainer's gen timer is missing.
TIMING_ALIASES: dict[str, tuple[str, ...]] = {
    "t_gen": ("timing_s/gen", "timing/gen", "timing_s/generate_sequences", "timing/generate_sequences"),
    "t_reward": ("timing_s/reward", "timing/reward"),
    "t_old_log_prob": ("timing_s/old_log_prob", "timing/old_log_prob"),
    "t_ref": ("timing_s/ref", "timing/ref", "timing_s/ref_log_prob"),
    "t_adv": ("timing_s/adv", "timing/adv"),
    "t_update_actor": ("timing_s/update_actor", "timing/update_actor"),
    "t_step": ("timing_s/step", "timing/step"),
}
assert tuple(TIMING_ALIASES) == STEP_TIMING_COLUMNS

# `step:12 - ` anywhere on the line, not inside a longer word (e.g. "global_step:").
CONSOLE_STEP = re.compile(r"(?:^|[^\w/])step:\s*(\d+)\s+-\s+")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUMBER = re.compile(
    r"^\s*(?:(?:np|numpy)\.\w+\(|tensor\(|array\()?\s*"
    r"([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf(?:inity)?))",
    re.IGNORECASE,
)


def _number(value) -> float | None:
    if type(value) in (int, float):
        return float(value)
    return None


def _metric(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _steps_batch(merged: dict[int, dict[str, float]], result: ReadResult) -> TableBatch:
    steps = sorted(merged)
    cols: dict = {"step": np.asarray(steps, dtype=np.int32)}
    for column, aliases in TIMING_ALIASES.items():
        values = np.full(len(steps), np.nan)
        for i, step in enumerate(steps):
            data = merged[step]
            key = next((k for k in aliases if k in data), None)
            if key is not None:
                values[i] = data[key]
        if not np.isnan(values).all():
            cols[column] = values
    cols["metrics"] = [{k: _metric(v) for k, v in merged[s].items()} for s in steps]
    result.info.framework = "verl"
    return TableBatch("steps", cols)


def _check_step(step, name: str, line: int) -> int:
    if type(step) is not int:
        raise InputError(name, f"expected an integer step, got {step!r:.40}", line, "step")
    if not 0 <= step <= INT32_MAX:
        raise InputError(name, f"step {step} out of range", line, "step")
    return step


def read_verl_jsonl(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """verl file-logger JSON lines -> one ``steps`` batch."""
    name = source.name
    merged: dict[int, dict[str, float]] = {}
    for chunk in iter_json_chunks(source, fallback=stdlib_json):
        for i, row in enumerate(chunk.rows):
            line = chunk.line(i)
            if "step" not in row:
                raise InputError(name, "missing required field", line, "step")
            step = _check_step(row["step"], name, line)
            data = row.get("data", row)
            if type(data) is not dict:
                raise InputError(name, "expected an object of metrics", line, "data")
            target = merged.setdefault(step, {})
            for key, value in data.items():
                number = _number(value)
                if number is not None and key != "step":
                    target[key] = number
    yield _steps_batch(merged, result)


def parse_console_line(line: str) -> tuple[int, dict[str, float]] | None:
    """``... step:N - key:value - ...`` -> (N, numeric metrics), or None for other lines."""
    m = CONSOLE_STEP.search(line)
    if m is None:
        return None
    metrics: dict[str, float] = {}
    for part in line[m.end() :].split(" - "):
        key, sep, text = part.partition(":")
        if not sep:
            continue
        number = _NUMBER.match(text)
        if number:
            metrics[key.strip()] = float(number.group(1))
    return int(m.group(1)), metrics


def read_verl_console(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """verl console output (``step:N - key:value ...`` lines) -> one ``steps`` batch."""
    name = source.name
    merged: dict[int, dict[str, float]] = {}
    with source.open() as stream:
        for line_no, raw in enumerate(stream, start=1):
            if b"step:" not in raw:
                continue
            text = _ANSI.sub("", raw.decode("utf-8", errors="replace"))
            parsed = parse_console_line(text)
            if parsed is None:
                continue
            step, metrics = parsed
            if step > INT32_MAX:
                raise InputError(name, f"step {step} out of range", line_no, "step")
            merged.setdefault(step, {}).update(metrics)
    if not merged:
        raise InputError(name, "no verl metric lines ('step:N - key:value - ...') found")
    yield _steps_batch(merged, result)


LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
LOG_SCAN_BYTES = 64 << 20


def has_console_lines(source: Source, head: bytes, name: str) -> bool:
    """A ``step:N - key:value`` line in the first bytes, or anywhere in the first
    LOG_SCAN_BYTES of a log file (``.log``/``.txt``/``.out``/``.err``)."""
    if any(CONSOLE_STEP.search(line) for line in head.decode("utf-8", "replace").splitlines()):
        return True
    if not name.endswith(LOG_SUFFIXES):
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


_METRIC_LOG = {
    "steps.t_reward": "a verl metric log with timing_s/reward (file logger JSONL or console lines)",
    "steps": "a verl metric log (file logger JSONL or console lines)",
}

FORMAT_SPECS = (
    FormatSpec(
        "verl-jsonl",
        read_verl_jsonl,
        'a first line ``{"step": N, "data": {...}}``',
        line=lambda obj: "step" in obj and type(obj.get("data")) is dict,
        order=10,
        carries=_METRIC_LOG,
    ),
    FormatSpec(
        "verl-console",
        read_verl_console,
        "a line ``step:N - key:value - ...`` (in the first 64 KiB, or anywhere in the first 64 MiB "
        "of ``.log``/``.txt``/``.out``/``.err``)",
        scan=has_console_lines,
        carries=_METRIC_LOG,
    ),
)
