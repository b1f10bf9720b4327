"""AReaL's perf_tracer output: perf traces and session traces.

``perf_tracer/traces-r{rank}.jsonl`` (`read_areal_perf`): one Chrome Trace event per
line, as ``areal.utils.perf_tracer`` writes them (``name``, ``ph``, ``ts`` and ``dur``
in microseconds, ``pid``, ``tid``, ``cat``, ``args``). Duration events become
per-rank stage spans: complete events (``ph: "X"``) and begin/end pairs (``"B"`` /
``"E"``, matched per (pid, tid) as a stack, an ``E`` closing the innermost open
``B``); instants (``"i"``/``"I"``), metadata (``"M"``) and counters are skipped. A
span's step is its ``args.global_step`` (or ``args.step``); a span without one belongs
to the latest step seen before it on that rank (AReaL passes the step to the
top-level ``train.*`` scopes, the engine calls inside them carry none); spans before
any step are skipped with a note. The rank is the event's ``args.rank`` or ``rank``,
else the ``-r{rank}`` of the file name, else 0. Output: ``rank_timings`` rows
(step, rank, phase = the span name (its first 40 characters), seconds = the summed
durations of that name in that step on that rank).

``session_tracer/sessions-r{rank}.jsonl`` (`read_areal_sessions`): one record per
rollout session (sample) with ``task_id``, ``session_id``, ``rank``, ``status``,
``submit_ts``, ``finalized_ts``, ``total_s``, ``generate_s``, ``reward_s``,
``toolcall_s`` and ``phases`` (``{"generate": [{"start_ts", "end_ts"}], ...}``).
Output: ``samples`` with group_idx = the ordinal of (rank, task_id) in the upload
(a task is one prompt, its sessions that prompt's samples), sample_idx = the
session's ordinal within its task, rank, latency_s = ``generate_s`` (engine time),
num_turns = the number of ``generate`` phases, num_tool_calls = the number of
``toolcall`` phases, reward when the record has one; step, prompt_len, response_len
from ``step`` / ``global_step`` / ``version``, ``prompt_len`` / ``input_len`` and
``response_len`` / ``output_len`` when present, else 0 (AReaL's records carry no
token counts: length analyses then have nothing to show). Each ``generate`` phase is
a ``turns`` row (engine_latency_s) and each ``toolcall`` phase a ``tool_calls`` row
(latency_s, status = the session's status).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal, overload

import numpy as np

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.jsonl import INT32_MAX, iter_json_chunks, stdlib_json
from backend.formats.spec import FormatSpec

_RANK_IN_NAME = re.compile(r"-r(\d+)\.jsonl?(?:\.gz)?$")
PHASE_MAX = 40
_STEP_ARGS = ("global_step", "step")
_DURATION = {"X", "B", "E"}


def _rank_of_name(name: str) -> int:
    m = _RANK_IN_NAME.search(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else 0


@overload
def _number(row: dict, key: str, name: str, line: int, required: Literal[True] = True) -> float: ...
@overload
def _number(row: dict, key: str, name: str, line: int, required: bool) -> float | None: ...
def _number(row: dict, key: str, name: str, line: int, required: bool = True) -> float | None:
    value = row.get(key)
    if value is None:
        if required:
            raise InputError(name, "missing required field", line, key)
        return None
    if type(value) not in (int, float) or value != value:
        raise InputError(name, f"expected a number, got {value!r:.40}", line, key)
    return float(value)


def _int(value, name: str, line: int, key: str) -> int:
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or not 0 <= value <= INT32_MAX:
        raise InputError(name, f"expected an integer in 0..{INT32_MAX}, got {value!r:.40}", line, key)
    return value


def _step_of(args, name: str, line: int) -> int | None:
    if type(args) is not dict:
        return None
    for key in _STEP_ARGS:
        if key in args and args[key] is not None:
            return _int(args[key], name, line, f"args.{key}")
    return None


def read_areal_perf(source: Source, result: ReadResult) -> Iterator[TableBatch]:  # noqa: C901 -- one pass over trace events: each branch refuses a field by name
    """AReaL perf traces -> ``rank_timings`` (seconds per step, rank and span name)."""
    name = source.name
    file_rank = _rank_of_name(name)
    totals: dict[tuple[int, int, str], float] = {}
    last_step: dict[int, int] = {}
    open_spans: dict[tuple, list[tuple[str, float, int | None]]] = {}
    before_any_step = 0

    def add(rank: int, step: int | None, phase: str, seconds: float) -> None:
        nonlocal before_any_step
        if step is None:
            step = last_step.get(rank)
            if step is None:
                before_any_step += 1
                return
        else:
            last_step[rank] = step
        key = (step, rank, phase[:PHASE_MAX])
        totals[key] = totals.get(key, 0.0) + seconds

    for chunk in iter_json_chunks(source, fallback=stdlib_json):
        for i, ev in enumerate(chunk.rows):
            line = chunk.line(i)
            if type(ev) is not dict:
                raise InputError(name, "expected a JSON object (one trace event per line)", line)
            ph = ev.get("ph")
            if ph not in _DURATION:
                if ph is None:
                    raise InputError(name, "missing required field", line, "ph")
                continue
            args = ev.get("args")
            rank = ev.get("rank", args.get("rank") if type(args) is dict else None)
            rank = file_rank if rank is None else _int(rank, name, line, "rank")
            ts = _number(ev, "ts", name, line)
            step = _step_of(args, name, line)
            if ph == "X":
                dur = _number(ev, "dur", name, line)
                if dur < 0:
                    raise InputError(name, f"negative duration {dur}", line, "dur")
                add(rank, step, str(ev.get("name", "")), dur / 1e6)
            elif ph == "B":
                open_spans.setdefault((rank, ev.get("pid"), ev.get("tid")), []).append(
                    (str(ev.get("name", "")), ts, step)
                )
            else:
                stack = open_spans.get((rank, ev.get("pid"), ev.get("tid")))
                if not stack:
                    raise InputError(name, "an end event ('E') without an open begin event ('B')", line, "ph")
                span, start, begin_step = stack.pop()
                if ts < start:
                    raise InputError(name, f"span '{span}' ends before it begins", line, "ts")
                add(rank, begin_step if begin_step is not None else step, span, (ts - start) / 1e6)
    if before_any_step:
        result.skipped.append(f"{name}: {before_any_step} spans before the first step argument were not counted")
    unclosed = sum(len(s) for s in open_spans.values())
    if unclosed:
        result.skipped.append(f"{name}: {unclosed} begin events ('B') never ended were not counted")
    result.info.framework = result.info.framework or "areal"
    if not totals:
        return
    keys = sorted(totals)
    yield TableBatch(
        "rank_timings",
        {
            "step": np.fromiter((k[0] for k in keys), np.int32, len(keys)),
            "rank": np.fromiter((k[1] for k in keys), np.int32, len(keys)),
            "phase": [k[2] for k in keys],
            "seconds": np.fromiter((totals[k] for k in keys), np.float64, len(keys)),
        },
    )


_STEP_KEYS = ("step", "global_step", "version")
_PROMPT_KEYS = ("prompt_len", "input_len")
_RESPONSE_KEYS = ("response_len", "output_len")


def _first(row: dict, keys: tuple[str, ...]) -> tuple[str, object] | None:
    for key in keys:
        if row.get(key) is not None:
            return key, row[key]
    return None


def _phase_spans(phases, kind: str, name: str, line: int) -> list[float]:
    spans = phases.get(kind) or []
    if type(spans) is not list:
        raise InputError(name, "expected a list of spans", line, f"phases.{kind}")
    out = []
    for j, span in enumerate(spans):
        where = f"phases.{kind}[{j}]"
        if type(span) is not dict:
            raise InputError(name, "expected a span object", line, where)
        start = _number(span, "start_ts", name, line, required=False)
        end = _number(span, "end_ts", name, line, required=False)
        out.append(end - start if start is not None and end is not None else float("nan"))
    return out


def read_areal_sessions(source: Source, result: ReadResult) -> Iterator[TableBatch]:  # noqa: C901 -- one pass over session rows: each branch refuses a field by name
    """AReaL session traces -> ``samples`` (latencies, turns, tool calls), per block."""
    name = source.name
    file_rank = _rank_of_name(name)
    groups: dict[tuple[int, int], list[int]] = result.state.setdefault("areal_groups", {})
    for chunk in iter_json_chunks(source, fallback=stdlib_json):
        s: dict[str, list] = {k: [] for k in ("step", "group_idx", "sample_idx", "rank", "prompt_len", "response_len")}
        s.update(latency_s=[], num_turns=[], num_tool_calls=[], reward=[])
        turns: dict[str, list] = {k: [] for k in ("step", "group_idx", "sample_idx", "turn", "engine_latency_s")}
        calls: dict[str, list] = {k: [] for k in ("step", "group_idx", "sample_idx", "call_idx", "latency_s", "status")}
        for i, row in enumerate(chunk.rows):
            line = chunk.line(i)
            if type(row) is not dict:
                raise InputError(name, "expected a JSON object (one session per line)", line)
            for key in ("task_id", "session_id"):
                if key not in row:
                    raise InputError(name, "missing required field", line, key)
            task = _int(row["task_id"], name, line, "task_id")
            _int(row["session_id"], name, line, "session_id")
            rank = file_rank if row.get("rank") is None else _int(row["rank"], name, line, "rank")
            found = _first(row, _STEP_KEYS)
            step = _int(found[1], name, line, found[0]) if found else 0
            slot = groups.get((rank, task))
            if slot is None:
                slot = groups[(rank, task)] = [len(groups), 0]
            group, sample = slot[0], slot[1]
            slot[1] += 1
            prompt = _first(row, _PROMPT_KEYS)
            response = _first(row, _RESPONSE_KEYS)
            phases = row.get("phases") or {}
            if type(phases) is not dict:
                raise InputError(name, "expected an object of phases", line, "phases")
            gen = _phase_spans(phases, "generate", name, line)
            tools = _phase_spans(phases, "toolcall", name, line)
            generate_s = _number(row, "generate_s", name, line, required=False)
            reward = _number(row, "reward", name, line, required=False)
            s["step"].append(step)
            s["group_idx"].append(group)
            s["sample_idx"].append(sample)
            s["rank"].append(rank)
            s["prompt_len"].append(_int(prompt[1], name, line, prompt[0]) if prompt else 0)
            s["response_len"].append(_int(response[1], name, line, response[0]) if response else 0)
            s["latency_s"].append(np.nan if generate_s is None else generate_s)
            s["num_turns"].append(len(gen))
            s["num_tool_calls"].append(len(tools))
            s["reward"].append(np.nan if reward is None else reward)
            for t, seconds in enumerate(gen):
                for key, v in zip(turns, (step, group, sample, t, seconds)):
                    turns[key].append(v)
            status = str(row.get("status") or "")
            for c, seconds in enumerate(tools):
                for key, value in zip(calls, (step, group, sample, c, seconds, status)):
                    calls[key].append(value)
        if not s["step"]:
            continue
        ints = ("step", "group_idx", "sample_idx", "rank", "prompt_len", "response_len", "num_turns", "num_tool_calls")
        cols: dict[str, np.ndarray | list] = {
            k: np.asarray(v, dtype=np.int32 if k in ints else np.float64) for k, v in s.items()
        }
        if np.isnan(cols["reward"]).all():
            del cols["reward"]
        yield TableBatch("samples", cols)
        if turns["step"]:
            yield TableBatch(
                "turns",
                {k: np.asarray(v, dtype=np.float64 if k == "engine_latency_s" else np.int32) for k, v in turns.items()},
            )
        if calls["step"]:
            out: dict[str, np.ndarray | list] = {
                k: np.asarray(v, dtype=np.float64 if k == "latency_s" else np.int32)
                for k, v in calls.items()
                if k != "status"
            }
            out["status"] = calls["status"]
            yield TableBatch("tool_calls", out)
    result.info.framework = result.info.framework or "areal"


_SESSIONS = "AReaL sessions-rN.jsonl"

FORMAT_SPECS = (
    FormatSpec(
        "areal-perf",
        read_areal_perf,
        "``traces-rN.jsonl``; or a first line with ph, ts and name (a Chrome trace event)",
        names=(r"^traces-r\d+\.jsonl?$",),
        line=lambda obj: "ph" in obj and "ts" in obj and "name" in obj,
        order=60,
    ),
    FormatSpec(
        "areal-sessions",
        read_areal_sessions,
        "``sessions-rN.jsonl``; or a first line with task_id and session_id",
        names=(r"^sessions-r\d+\.jsonl?$",),
        line=lambda obj: "task_id" in obj and "session_id" in obj,
        order=70,
        carries={"samples.reward": f"{_SESSIONS} with reward", "turns": _SESSIONS, "tool_calls": _SESSIONS},
    ),
)
