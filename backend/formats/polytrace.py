"""PolyTrace readers: per-step JSON lines and the compact whole-run JSON.

``packed_lengths_step_N.jsonl`` (one prompt group per line) -> ``samples``, one row per
element of ``output``:
    step, group_idx (see below), sample_idx (index in ``output``), prompt_len (``input``),
    response_len (``output[i]``), rank, dp_rank, tp_rank, validate (when present), and
    filter_mark / trainer_step when the upload's ``dapo_filter_indices.jsonl`` marks the
    step (backend/formats/dapo.py).
    ``group_idx`` is a per-step ordinal: the first group seen for a step gets 0, the next
    1, ... in upload order (files sorted by name, lines in order), across all files of
    the step. Groups are identified by (rank, local_index); the same pair twice in one
    step is an error. An ordinal never overflows int32 as (rank << 16 | local_index)
    could, and it stays dense for the DP-balancing analyses.
``reward_timings_step_N.jsonl`` (one line per rank) -> ``rank_timings``:
    step, rank, dp_rank, tp_rank, phase="reward", seconds (``reward_time_s``),
    batch_size, validate.
``multiturn_workload_step_N.jsonl`` (one trajectory per line) -> ``samples`` (one row
per trajectory: group_idx = ``prompt_group_id``, sample_idx = ``sample_id``,
response_len = ``final_response_len``, num_turns, num_tool_calls, latency_s = summed
``engine_latency_s``, truncated = ``finish_reason == "length"``), ``turns`` and
``tool_calls`` (call_idx = position in the trajectory's ``tool_calls``,
response_tokens = ``response_token_len``). ``max_response_len`` goes to
``ReadResult.info.max_response_len``.
Compact whole-run JSON ``{"<step>": ...}``:
    single-turn ``{"input": [p...], "output": [...]}``: ``output[i]`` is either one
    response length (group i holds one sample) or a list (group i holds those samples,
    all with prompt ``input[i]``); multi-turn ``[{"input": [per-turn prompt],
    "output": [per-turn completion]}, ...]``: one sample per trajectory (group_idx =
    its index, prompt_len = first input, response_len = sum of outputs, num_turns) plus
    one ``turns`` row per turn. The file is loaded whole (the format has no lines);
    batches are yielded per step.

Errors name the file, the 1-based line (JSON lines) and the field; for the compact
format the field is a path such as ``3.output[17]``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import orjson

from backend.formats.base import InputError, ReadResult, Source, TableBatch, files_named, runs_hint
from backend.formats.dapo import sample_marks
from backend.formats.jsonl import (
    INT32_MAX,
    MAX_RECORD_BYTES,
    REQUIRED,
    JsonChunk,
    as_ids,
    as_lengths,
    as_seconds,
    bool_column,
    check_record_size,
    chunk_lines,
    float_column,
    gc_paused,
    has_field,
    int_array,
    int_column,
    int_problem,
    iter_json_chunks,
    list_column,
    str_column,
)
from backend.formats.spec import FormatSpec

_STEP_IN_NAME = re.compile(r"_step_?(\d+)")


def step_from_name(name: str) -> int | None:
    """The N of ``..._step_N...`` in the file's base name, if any."""
    m = _STEP_IN_NAME.search(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------- group ordinals


@dataclass
class _StepGroups:
    next: int = 0
    seen: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # sorted keys
    files: list[str] = field(default_factory=list)  # the files that gave them (a few)


@dataclass
class GroupOrdinals:
    """Per-step ordinals for (rank, local_index) groups, shared by all files of an upload."""

    steps: dict[int, _StepGroups] = field(default_factory=dict)

    def assign(
        self, step: int, n: int, keys: np.ndarray | None, name: str, on_duplicate: Callable[[int], InputError]
    ) -> np.ndarray:
        """n new ordinals for `step`. `keys` ((rank << 32) | local_index), when known,
        must not repeat, neither among themselves nor with earlier groups of the step;
        `on_duplicate(i)` builds the error for the i-th key."""
        state = self.steps.setdefault(step, _StepGroups())
        if keys is not None and n:
            order = np.argsort(keys, kind="stable")
            sorted_keys = keys[order]
            dup = sorted_keys[1:] == sorted_keys[:-1]
            if dup.any():
                k = int(np.argmax(dup))
                raise on_duplicate(int(max(order[k], order[k + 1])))
            if state.seen.size:
                pos = np.minimum(np.searchsorted(state.seen, keys), state.seen.size - 1)
                again = state.seen[pos] == keys
                if again.any():
                    raise _given_before(on_duplicate(int(np.argmax(again))), name, state.files)
            if name not in state.files and len(state.files) < 4:
                state.files.append(name)
            # Both runs are sorted: a stable sort of the concatenation is a linear merge.
            state.seen = np.sort(np.concatenate([state.seen, sorted_keys]), kind="stable")
        first = state.next
        state.next += n
        if state.next - 1 > INT32_MAX:
            raise InputError(name, f"more than {INT32_MAX:,} prompt groups in step {step}")
        return np.arange(first, first + n, dtype=np.int64)


def _given_before(error: InputError, name: str, files: list[str]) -> InputError:
    """A group an earlier file of the upload gave already: the error names that file too."""
    others = [f for f in files if f != name]
    if not others:
        return error
    both = [*others, name]
    return InputError(
        error.file,
        f"{error.reason}: {files_named(both)} {'both ' if len(both) == 2 else ''}give it{runs_hint(both)}",
        error.line,
        error.field,
    )


def group_ordinals(result: ReadResult) -> GroupOrdinals:
    """The upload's group ordinal registry, kept on the ReadResult (one per upload)."""
    return result.state.setdefault("polytrace_groups", GroupOrdinals())


# --------------------------------------------------------------------------- helpers


def _step_column(chunk: JsonChunk, source: Source) -> np.ndarray:
    from_name = step_from_name(source.name)
    default = REQUIRED if from_name is None else from_name
    step = int_column(chunk, "step", source.name, default)
    return as_ids(step, name=source.name, field="step", line_of=chunk_lines(chunk))


def _optional_ids(chunk: JsonChunk, keys: tuple[str, ...], name: str) -> dict[str, np.ndarray]:
    return {
        key: as_ids(int_column(chunk, key, name), name=name, field=key, line_of=chunk_lines(chunk))
        for key in keys
        if has_field(chunk, key)
    }


def _flat_ints(
    lists: list[list], offsets: np.ndarray, name: str, line_of_row: Callable[[int], int | None], label: str
) -> tuple[np.ndarray, Callable[[int], int | None], Callable[[int], str]]:
    """Concatenate per-row integer lists; returns the values and, for an element index,
    its line and field (``label[j]``)."""
    flat = list(chain.from_iterable(lists))
    arr = int_array(flat)

    def row_of(i: int) -> int:
        return int(np.searchsorted(offsets, i, side="right") - 1)

    def line_of(i: int) -> int | None:
        return line_of_row(row_of(i))

    def field_of(i: int) -> str:
        return f"{label}[{i - int(offsets[row_of(i)])}]"

    if arr is None:
        i, problem = int_problem(flat)
        raise InputError(name, problem, line_of(i), field_of(i))
    return arr, line_of, field_of


def _offsets(counts: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _within(counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Position of each flattened element inside its row."""
    total = int(offsets[-1])
    return np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1], counts)


# --------------------------------------------------------------------------- packed lengths


def read_packed_lengths(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """``packed_lengths_step_N.jsonl`` -> ``samples`` batches (about 100k rows each)."""
    name = source.name
    registry = group_ordinals(result)
    for chunk in iter_json_chunks(source):
        line_of = chunk_lines(chunk)
        n = len(chunk.rows)
        step = _step_column(chunk, source)
        prompt = as_lengths(int_column(chunk, "input", name), name=name, field="input", line_of=line_of)
        with gc_paused():
            outputs = list_column(chunk, "output", name)
            counts = np.fromiter(map(len, outputs), np.int64, n)
            offsets = _offsets(counts)
            flat, flat_line, flat_field = _flat_ints(outputs, offsets, name, line_of, "output")
        response = as_lengths(flat, name=name, field=flat_field, line_of=flat_line)
        if has_field(chunk, "n_sampling"):
            n_sampling = int_column(chunk, "n_sampling", name, default=-1)
            wrong = (n_sampling >= 0) & (n_sampling != counts)
            if wrong.any():
                i = int(np.argmax(wrong))
                raise InputError(
                    name, f"has {counts[i]} responses but n_sampling is {n_sampling[i]}", line_of(i), "output"
                )
        ids = _optional_ids(chunk, ("rank", "dp_rank", "tp_rank"), name)
        group = _packed_group_ordinals(chunk, step, ids, registry, name)
        cols: dict = {
            "step": np.repeat(step, counts),
            "group_idx": np.repeat(group, counts).astype(np.int32),
            "sample_idx": _within(counts, offsets).astype(np.int32),
            "prompt_len": np.repeat(prompt, counts),
            "response_len": response,
        }
        for key, arr in ids.items():
            cols[key] = np.repeat(arr, counts)
        if has_field(chunk, "validate"):
            cols["validate"] = np.repeat(bool_column(chunk, "validate", name, default=False), counts)
        for key, arr in sample_marks(result, step, group, name, line_of).items():
            cols[key] = np.repeat(arr, counts)
        yield TableBatch("samples", cols)


def _packed_group_ordinals(
    chunk: JsonChunk, step: np.ndarray, ids: dict, registry: GroupOrdinals, name: str
) -> np.ndarray:
    line_of = chunk_lines(chunk)
    local = None
    if has_field(chunk, "local_index"):
        local = as_ids(int_column(chunk, "local_index", name), name=name, field="local_index", line_of=line_of)
    rank = ids.get("rank", ids.get("dp_rank"))
    if rank is None:
        rank = np.zeros(len(chunk.rows), np.int32)
    group = np.empty(len(chunk.rows), np.int64)
    steps = np.unique(step)
    for s in steps.tolist():
        rows = np.arange(len(step)) if len(steps) == 1 else np.flatnonzero(step == s)

        def duplicate(i: int, rows=rows, s=s) -> InputError:
            assert local is not None  # duplicates are found by keys, which need local_index
            r = rows[i]
            return InputError(
                name,
                f"duplicate prompt group (rank {rank[r]}, local_index {local[r]}) in step {s}",
                line_of(r),
                "local_index",
            )

        keys = None if local is None else (rank[rows].astype(np.int64) << 32) | local[rows].astype(np.int64)
        group[rows] = registry.assign(s, len(rows), keys, name, duplicate)
    return group


# --------------------------------------------------------------------------- reward timings


def read_reward_timings(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """``reward_timings_step_N.jsonl`` -> ``rank_timings`` rows with phase "reward"."""
    name = source.name
    for chunk in iter_json_chunks(source):
        line_of = chunk_lines(chunk)
        n = len(chunk.rows)
        cols: dict = {"step": _step_column(chunk, source)}
        cols.update(_optional_ids(chunk, ("rank", "dp_rank", "tp_rank"), name))
        if "rank" not in cols:
            # Without a global rank the DP rank identifies the row (one reward worker per DP rank).
            cols["rank"] = cols.get("dp_rank")
            if cols["rank"] is None:
                raise InputError(name, "missing required field", chunk.line(0), "rank")
        cols["phase"] = ["reward"] * n
        seconds = float_column(chunk, "reward_time_s", name)
        cols["seconds"] = as_seconds(seconds, name=name, field="reward_time_s", line_of=line_of)
        if has_field(chunk, "batch_size"):
            cols["batch_size"] = as_ids(
                int_column(chunk, "batch_size", name), name=name, field="batch_size", line_of=line_of
            )
        if has_field(chunk, "validate"):
            cols["validate"] = bool_column(chunk, "validate", name, default=False)
        yield TableBatch("rank_timings", cols)


# --------------------------------------------------------------------------- multi-turn


def _nested(chunk: JsonChunk, lists: list[list], label: str, name: str) -> tuple[JsonChunk, np.ndarray, np.ndarray]:
    """Flatten per-row lists of objects into a chunk of their own (same line numbers),
    with the owning row index and the position within the row."""
    counts = np.fromiter(map(len, lists), np.int64, len(lists))
    offsets = _offsets(counts)
    owner = np.repeat(np.arange(len(lists), dtype=np.int64), counts)
    pos = _within(counts, offsets)
    items = list(chain.from_iterable(lists))
    nested = JsonChunk(items, chunk.line_nos[owner], lambda i: f"{label}[{pos[i]}].")
    if not all(type(item) is dict for item in items):
        i = next(i for i, item in enumerate(items) if type(item) is not dict)
        raise InputError(name, "expected a JSON object", nested.line(i), f"{label}[{pos[i]}]")
    return nested, owner, pos


def read_multiturn_workload(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """``multiturn_workload_step_N.jsonl`` -> ``samples``, ``turns`` and ``tool_calls``."""
    name = source.name
    for chunk in iter_json_chunks(source):
        line_of = chunk_lines(chunk)
        n = len(chunk.rows)
        step = _step_column(chunk, source)
        group = as_ids(int_column(chunk, "prompt_group_id", name), name=name, field="prompt_group_id", line_of=line_of)
        sample = as_ids(int_column(chunk, "sample_id", name), name=name, field="sample_id", line_of=line_of)
        turns = list_column(chunk, "turns", name, default=[])
        calls = list_column(chunk, "tool_calls", name, default=[])
        turn_chunk, turn_owner, turn_pos = _nested(chunk, turns, "turns", name)
        call_chunk, call_owner, call_pos = _nested(chunk, calls, "tool_calls", name)

        turn_cols = _turn_columns(turn_chunk, turn_pos, name)
        samples: dict = {
            "step": step,
            "group_idx": group,
            "sample_idx": sample,
            "prompt_len": as_lengths(
                int_column(chunk, "prompt_len", name), name=name, field="prompt_len", line_of=line_of
            ),
            "response_len": as_lengths(
                int_column(chunk, "final_response_len", name), name=name, field="final_response_len", line_of=line_of
            ),
            "num_turns": _count_column(chunk, "turn_count", np.bincount(turn_owner, minlength=n), name),
            "num_tool_calls": _count_column(chunk, "tool_call_count", np.bincount(call_owner, minlength=n), name),
            "truncated": np.array(str_column(chunk, "finish_reason", name, default="")) == "length",
        }
        if turn_cols["engine_latency_s"] is not None:
            samples["latency_s"] = np.bincount(turn_owner, weights=turn_cols["engine_latency_s"], minlength=n)
        else:
            del turn_cols["engine_latency_s"]
        if has_field(chunk, "validate"):
            samples["validate"] = bool_column(chunk, "validate", name, default=False)
        if has_field(chunk, "max_response_len"):
            cap = int(int_column(chunk, "max_response_len", name, default=0).max())
            if cap > 0:
                result.info.max_response_len = max(result.info.max_response_len or 0, cap)
        yield TableBatch("samples", samples)

        owner_keys = {"step": step, "group_idx": group, "sample_idx": sample}
        if len(turn_owner):
            yield TableBatch("turns", {**{k: v[turn_owner] for k, v in owner_keys.items()}, **turn_cols})
        if len(call_owner):
            yield TableBatch(
                "tool_calls",
                {**{k: v[call_owner] for k, v in owner_keys.items()}, **_call_columns(call_chunk, call_pos, name)},
            )


def _count_column(chunk: JsonChunk, key: str, counted: np.ndarray, name: str) -> np.ndarray:
    """A declared count (turn_count, tool_call_count) when present, else the list length."""
    if not has_field(chunk, key):
        return counted.astype(np.int32)
    declared = int_column(chunk, key, name, default=-1)
    declared = np.where(declared < 0, counted, declared)
    return as_ids(declared, name=name, field=key, line_of=chunk_lines(chunk))


def _turn_columns(turns: JsonChunk, pos: np.ndarray, name: str) -> dict:
    line_of = chunk_lines(turns)
    where = lambda key: lambda i: turns.field(i, key)  # noqa: E731

    def length(key: str, default=REQUIRED) -> np.ndarray:
        return as_lengths(int_column(turns, key, name, default), name=name, field=where(key), line_of=line_of)

    latency = None
    if has_field(turns, "engine_latency_s"):
        latency = float_column(turns, "engine_latency_s", name, None, nullable=True)
        latency = as_seconds(latency, name=name, field=where("engine_latency_s"), line_of=line_of)
    turn = int_column(turns, "turn", name) if has_field(turns, "turn") else pos
    return {
        "turn": as_ids(turn, name=name, field=where("turn"), line_of=line_of),
        "prompt_tokens": length("prompt_tokens"),
        "cached_tokens": length("cached_tokens", 0),
        "completion_tokens": length("completion_tokens"),
        "engine_latency_s": latency,
        "tool_call_count": as_ids(
            int_column(turns, "tool_call_count", name, default=0),
            name=name,
            field=where("tool_call_count"),
            line_of=line_of,
        ),
        "finish_reason": str_column(turns, "finish_reason", name, default=""),
    }


def _call_columns(calls: JsonChunk, pos: np.ndarray, name: str) -> dict:
    line_of = chunk_lines(calls)
    where = lambda key: lambda i: calls.field(i, key)  # noqa: E731
    latency = float_column(calls, "latency_s", name, None, nullable=True)
    return {
        "call_idx": pos.astype(np.int32),
        "turn": as_ids(int_column(calls, "turn", name, default=0), name=name, field=where("turn"), line_of=line_of),
        "tool_name": str_column(calls, "tool_name", name, default=""),
        "latency_s": as_seconds(latency, name=name, field=where("latency_s"), line_of=line_of),
        "response_tokens": as_lengths(
            int_column(calls, "response_token_len", name, default=0),
            name=name,
            field=where("response_token_len"),
            line_of=line_of,
        ),
        "status": str_column(calls, "status", name, default=""),
    }


# --------------------------------------------------------------------------- compact JSON


def read_compact(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """Compact whole-run JSON keyed by step -> per-step ``samples`` (and ``turns``)."""
    name = source.name
    with source.open() as stream:
        raw = stream.read(MAX_RECORD_BYTES + 1)
    check_record_size(len(raw), name)
    if not raw.strip():
        raise InputError(name, "empty file")
    try:
        with gc_paused():
            data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(name, f"malformed JSON ({exc.msg})", line=exc.lineno) from None
    del raw
    if type(data) is not dict or not data:
        raise InputError(name, "expected a JSON object keyed by step number")
    bad = next((k for k in data if not k.isdigit()), None)
    if bad is not None:
        raise InputError(name, f"expected step numbers as keys, got {bad!r:.40}", field=bad)
    for key in sorted(data, key=int):
        step = int(key)
        if step > INT32_MAX:
            raise InputError(name, f"step {step} out of range", field=key)
        value = data[key]
        if type(value) is dict:
            yield _compact_single_turn(step, key, value, name)
        elif type(value) is list:
            yield from _compact_multi_turn(step, key, value, name)
        else:
            raise InputError(name, "expected an object (single-turn) or a list (multi-turn)", field=key)


def _int_list(values, name: str, path: str) -> np.ndarray:
    if type(values) is not list:
        raise InputError(name, f"expected a list of integers, got {values!r:.40}", field=path)
    arr = int_array(values)
    if arr is None:
        i, problem = int_problem(values)
        raise InputError(name, problem, field=f"{path}[{i}]")
    return as_lengths(arr, name=name, field=lambda i: f"{path}[{i}]", line_of=lambda i: None)


def _field(obj: dict, key: str, name: str, path: str):
    if key not in obj:
        raise InputError(name, "missing required field", field=f"{path}.{key}")
    return obj[key]


def _compact_single_turn(step: int, key: str, value: dict, name: str) -> TableBatch:
    prompts = _int_list(_field(value, "input", name, key), name, f"{key}.input")
    outputs = _field(value, "output", name, key)
    if type(outputs) is not list:
        raise InputError(name, "expected a list", field=f"{key}.output")
    if len(outputs) != len(prompts):
        raise InputError(name, f"has {len(outputs)} entries but input has {len(prompts)}", field=f"{key}.output")
    if all(type(o) is list for o in outputs):
        counts = np.fromiter(map(len, outputs), np.int64, len(outputs))
        offsets = _offsets(counts)
        flat, _, field_of = _flat_ints(outputs, offsets, name, lambda r: None, f"{key}.output")
        # _flat_ints names element j of a row; add the row index for a nested path.
        row_of = lambda i: int(np.searchsorted(offsets, i, side="right") - 1)  # noqa: E731
        path = lambda i: f"{key}.output[{row_of(i)}][{i - offsets[row_of(i)]}]"  # noqa: E731
        response = as_lengths(flat, name=name, field=path, line_of=lambda i: None)
        sample_idx = _within(counts, offsets)
    else:
        response = _int_list(outputs, name, f"{key}.output")
        counts = np.ones(len(outputs), np.int64)
        sample_idx = np.zeros(len(outputs), np.int64)
    n = int(counts.sum())
    return TableBatch(
        "samples",
        {
            "step": np.full(n, step, np.int32),
            "group_idx": np.repeat(np.arange(len(prompts), dtype=np.int32), counts),
            "sample_idx": sample_idx.astype(np.int32),
            "prompt_len": np.repeat(prompts, counts),
            "response_len": response,
        },
    )


def _compact_multi_turn(step: int, key: str, trajectories: list, name: str) -> Iterator[TableBatch]:
    ins, outs = [], []
    for j, traj in enumerate(trajectories):
        path = f"{key}[{j}]"
        if type(traj) is not dict:
            raise InputError(name, "expected an object with input and output", field=path)
        ins.append(_field(traj, "input", name, path))
        outs.append(_field(traj, "output", name, path))
    for j, (i_list, o_list) in enumerate(zip(ins, outs)):
        for label, values in (("input", i_list), ("output", o_list)):
            if type(values) is not list:
                raise InputError(name, "expected a list of integers", field=f"{key}[{j}].{label}")
        if len(i_list) != len(o_list):
            raise InputError(name, f"has {len(o_list)} turns but input has {len(i_list)}", field=f"{key}[{j}].output")
        if not i_list:
            raise InputError(name, "trajectory has no turns", field=f"{key}[{j}].input")
    counts = np.fromiter(map(len, ins), np.int64, len(ins))
    offsets = _offsets(counts)
    n = len(ins)

    def flat(lists: list, label: str) -> np.ndarray:
        row_of = lambda i: int(np.searchsorted(offsets, i, side="right") - 1)  # noqa: E731
        path = lambda i: f"{key}[{row_of(i)}].{label}[{i - offsets[row_of(i)]}]"  # noqa: E731
        values = list(chain.from_iterable(lists))
        arr = int_array(values)
        if arr is None:
            i, problem = int_problem(values)
            raise InputError(name, problem, field=path(i))
        return as_lengths(arr, name=name, field=path, line_of=lambda i: None)

    prompt_tokens, completion = flat(ins, "input"), flat(outs, "output")
    starts = offsets[:-1]
    response = np.add.reduceat(completion.astype(np.int64), starts) if n else np.empty(0, np.int64)
    response = as_lengths(response, name=name, field=lambda j: f"{key}[{j}].output", line_of=lambda i: None)
    group = np.arange(n, dtype=np.int32)
    yield TableBatch(
        "samples",
        {
            "step": np.full(n, step, np.int32),
            "group_idx": group,
            "sample_idx": np.zeros(n, np.int32),
            "prompt_len": prompt_tokens[starts] if n else np.empty(0, np.int32),
            "response_len": response,
            "num_turns": counts.astype(np.int32),
        },
    )
    total = int(offsets[-1])
    if total:
        yield TableBatch(
            "turns",
            {
                "step": np.full(total, step, np.int32),
                "group_idx": np.repeat(group, counts),
                "sample_idx": np.zeros(total, np.int32),
                "turn": _within(counts, offsets).astype(np.int32),
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
            },
        )


_COMPACT_HEAD = re.compile(rb'^\s*(?:\xef\xbb\xbf)?\s*\{\s*"\d+"\s*:')
_MULTITURN = "multiturn_workload_step_N.jsonl (PolyTrace multi-turn)"

FORMAT_SPECS = (
    FormatSpec(
        "polytrace-packed",
        read_packed_lengths,
        "``packed_lengths_step_N*.jsonl``; or a first line with input, output",
        names=(r"^packed_lengths_step_?\d+.*\.jsonl?$",),
        line=lambda obj: "input" in obj and type(obj.get("output")) is list,
        order=20,
        carries={
            "samples": "packed_lengths_step_N.jsonl (PolyTrace)",
            "samples.dp_rank": "packed_lengths_step_N.jsonl (PolyTrace, a dp_rank per prompt group)",
        },
        representation=1,
    ),
    FormatSpec(
        "polytrace-reward",
        read_reward_timings,
        "``reward_timings_step_N*.jsonl``; or a first line with reward_time_s",
        names=(r"^reward_timings_step_?\d+.*\.jsonl?$",),
        line=lambda obj: "reward_time_s" in obj,
        order=40,
        carries={"rank_timings": "reward_timings_step_N.jsonl (PolyTrace, reward_time_s per rank)"},
    ),
    FormatSpec(
        "polytrace-multiturn",
        read_multiturn_workload,
        "``multiturn_workload_step_N*.jsonl``; or a first line with turns and prompt_group_id",
        names=(r"^multiturn_workload_step_?\d+.*\.jsonl?$",),
        line=lambda obj: "turns" in obj and "prompt_group_id" in obj,
        order=45,
        carries={"samples": _MULTITURN, "turns": _MULTITURN, "tool_calls": _MULTITURN},
        representation=0,
    ),
    FormatSpec(
        "polytrace-compact",
        read_compact,
        'a JSON object whose first key is a step number (``{"0": ...``)',
        head=lambda head, name: bool(_COMPACT_HEAD.match(head)),
        order=40,
        carries={"samples": "a PolyTrace compact JSON"},
        representation=2,
    ),
)
