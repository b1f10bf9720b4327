"""Query and path parameters several routers share."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path, Query

from backend.store.ids import INT4_MAX, INT4_MIN
from core.analysis.page_views import STEPS_PAGE_MAX

# Steps and ranks are int4 columns; a value outside their range matches nothing, and is
# refused (422) before the database sees it. Offsets are bounded by the row counts (int8).
StepQuery = Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Only this step")]
RankQuery = Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX, description="Only this rank")]
OffsetQuery = Annotated[int, Query(ge=0, le=2**62)]
TimeQuery = Annotated[float | None, Query(allow_inf_nan=False, ge=-1e300, le=1e300)]
Int4Path = Annotated[int, Path(ge=INT4_MIN, le=INT4_MAX)]
IncludeResult = Annotated[bool, Query(description="Include each job's result (can be megabytes per job)")]
ResultView = Annotated[
    Literal["full", "page", "steps"],
    Query(
        description='"page": of a longtail or imbalance result, only what the dashboard pages draw, bounded '
        "whatever the trace's size (core.analysis.page_views: per-step scalars, one step x rank heatmap of at "
        'most 64 Ki cells, one load of an imbalance result); other kinds: the full result. "steps": the '
        "result with only the step entries [step_offset, step_offset + step_limit), at full resolution as "
        'stored (view.total: how many there are). "full" (default): the result as stored',
    ),
]
StepOffset = Annotated[int, Query(ge=0, le=2**31 - 1, description='Step entries to skip (view="steps")')]
StepLimit = Annotated[
    int, Query(ge=1, le=STEPS_PAGE_MAX, description=f'Step entries per page (view="steps", at most {STEPS_PAGE_MAX})')
]
ViewLoad = Annotated[
    Literal["tokens", "cost"], Query(description='The load an imbalance page view carries (view="page")')
]
