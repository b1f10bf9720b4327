"""Query and path parameters several routers share."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from backend.store.ids import INT4_MAX, INT4_MIN

# Steps and ranks are int4 columns; a value outside their range matches nothing, and is
# refused (422) before the database sees it. Offsets are bounded by the row counts (int8).
StepQuery = Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Only this step")]
RankQuery = Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Only this rank")]
OffsetQuery = Annotated[int, Query(ge=0, le=2**62)]
TimeQuery = Annotated[float | None, Query(allow_inf_nan=False, ge=-1e300, le=1e300)]
Int4Path = Annotated[int, Path(ge=INT4_MIN, le=INT4_MAX)]
IncludeResult = Annotated[bool, Query(description="Include each job's result (can be megabytes per job)")]
