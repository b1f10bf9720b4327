"""The analysis registry (core/analysis/registry.py) as the worker uses it: every spec runs
on a trace that has its tables, reads exactly the columns it names, and is applicable only
when its required columns exist."""

from __future__ import annotations

import json
from dataclasses import MISSING, fields

import numpy as np
import pytest

from core.analysis.gpu_kinds import GpuKind
from core.analysis.registry import ANALYSES, resolve_params, run_analysis
from core.analysis.tables import TABLE_CLASSES, TraceData

MAX_RESPONSE_LEN = 600
GPU_NAMES = ["gemm_kernel", "ncclDevKernel_AllReduce", "Memcpy HtoD", "softmax_kernel"]


def full_tables(seed: int = 3) -> dict[str, dict[str, np.ndarray]]:
    """A small trace with every table and every column the readers can produce: 4 steps
    (the last one validation), 4 prompt groups of 4 samples on 2 DP ranks (2 TP each),
    2 tasks, multi-turn trajectories with tool calls, per-rank reward timings, stage
    timings and two ranks of GPU events."""
    rng = np.random.default_rng(seed)
    s: dict[str, list] = {k: [] for k in ("step", "group_idx", "sample_idx", "prompt_len", "response_len")}
    for k in ("dp_rank", "rank", "tp_rank", "task_id", "validate", "truncated", "num_turns", "num_tool_calls"):
        s[k] = []
    s["latency_s"] = []
    t: dict[str, list] = {
        k: []
        for k in (
            "step",
            "group_idx",
            "sample_idx",
            "turn",
            "prompt_tokens",
            "cached_tokens",
            "completion_tokens",
            "engine_latency_s",
            "tool_call_count",
            "finish_reason",
        )
    }
    c: dict[str, list] = {
        k: []
        for k in (
            "step",
            "group_idx",
            "sample_idx",
            "latency_s",
            "tool_name",
            "call_idx",
            "turn",
            "response_tokens",
            "status",
        )
    }
    for step in range(4):
        for g in range(4):
            prompt = int(rng.integers(20, 200))
            dp = g % 2
            for i in range(4):
                n_turns = int(rng.integers(1, 4))
                context, response, n_calls, latency = prompt, 0, 0, 0.0
                for turn in range(n_turns):
                    out = int(rng.integers(5, 150))
                    calls = int(rng.integers(1, 3)) if turn < n_turns - 1 else 0
                    lat = float(rng.uniform(0.05, 2.0))
                    t["step"].append(step)
                    t["group_idx"].append(g)
                    t["sample_idx"].append(i)
                    t["turn"].append(turn)
                    t["prompt_tokens"].append(context)
                    t["cached_tokens"].append(int(context * rng.uniform(0.2, 0.9)) if turn else 0)
                    t["completion_tokens"].append(out)
                    t["engine_latency_s"].append(lat)
                    t["tool_call_count"].append(calls)
                    t["finish_reason"].append("tool_calls" if calls else "stop")
                    context += out
                    response += out
                    latency += lat
                    for k in range(calls):
                        tool = float(rng.uniform(0.1, 3.0))
                        tokens = int(rng.integers(3, 40))
                        c["step"].append(step)
                        c["group_idx"].append(g)
                        c["sample_idx"].append(i)
                        c["latency_s"].append(tool)
                        c["tool_name"].append(("search", "python")[k % 2])
                        c["call_idx"].append(n_calls)
                        c["turn"].append(turn)
                        c["response_tokens"].append(tokens)
                        c["status"].append("success" if rng.random() < 0.8 else "error")
                        context += tokens
                        response += tokens
                        latency += tool
                        n_calls += 1
                response = min(response, MAX_RESPONSE_LEN)
                s["step"].append(step)
                s["group_idx"].append(g)
                s["sample_idx"].append(i)
                s["prompt_len"].append(prompt)
                s["response_len"].append(response)
                s["dp_rank"].append(dp)
                s["rank"].append(2 * dp + i % 2)
                s["tp_rank"].append(i % 2)
                s["task_id"].append(g % 2)
                s["validate"].append(step == 3)
                s["truncated"].append(response >= MAX_RESPONSE_LEN)
                s["num_turns"].append(n_turns)
                s["num_tool_calls"].append(n_calls)
                s["latency_s"].append(latency)
    r: dict[str, list] = {
        k: [] for k in ("step", "rank", "phase", "seconds", "dp_rank", "tp_rank", "batch_size", "validate")
    }
    for step in range(4):
        for rank in range(4):
            for phase in ("reward", "old_log_prob"):
                r["step"].append(step)
                r["rank"].append(rank)
                r["phase"].append(phase)
                r["seconds"].append(float(rng.uniform(0.5, 4.0)))
                r["dp_rank"].append(rank // 2)
                r["tp_rank"].append(rank % 2)
                r["batch_size"].append(8)
                r["validate"].append(step == 3)
    timing = ("t_gen", "t_reward", "t_old_log_prob", "t_ref", "t_adv", "t_update_actor", "t_step")
    steps = {"step": np.arange(4), "validate": np.arange(4) == 3}
    steps.update({k: rng.uniform(1.0, 30.0, 4) for k in timing})
    e: dict[str, list] = {
        k: [] for k in ("rank", "stream", "step", "kind", "name_id", "start_us", "dur_us", "launch_us")
    }
    kinds = [GpuKind.COMPUTE, GpuKind.COMMUNICATION, GpuKind.MEMORY, GpuKind.COMPUTE]
    for rank in range(2):
        clock = 1000.0 * rank
        for step in range(3):
            for _ in range(12):
                name_id = int(rng.integers(0, len(GPU_NAMES)))
                dur = float(rng.uniform(5, 80)) * (1.5 if rank else 1.0)
                e["rank"].append(rank)
                e["stream"].append(7 if kinds[name_id] != GpuKind.COMMUNICATION else 13)
                e["step"].append(step)
                e["kind"].append(int(kinds[name_id]))
                e["name_id"].append(name_id)
                e["start_us"].append(clock)
                e["dur_us"].append(dur)
                e["launch_us"].append(clock - float(rng.uniform(1, 20)))
                clock += dur + float(rng.uniform(0, 30))
    return {
        "samples": {k: np.asarray(v) for k, v in s.items()},
        "turns": {k: np.asarray(v) for k, v in t.items()},
        "tool_calls": {k: np.asarray(v) for k, v in c.items()},
        "rank_timings": {k: np.asarray(v) for k, v in r.items()},
        "steps": steps,
        "gpu_events": {k: np.asarray(v) for k, v in e.items()},
    }


FULL = full_tables()


def trace(tables: dict[str, dict[str, np.ndarray]], max_response_len: int | None = MAX_RESPONSE_LEN) -> TraceData:
    """As the worker builds it: the tables plus the trace-level facts."""
    return TraceData.from_tables(
        tables, max_response_len=max_response_len, task_names={0: "math", 1: "code"}, gpu_names=GPU_NAMES
    )


def only(tables: dict, wanted: dict[str, tuple[str, ...]]) -> dict:
    """The tables and columns `wanted` names (what the worker reads for a spec)."""
    return {
        name: {c: tables[name][c] for c in cols if c in tables[name]} for name, cols in wanted.items() if name in tables
    }


def available(tables: dict) -> dict[str, set[str]]:
    return {name: set(cols) for name, cols in tables.items()}


def table_required(table: str) -> tuple[str, ...]:
    """The columns without which the table cannot be built at all."""
    return tuple(f.name for f in fields(TABLE_CLASSES[table]) if f.default is MISSING)


def options(kind: str) -> list[dict[str, tuple[str, ...]]]:
    """The ways a trace can satisfy `kind`, each as the least it must have: the option's
    columns plus what its tables need to exist."""
    spec = ANALYSES[kind]
    return [
        {t: tuple(dict.fromkeys(table_required(t) + cols)) for t, cols in option.items()}
        for option in (spec.any_of or (spec.required,))
    ]


def without(tables: dict, table: str, column: str) -> dict:
    return {t: {c: v for c, v in cols.items() if (t, c) != (table, column)} for t, cols in tables.items()}


# --------------------------------------------------------------------------- every spec runs


@pytest.mark.parametrize("kind", list(ANALYSES))
def test_every_analysis_runs_on_the_columns_it_names(kind):
    spec = ANALYSES[kind]
    tables = only(FULL, spec.tables)
    assert spec.applicable(available(tables))
    result = run_analysis(kind, trace(tables))
    assert result["params"] == resolve_params(kind)
    assert json.loads(json.dumps(result, allow_nan=False)) == result  # plain JSON, as stored
    assert set(result) - {"params", "kind"}, "a result with nothing in it"


APPLICABLE_RUNS = [
    pytest.param(
        kind,
        i,
        marks=[
            pytest.mark.xfail(
                raises=KeyError,
                strict=True,
                reason="registry: gpu_timeline's `required` (rank, stream, start_us, dur_us) is applicable to "
                "events without step/kind/name_id/launch_us, which gpu_report then indexes (KeyError)",
            )
        ]
        if kind == "gpu_timeline"
        else [],
        id=f"{kind}-{i}",
    )
    for kind in ANALYSES
    for i in range(len(options(kind)))
]


@pytest.mark.parametrize("kind, i", APPLICABLE_RUNS)
def test_every_analysis_runs_on_the_least_trace_it_is_applicable_to(kind, i):
    """`applicable` is the promise the worker queues on: the run must then succeed."""
    tables = only(FULL, options(kind)[i])
    assert ANALYSES[kind].applicable(available(tables))
    result = run_analysis(kind, trace(tables))
    json.dumps(result, allow_nan=False)
    assert result["params"] == resolve_params(kind)


@pytest.mark.parametrize(
    "kind, i, table, column",
    [
        (k, i, t, c)
        for k, spec in ANALYSES.items()
        for i, option in enumerate(spec.any_of or (spec.required,))
        for t, cols in option.items()
        for c in cols
    ],
)
def test_not_applicable_when_a_required_column_is_missing(kind, i, table, column):
    spec = ANALYSES[kind]
    least = available(only(FULL, options(kind)[i]))
    assert spec.applicable(least)
    least[table].discard(column)
    assert not spec.applicable(least)
    assert f"{table}.{column}" in spec.missing(least)
    assert not spec.applicable({t: cols for t, cols in least.items() if t != table})


# --------------------------------------------------------------------------- spec.tables is what run reads

# parameters under which a column only some settings read is read
PARAM_VARIANTS = {"longtail": [{"engine_key": "rank"}]}


def contexts(kind: str):
    """(tables, params, max_response_len) settings to run `kind` under: the defaults, no
    known response cap, the parameter variants, and each of its tables left out (for
    columns read only as a fallback when another table is absent)."""
    spec = ANALYSES[kind]
    yield FULL, {}, MAX_RESPONSE_LEN
    yield FULL, {}, None
    for params in PARAM_VARIANTS.get(kind, []):
        yield FULL, params, MAX_RESPONSE_LEN
    if len(spec.tables) > 1:
        for table in spec.tables:
            yield {t: cols for t, cols in FULL.items() if t != table}, {}, MAX_RESPONSE_LEN


@pytest.mark.parametrize("kind", list(ANALYSES))
def test_spec_tables_are_enough(kind):
    """The worker reads only `spec.tables`: the result is the one on a trace with every
    column of every table."""
    spec = ANALYSES[kind]
    for tables, params, cap in contexts(kind):
        if not spec.applicable(available(only(tables, spec.tables))):
            continue
        assert run_analysis(kind, trace(only(tables, spec.tables), cap), params) == run_analysis(
            kind, trace(tables, cap), params
        ), (kind, params, cap, sorted(tables))


NAMED_OPTIONAL = [
    pytest.param(
        kind,
        table,
        column,
        marks=[
            pytest.mark.xfail(
                strict=True, reason="registry: latency reads rank_timings.dp_rank, which analyze_latency never uses"
            )
        ]
        if (kind, table, column) == ("latency", "rank_timings", "dp_rank")
        else [],
        id=f"{kind}-{table}.{column}",
    )
    for kind, spec in ANALYSES.items()
    for table, cols in spec.tables.items()
    for column in cols
    if column not in table_required(table)
]


@pytest.mark.parametrize("kind, table, column", NAMED_OPTIONAL)
def test_every_column_spec_tables_names_is_read(kind, table, column):
    """Each optional column `spec.tables` names changes the result (or is needed for it)
    in at least one setting: the worker reads nothing the analysis ignores."""
    spec = ANALYSES[kind]
    for tables, params, cap in contexts(kind):
        named = only(tables, spec.tables)
        if table not in named or not spec.applicable(available(named)):
            continue
        whole = run_analysis(kind, trace(named, cap), params)
        try:
            less = run_analysis(kind, trace(without(named, table, column), cap), params)
        except (KeyError, ValueError):
            return  # needed
        if less != whole:
            return
    pytest.fail(f"{kind} never reads {table}.{column}")
