"""verl rollout dumps (``trainer.rollout_data_dir``, and the validation dump) -> samples
with their text.

verl writes ``<dir>/<global_step>.jsonl`` per step, one line per sample::

    {"input": "<decoded prompt>", "output": "<decoded response>", "gts": "...",
     "score": 1.0, "step": 12, "acc": true, "pred": "42", ...}

``gts`` (newer versions) and every ``reward_extra_infos`` key with one value per sample
(``acc``, ``pred``, ...) are optional. What is read:

- step: the line's ``step``, else the file name's number (``12.jsonl``);
- validation: a file under a folder whose name says so (``val``, ``validation``,
  ``val_generations``, ``eval`` ...) holds validation samples; their groups are numbered
  from `VALIDATION_GROUPS` (1,000,000) so they never meet the training samples of the
  same step;
- groups: the samples of one prompt (GRPO's n samples) share ``uid`` when the dump has
  it, else the prompt text: group_idx numbers a step's distinct prompts in order of
  first appearance, sample_idx the prompt's samples in file order (verl may reorder a
  batch to balance DP ranks, so a group's lines need not be adjacent);
- lengths: prompt_len / response_len are token counts of the dumped text from the run's
  tokenizer (backend/formats/tokenizer.py; special tokens verl's decode dropped are not
  counted), else characters — the trace then says ``length_unit: characters``;
- reward: ``score`` (NaN or null: unknown); repeat_period: core/analysis/repetition.py;
- the texts (zstd, backend/formats/rollout_text.py) go to ``sample_texts`` with ``gts``;
  each extra key's value to ``sample_extras`` (numbers and booleans as numbers, strings
  as text, anything else as its JSON).

Errors name the file, line and field: a line that is not a JSON object, a missing or
non-string ``input`` / ``output``, a non-number ``score``, a negative or non-integer
``step``, a file without any step. Metadata: ``result.info.metadata["rollouts"]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import PurePosixPath

import numpy as np
import orjson

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.jsonl import (
    JsonChunk,
    as_ids,
    chunk_lines,
    int_values,
    iter_json_chunks,
    show_value,
    stdlib_json,
    str_column,
)
from backend.formats.rollout_text import pack_many
from backend.formats.spec import FormatSpec
from backend.formats.tokenizer import TOKENIZER_STATE
from core.analysis.repetition import repeat_period

VALIDATION_GROUPS = 1_000_000
KNOWN_KEYS = frozenset({"input", "output", "score", "step", "gts"})
MAX_KEY = 200
GROUPS_STATE = "rollout_groups"
_STEP_FILE = re.compile(r"^(\d+)\.jsonl?$")
_VALIDATION_DIR = re.compile(r"^(val|valid|validation|eval|evaluation|test)([_-].*)?$", re.IGNORECASE)


def is_validation(name: str) -> bool:
    """A file inside a folder named for validation (val, validation_generations, eval...)."""
    return any(_VALIDATION_DIR.match(part) for part in PurePosixPath(name).parts[:-1])


def file_step(name: str) -> int | None:
    base = PurePosixPath(name).name.lower()
    base = base[:-3] if base.endswith(".gz") else base
    match = _STEP_FILE.match(base)
    return int(match.group(1)) if match else None


def read_verl_rollouts(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """Yield samples, sample_texts and sample_extras batches, chunk by chunk."""
    name = source.name
    validate = is_validation(name)
    tokenizer = result.state.get(TOKENIZER_STATE)
    meta = _metadata(result, tokenizer)
    (meta["validation_files"] if validate else meta["files"]).append(name)
    for chunk in iter_json_chunks(source, fallback=stdlib_json):
        inputs = str_column(chunk, "input", name)
        outputs = str_column(chunk, "output", name)
        step = _steps(chunk, name)
        group, sample = _group_ids(chunk, inputs, step, validate, result)
        reward = _scores(chunk, name)
        keys = {"step": step, "group_idx": group, "sample_idx": sample}
        prompt_len, response_len = _lengths(inputs, outputs, tokenizer, chunk, name)
        yield TableBatch(
            "samples",
            {
                **keys,
                "prompt_len": prompt_len,
                "response_len": response_len,
                "validate": np.full(len(step), validate),
                "reward": reward,
                "repeat_period": np.fromiter(map(repeat_period, outputs), np.int32, len(outputs)),
            },
        )
        yield TableBatch("sample_texts", _texts(chunk, keys, inputs, outputs))
        extras = _extras(chunk, keys, name, meta["extra_keys"])
        if extras is not None:
            yield TableBatch("sample_extras", extras)
        meta["samples"] += len(step)


def _metadata(result: ReadResult, tokenizer) -> dict:
    meta = result.info.metadata.setdefault(
        "rollouts", {"files": [], "validation_files": [], "samples": 0, "extra_keys": {}}
    )
    meta["length_unit"] = "tokens" if tokenizer is not None else "characters"
    result.info.length_unit = meta["length_unit"]
    meta["tokenizer"] = tokenizer.describe() if tokenizer is not None else None
    return meta


def _steps(chunk: JsonChunk, name: str) -> np.ndarray:
    from_name = file_step(name)
    if from_name is None and not all("step" in r for r in chunk.rows):
        i = next(i for i, r in enumerate(chunk.rows) if "step" not in r)
        raise InputError(name, "missing field (and the file name is not <step>.jsonl)", chunk.line(i), "step")
    values = [r.get("step", from_name) for r in chunk.rows]
    return as_ids(int_values(values, chunk, "step", name), name=name, field="step", line_of=chunk_lines(chunk))


def _scores(chunk: JsonChunk, name: str) -> np.ndarray:
    values = []
    for i, r in enumerate(chunk.rows):
        if "score" not in r:
            raise InputError(name, "missing field", chunk.line(i), "score")
        v = r["score"]
        if v is not None and type(v) not in (int, float, bool):
            raise InputError(name, f"expected a number, got {show_value(v)}", chunk.line(i), "score")
        values.append(np.nan if v is None else float(v))
    return np.asarray(values, dtype=np.float64)


def _group_ids(chunk: JsonChunk, inputs: list[str], step: np.ndarray, validate: bool, result: ReadResult):
    """(group_idx, sample_idx) per line: a step's prompts (or uids) numbered in order of
    first appearance, across the chunks and files of the upload."""
    groups: dict = result.state.setdefault(GROUPS_STATE, {})
    base = VALIDATION_GROUPS if validate else 0
    group = np.empty(len(inputs), dtype=np.int32)
    sample = np.empty(len(inputs), dtype=np.int32)
    for i, (row, text, st) in enumerate(zip(chunk.rows, inputs, step.tolist())):
        uid = row.get("uid")
        per_step = groups.setdefault((st, validate), {})
        key = ("uid", uid) if isinstance(uid, str) else text
        entry = per_step.get(key)
        if entry is None:
            entry = per_step[key] = [base + len(per_step), 0]
        group[i], sample[i] = entry
        entry[1] += 1
    return group, sample


def _lengths(inputs: list[str], outputs: list[str], tokenizer, chunk: JsonChunk, name: str):
    if tokenizer is None:
        return np.fromiter(map(len, inputs), np.int32, len(inputs)), np.fromiter(
            map(len, outputs), np.int32, len(outputs)
        )
    return np.asarray(tokenizer.lengths(inputs), np.int32), np.asarray(tokenizer.lengths(outputs), np.int32)


def clean_text(value: str) -> str:
    """A string the databases' text columns take: no NUL, no lone surrogates."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def _texts(chunk: JsonChunk, keys: dict, inputs: list[str], outputs: list[str]) -> dict:
    gts = [r.get("gts") for r in chunk.rows]
    return {
        **keys,
        "prompt": pack_many(inputs),
        "response": pack_many(outputs),
        "prompt_chars": np.fromiter(map(len, inputs), np.int32, len(inputs)),
        "response_chars": np.fromiter(map(len, outputs), np.int32, len(outputs)),
        "gts": [None if g is None else clean_text(g if isinstance(g, str) else orjson.dumps(g).decode()) for g in gts],
    }


