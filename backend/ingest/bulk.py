"""Bulk writers: column arrays -> table rows, without an ORM object per row.

Postgres: binary COPY, encoded with numpy in one vectorised pass (rows are grouped by
their NULL pattern, since a NULL field has no payload and changes the row layout).
Batches with text columns use psycopg's row-wise COPY. SQLite: executemany.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import psycopg
from sqlalchemy import Table
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from backend.store.copy_types import binary_dtype, fixed_dtype, table_of

_PG_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
_PG_TRAILER = (-1).to_bytes(2, "big", signed=True)


def _null_mask(values: np.ndarray) -> np.ndarray | None:
    if values.dtype.kind == "f":
        mask = np.isnan(values)
        return mask if mask.any() else None
    return None


def encode_pg_rows(table: Table, columns: dict[str, np.ndarray]) -> bytes:
    """Equal-length numpy columns as the rows of a PostgreSQL binary COPY stream (the
    header goes before them, the trailer after)."""
    names = list(columns)
    dtypes = [fixed_dtype(table.c[n].type) for n in names]
    n_rows = len(columns[names[0]])
    masks = [_null_mask(np.asarray(columns[n])) for n in names]
    # Group rows by which nullable columns are NULL: each pattern is one fixed layout.
    pattern = np.zeros(n_rows, dtype=np.int64)
    for bit, mask in enumerate(masks):
        if mask is not None:
            pattern |= mask.astype(np.int64) << bit
    chunks = []
    patterns = np.unique(pattern)
    for pat in patterns:
        rows = np.flatnonzero(pattern == pat) if len(patterns) > 1 else slice(None)
        fields: list[tuple[str, str | np.dtype]] = [("n", ">i2")]
        present = []
        for i, (name, dt) in enumerate(zip(names, dtypes)):
            is_null = bool((pat >> i) & 1)
            fields.append((f"l{i}", ">i4"))
            if not is_null:
                fields.append((f"v{i}", dt))
                present.append((i, name, dt))
        rec = np.empty(n_rows if isinstance(rows, slice) else len(rows), dtype=fields)
        rec["n"] = len(names)
        for i, _dt in enumerate(dtypes):
            rec[f"l{i}"] = -1
        for i, name, dt in present:
            rec[f"l{i}"] = dt.itemsize
            rec[f"v{i}"] = np.asarray(columns[name])[rows]
        chunks.append(rec.tobytes())
    return b"".join(chunks)


def _python_rows(columns: dict[str, np.ndarray | list]) -> list[tuple]:
    cols = []
    for values in columns.values():
        if isinstance(values, np.ndarray):
            py = values.tolist()
            if values.dtype.kind == "f" and np.isnan(values).any():
                py = [None if v != v else v for v in py]
            cols.append(py)
        else:
            cols.append(list(values))
    return list(zip(*cols))


# Rows encoded and sent at a time: a reader's batch can be one huge line (a prompt group
# of millions of samples), and encoding it whole held its rows several times over.
SLICE_ROWS = 100_000


def _slices(columns: dict[str, np.ndarray | list], n_rows: int) -> Iterator[dict[str, np.ndarray | list]]:
    if n_rows <= SLICE_ROWS:
        yield columns
        return
    for lo in range(0, n_rows, SLICE_ROWS):
        yield {k: v[lo : lo + SLICE_ROWS] for k, v in columns.items()}


def bulk_insert(conn: Connection, table_name: str, columns: dict[str, np.ndarray | list]) -> int:
    """Append rows to `table_name` inside the connection's transaction (encoded
    SLICE_ROWS at a time); returns the count."""
    if not columns:
        return 0
    table = table_of(table_name)
    n_rows = len(next(iter(columns.values())))
    if n_rows == 0:
        return 0
    names = list(columns)
    col_sql = ", ".join(f'"{n}"' for n in names)
    if conn.dialect.name == "postgresql":
        try:
            _copy_pg(conn, table, table_name, col_sql, columns, n_rows)
        except psycopg.errors.IntegrityError as exc:
            # Same exception type as the SQLite path, so callers handle one.
            raise IntegrityError(f"COPY {table_name}", None, exc) from exc
    else:
        placeholders = ", ".join("?" for _ in names)
        for part in _slices(columns, n_rows):
            conn.exec_driver_sql(f'INSERT INTO "{table_name}" ({col_sql}) VALUES ({placeholders})', _python_rows(part))
    return n_rows


def _copy_pg(conn: Connection, table: Table, table_name: str, col_sql: str, columns: dict, n_rows: int) -> None:
    driver = conn.connection.driver_connection
    assert driver is not None  # a live connection (psycopg's)
    cursor = driver.cursor()
    binary = all(isinstance(v, np.ndarray) and binary_dtype(table.c[n].type) is not None for n, v in columns.items())
    if binary:
        with cursor.copy(f'COPY "{table_name}" ({col_sql}) FROM STDIN (FORMAT BINARY)') as cp:
            cp.write(_PG_HEADER)
            for part in _slices(columns, n_rows):
                cp.write(encode_pg_rows(table, part))  # type: ignore[arg-type]
            cp.write(_PG_TRAILER)
    else:
        with cursor.copy(f'COPY "{table_name}" ({col_sql}) FROM STDIN') as cp:
            for part in _slices(columns, n_rows):
                for row in _python_rows(part):
                    cp.write_row(row)
