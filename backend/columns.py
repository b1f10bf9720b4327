"""Read columns of one trace's bulk tables back as numpy arrays, fast.

Postgres: `COPY (SELECT ...) TO STDOUT (FORMAT BINARY)` decoded by numpy in one pass
(NULLs are coalesced to sentinels in SQL so every row has the same layout).
SQLite: a plain SELECT. Integer NULLs read as -1, float NULLs as NaN, text as lists.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import text
from sqlalchemy.engine import Connection

from backend.ingest.bulk import _binary_dtype, table_of

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
    dtypes = [_binary_dtype(table.c[n].type) for n in columns]
    if conn.dialect.name == "postgresql" and all(dt is not None for dt in dtypes):
        return _read_pg_binary(conn, table_name, columns, dtypes, where, order, params)
    cols_sql = ", ".join(f'"{n}"' for n in columns)
    rows = conn.execute(text(f'SELECT {cols_sql} FROM "{table_name}" WHERE {where}{order}'), params).fetchall()
    out: dict[str, np.ndarray | list] = {}
    for i, (name, dt) in enumerate(zip(columns, dtypes)):
        values = [r[i] for r in rows]
        if dt is None:
            out[name] = values
        elif dt.kind == "f":
            out[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        elif dt.kind == "b":
            out[name] = np.array([bool(v) if v is not None else False for v in values], dtype=bool)
        else:
            out[name] = np.array([-1 if v is None else v for v in values], dtype=dt.newbyteorder("="))
    return out


def _read_pg_binary(conn, table_name, columns, dtypes, where, order, params) -> dict:  # noqa: ANN001
    table = table_of(table_name)
    exprs = []
    for name, dt in zip(columns, dtypes):
        if table.c[name].nullable:
            sentinel = "'NaN'::float8" if dt.kind == "f" else ("false" if dt.kind == "b" else "-1")
            exprs.append(f'COALESCE("{name}", {sentinel})')
        else:
            exprs.append(f'"{name}"')
    sql = f'COPY (SELECT {", ".join(exprs)} FROM "{table_name}" WHERE {where}{order}) TO STDOUT (FORMAT BINARY)'
    literal = sql
    for key, value in params.items():
        literal = literal.replace(f":{key}", str(int(value)))
    cursor = conn.connection.driver_connection.cursor()
    buf = bytearray()
    with cursor.copy(literal) as cp:
        for chunk in cp:
            buf += chunk
    fields = [("n", ">i2")]
    for i, dt in enumerate(dtypes):
        fields += [(f"l{i}", ">i4"), (f"v{i}", dt)]
    record = np.dtype(fields)
    body = memoryview(buf)[_PG_HEADER_LEN : len(buf) - 2]
    n_rows = len(body) // record.itemsize
    rec = np.frombuffer(body, dtype=record, count=n_rows)
    return {name: rec[f"v{i}"].astype(dt.newbyteorder("=")) for i, (name, dt) in enumerate(zip(columns, dtypes))}