def _extras(chunk: JsonChunk, keys: dict, name: str, kinds: dict) -> dict | None:
    """One row per (sample, extra key): numbers in value_num, the rest as text."""
    cols: dict[str, list] = {k: [] for k in ("row", "key", "value_num", "value_text")}
    for i, r in enumerate(chunk.rows):
        for key, value in r.items():
            if key in KNOWN_KEYS:
                continue
            if len(key) > MAX_KEY:
                raise InputError(name, f"extra key longer than {MAX_KEY} characters", chunk.line(i), key[:40] + "...")
            number = type(value) in (int, float, bool) and abs(float(value) if type(value) is not int else 0) <= 1e308
            if type(value) is int and not -(2**63) <= value < 2**63:
                number = False  # an integer no float holds: kept as its text
            cols["row"].append(i)
            cols["key"].append(clean_text(key))
            cols["value_num"].append(float(value) if number else np.nan)
            text = (
                None if number or value is None else value if isinstance(value, str) else orjson.dumps(value).decode()
            )
            cols["value_text"].append(None if text is None else clean_text(text))
            if value is not None:
                kinds.setdefault(key, "number" if number else "text")
    if not cols["row"]:
        return None
    rows = np.asarray(cols.pop("row"), dtype=np.int64)
    return {
        **{k: v[rows] for k, v in keys.items()},
        "key": cols["key"],
        "value_num": np.asarray(cols["value_num"], dtype=np.float64),
        "value_text": cols["value_text"],
    }


FORMAT_SPECS = (
    FormatSpec(
        "verl-rollouts",
        read_verl_rollouts,
        "a first line with ``input`` and ``output`` strings (verl's ``rollout_data_dir`` / validation "
        "dumps, ``<step>.jsonl``)",
        line=lambda obj: type(obj.get("input")) is str and type(obj.get("output")) is str,
        order=30,
        carries={"samples.reward": "verl rollout dumps (<step>.jsonl of trainer.rollout_data_dir, with score)"},
    ),
)
