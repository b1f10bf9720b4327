"""Read columns of one trace's bulk tables back as numpy arrays, fast.

Postgres: `COPY (SELECT ...) TO STDOUT (FORMAT BINARY)` decoded by numpy (NULLs are
coalesced to sentinels in SQL so every row has the same layout). Reads ordered by a key
that starts with `step` (the analyses' reads) come one row per step: each column is
packed server-side with `string_agg(<type>send(col), '')` over the ordered rows, so the
client handles a few hundred messages of packed big-endian values instead of one message
per row (per-row messages cost the client about as much CPU as the server's whole scan).
The order is checked on arrival and restored with a stable sort if the server did not
keep it. Other reads take one COPY message per row, decoded as one record array.
SQLite: a plain SELECT. Integer NULLs read as -1, float NULLs as NaN, text as lists.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import text
from sqlalchemy.engine import Connection

from backend.store.copy_types import binary_dtype, fixed_dtype, table_of

_PG_HEADER_LEN = 19  # signature (11) + flags (4) + header extension length (4, = 0)


def read_columns(
    conn: Connection,
    table_name: str,
    trace_id: int,
    columns: list[str],
    *,
    step_range: tuple[int, int] | None = None,
    order_by: str | None = None,
) -> dict[str, np.ndarray | list]:
    """Columns of `table_name` for one trace (optionally steps in [lo, hi))."""
    table = table_of(table_name)
    where = "trace_id = :trace_id"
    params: dict = {"trace_id": trace_id}
    if step_range is not None:
        where += " AND step >= :lo AND step < :hi"
        params.update(lo=step_range[0], hi=step_range[1])
    order = f" ORDER BY {order_by}" if order_by else ""
    dtypes = [binary_dtype(table.c[n].type) for n in columns]
    if conn.dialect.name == "postgresql" and all(dt is not None for dt in dtypes):
        keys = [k.strip() for k in order_by.split(",")] if order_by else []
        if keys and keys[0] == "step" and all(k in table.c for k in keys):
            return _read_pg_per_step(conn, table_name, columns, keys, where, params)
        return _read_pg_binary(conn, table_name, columns, dtypes, where, order, params)
    cols_sql = ", ".join(f'"{n}"' for n in columns)
    sql = f'SELECT {cols_sql} FROM "{table_name}" WHERE {where}{order}'
    if conn.dialect.name == "sqlite":
        # the driver's own cursor (it takes :name parameters): plain tuples, without a
        # result Row object per row (half the read of a million GPU events)
        cursor = conn.connection.driver_connection.execute(sql, params)  # type: ignore[union-attr]
    else:
        cursor = conn.execute(text(sql), params)
    # Rows as Python tuples cost ~20x their values: a bounded number at a time.
    parts = [_rows_to_columns(rows, columns, dtypes) for rows in iter(lambda: cursor.fetchmany(FETCH_ROWS), [])]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return _rows_to_columns([], columns, dtypes)
    return {
        name: (np.concatenate([p[name] for p in parts]) if dt is not None else [v for p in parts for v in p[name]])
        for name, dt in zip(columns, dtypes)
    }


FETCH_ROWS = 250_000


def _rows_to_columns(rows: list, columns: list[str], dtypes: list) -> dict[str, np.ndarray | list]:
    if rows and all(dt is not None for dt in dtypes):
        try:  # numbers only: one structured array built in C (float NULLs -> NaN, bool -> False)
            record = np.array(rows, dtype=[(f"c{i}", _native(dt)) for i, dt in enumerate(dtypes)])
            return {name: np.ascontiguousarray(record[f"c{i}"]) for i, name in enumerate(columns)}
        except TypeError:
            pass  # an integer NULL: column by column below
    by_column = list(zip(*rows)) if rows else [() for _ in columns]
    return {name: _column(values, dt) for name, dt, values in zip(columns, dtypes, by_column)}


def _native(dt: np.dtype) -> np.dtype:
    return np.dtype(bool) if dt.kind == "b" else dt.newbyteorder("=")


def _column(values: tuple, dt: np.dtype | None) -> np.ndarray | list:
    """One column's values as an array: integer NULLs -1, float NULLs NaN, bool NULLs False."""
    if dt is None:
        return list(values)
    if dt.kind == "f":
        return np.array(values, dtype=np.float64)  # None -> NaN
    if None in values:
        values = tuple((False if dt.kind == "b" else -1) if v is None else v for v in values)
    return np.array(values, dtype=_native(dt))


