"""Object ids: every id that names a team's object (trace, job, team) is a Postgres
``integer`` (int4) column, so an id is an integer in 1..2**31-1 — checked before it
reaches a query, and never coerced from a float, a string or a bool."""

from __future__ import annotations

from typing import Any

ID_MIN = 1
ID_MAX = 2**31 - 1
# Other int4 columns (steps, ranks, indices) hold -2**31..2**31-1.
INT4_MIN = -(2**31)
INT4_MAX = 2**31 - 1
# BigInteger columns (counts, sizes) and row offsets.
INT8_MAX = 2**63 - 1


def check_id(value: Any, field: str) -> int:
    """`value` as an object id, else ValueError starting with `field` (strict: a JSON
    integer; 108.0, "108" and true are refused, not coerced)."""
    if type(value) is not int:
        raise ValueError(f"{field}: must be an integer id, got {value!r}")
    if not ID_MIN <= value <= ID_MAX:
        raise ValueError(f"{field}: must be an id in {ID_MIN}..{ID_MAX}, got {value}")
    return value
