"""How the store's column types travel in PostgreSQL's binary COPY format, shared by the
bulk writer (backend/ingest/bulk.py) and the column reader (columns.py)."""

from __future__ import annotations

import numpy as np
from sqlalchemy import BigInteger, Boolean, Float, Integer, SmallInteger, Table

from backend.store.models import Base


def binary_dtype(column_type) -> np.dtype | None:
    """The big-endian numpy dtype of a fixed-width column in binary COPY (None: text)."""
    # Order matters: BigInteger and SmallInteger subclass Integer.
    for sa_type, dt in (
        (BigInteger, ">i8"),
        (SmallInteger, ">i2"),
        (Integer, ">i4"),
        (Float, ">f8"),
        (Boolean, "?"),
    ):
        if isinstance(column_type, sa_type):
            return np.dtype(dt)
    return None


def fixed_dtype(column_type) -> np.dtype:
    """`binary_dtype` of a column the binary COPY paths take only once each has one."""
    dt = binary_dtype(column_type)
    if dt is None:
        raise TypeError(f"{column_type} has no fixed-width binary COPY form")
    return dt


def table_of(name: str) -> Table:
    return Base.metadata.tables[name]