def _value_expr(table, name: str, dt: np.dtype) -> str:
    if not table.c[name].nullable:
        return f'"{name}"'
    # typed sentinels: COALESCE(smallint, -1) would widen to integer and break the layout
    if dt.kind in "fb":
        sentinel = "'NaN'::float8" if dt.kind == "f" else "false"
    else:
        sentinel = f"(-1)::{_PG_INT[dt.itemsize]}"
    return f'COALESCE("{name}", {sentinel})'


_PG_INT = {2: "smallint", 4: "integer", 8: "bigint"}


def _copy_out(conn, sql: str, params: dict) -> bytearray:
    for key, value in params.items():
        sql = sql.replace(f":{key}", str(int(value)))
    cursor = conn.connection.driver_connection.cursor()
    buf = bytearray()
    with cursor.copy(sql) as cp:
        for chunk in cp:
            buf += chunk
    return buf


# the `send` function giving each column type's binary form (the same bytes COPY sends)
_SEND = {">i8": "int8send", ">i2": "int2send", ">i4": "int4send", ">f8": "float8send", "|b1": "boolsend"}


def _read_pg_per_step(conn, table_name, columns, keys, where, params) -> dict:
    table = table_of(table_name)
    wanted = list(dict.fromkeys(list(columns) + keys))  # the key columns too, to check the order
    dtypes = [fixed_dtype(table.c[n].type) for n in wanted]
    inner = ", ".join(f"{_value_expr(table, n, dt)} AS c{i}" for i, (n, dt) in enumerate(zip(wanted, dtypes)))
    aggs = ", ".join(f"string_agg({_SEND[dt.str]}(c{i}), ''::bytea)" for i, dt in enumerate(dtypes))
    # The sorted subquery feeds each step's aggregates its rows in key order.
    sql = (
        f'COPY (SELECT {aggs} FROM (SELECT "step" AS g, {inner} FROM "{table_name}" WHERE {where}'
        f" ORDER BY {', '.join(keys)}) AS r GROUP BY g ORDER BY g) TO STDOUT (FORMAT BINARY)"
    )
    buf = _copy_out(conn, sql, params)
    pieces: list[list[tuple[int, int]]] = [[] for _ in wanted]
    view = memoryview(buf)
    pos, end = _PG_HEADER_LEN, len(buf) - 2  # header, then rows, then the int16 -1 trailer
    while pos < end:
        n_fields = int.from_bytes(view[pos : pos + 2], "big", signed=True)
        pos += 2
        for i in range(n_fields):
            size = int.from_bytes(view[pos : pos + 4], "big", signed=True)
            pos += 4
            pieces[i].append((pos, size))
            pos += size
    out = {}
    for name, dt, spans in zip(wanted, dtypes, pieces):
        col = np.empty(sum(size for _, size in spans) // dt.itemsize, dtype=dt.newbyteorder("="))
        at = 0
        for start, size in spans:
            part = np.frombuffer(view[start : start + size], dtype=dt)
            col[at : at + len(part)] = part  # byte swap while copying
            at += len(part)
        out[name] = col
    del view
    _restore_order(out, keys)
    return {name: out[name] for name in columns}


def _restore_order(cols: dict[str, np.ndarray], keys: list[str]) -> None:
    """Stable-sort the columns by `keys` in place if they are not in that order."""
    if len(cols[keys[0]]) < 2:
        return
    bad = np.zeros(len(cols[keys[0]]) - 1, dtype=bool)
    tie = np.ones_like(bad)
    for k in keys:
        c = cols[k]
        bad |= tie & (c[1:] < c[:-1])
        tie &= c[1:] == c[:-1]
    if bad.any():
        order = np.lexsort([cols[k] for k in reversed(keys)])
        for name in cols:
            cols[name] = cols[name][order]


def _read_pg_binary(conn, table_name, columns, dtypes, where, order, params) -> dict:
    table = table_of(table_name)
    exprs = [_value_expr(table, name, dt) for name, dt in zip(columns, dtypes)]
    sql = f'COPY (SELECT {", ".join(exprs)} FROM "{table_name}" WHERE {where}{order}) TO STDOUT (FORMAT BINARY)'
    buf = _copy_out(conn, sql, params)
    fields = [("n", ">i2")]
    for i, dt in enumerate(dtypes):
        fields += [(f"l{i}", ">i4"), (f"v{i}", dt)]
    record = np.dtype(fields)
    body = memoryview(buf)[_PG_HEADER_LEN : len(buf) - 2]
    n_rows = len(body) // record.itemsize
    rec = np.frombuffer(body, dtype=record, count=n_rows)
    return {name: rec[f"v{i}"].astype(dt.newbyteorder("=")) for i, (name, dt) in enumerate(zip(columns, dtypes))}
