"""`json_safe`: a result as plain JSON values (numpy scalars become Python numbers,
NaN and infinities become None)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def json_safe(obj: Any) -> Any:
    """Plain JSON values: numpy scalars/arrays to Python, NaN/inf to None."""
    # exact built-in types first: results hold hundreds of thousands of plain numbers
    t = type(obj)
    if t is float:
        return obj if obj - obj == 0.0 else None  # inf - inf and nan - nan are nan
    if t is int or t is str or t is bool or obj is None:
        return obj
    if t is list or t is tuple:
        return _json_safe_list(obj)
    if t is dict:
        return {k if type(k) is str else str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return _json_safe_list(obj)
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.str_):
        return str(obj)
    return obj


def _json_safe_list(items: Iterable[Any]) -> list:
    out: list = []
    append = out.append
    for v in items:
        t = type(v)
        if t is float:
            append(v if v - v == 0.0 else None)
        elif t is int or t is str or t is bool or v is None:
            append(v)
        else:
            append(json_safe(v))
    return out
