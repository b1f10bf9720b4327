"""The analysis registry (core/analysis/registry.py) as the worker uses it: every spec runs
on a trace that has its tables, reads exactly the columns it names, and is applicable only
when its required columns exist."""

from __future__ import annotations

import itertools
import json
from dataclasses import MISSING, fields

import numpy as np
import pytest

from core.analysis.registry import ANALYSES, resolve_params, run_analysis
from core.analysis.tables import TABLE_CLASSES, TraceData
from tests.helpers import SYNTHETIC_GPU_NAMES as GPU_NAMES
from tests.helpers import SYNTHETIC_MAX_RESPONSE_LEN as MAX_RESPONSE_LEN
from tests.helpers import synthetic_trace_tables

FULL = synthetic_trace_tables()


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
PARAM_VARIANTS = {
    "longtail": [{"engine_key": "rank"}],
    "lengths": [{"groups": "used"}],
    "imbalance": [{"groups": "used"}],
}


def contexts(kind: str):
    """(tables, params, max_response_len) settings to run `kind` under: the defaults, no
    known response cap, the parameter variants, and each of its tables (or pairs of them)
    left out (for columns read only as a fallback when other tables are absent)."""
    spec = ANALYSES[kind]
    yield FULL, {}, MAX_RESPONSE_LEN
    yield FULL, {}, None
    for params in PARAM_VARIANTS.get(kind, []):
        yield FULL, params, MAX_RESPONSE_LEN
    for size in (1, 2):
        if len(spec.tables) > size:
            for dropped in itertools.combinations(spec.tables, size):
                yield {t: cols for t, cols in FULL.items() if t not in dropped}, {}, MAX_RESPONSE_LEN


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
