"""Samples of a trace: the one filter builder (the samples table and the text search
share it), a sorted page, counts, and the rows the text search scopes."""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Literal

from sqlalchemy import ColumnElement, Row, func, select
from sqlalchemy.orm import Session

from backend.store.models import Sample, Step
from backend.store.queries.scope import owned_trace

SampleKey = tuple[int, int, int]  # (step, group_idx, sample_idx)
# Sorts on nullable columns put the NULLs last either way.
NULLS_LAST = frozenset({"rank", "dp_rank", "truncated", "reward", "num_turns", "num_tool_calls", "latency_s"})


@dataclass(frozen=True)
class SampleFilter:
    """What samples must match (None: anything). Steps and bounds `_min` are inclusive,
    `step_max` and `reward_max` too; `response_len_max` is exclusive (a histogram bin's
    upper edge). `truncated` reads the stored flag (the caller checks the trace has a
    definition); `with_text`: only samples a rollout dump gave text; `repeating`: only
    those whose response ends in a repetition (or not)."""

    step: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    response_len_min: int | None = None
    response_len_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    dp_rank: int | None = None
    num_turns: int | None = None
    truncated: bool | None = None
    repeating: bool | None = None
    with_text: bool = False

    def steps_only(self) -> bool:
        """Only steps are filtered: the per-step counts give the total."""
        rest = (
            self.response_len_min,
            self.response_len_max,
            self.reward_min,
            self.reward_max,
            self.dp_rank,
            self.num_turns,
            self.truncated,
            self.repeating,
        )
        return not self.with_text and all(v is None for v in rest)

    def has_steps(self) -> bool:
        return self.step is not None or self.step_min is not None or self.step_max is not None


def sample_where(*, team_id: int, trace_id: int, filters: SampleFilter) -> list[ColumnElement[bool]]:
    """The WHERE clauses of the team's trace's samples matching `filters`."""
    f = filters
    where = [Sample.trace_id == trace_id, owned_trace(team_id, trace_id)]
    bounds = (
        (Sample.step, operator.eq, f.step),
        (Sample.step, operator.ge, f.step_min),
        (Sample.step, operator.le, f.step_max),
        (Sample.response_len, operator.ge, f.response_len_min),
        (Sample.response_len, operator.lt, f.response_len_max),
        (Sample.reward, operator.ge, f.reward_min),
        (Sample.reward, operator.le, f.reward_max),
        (Sample.dp_rank, operator.eq, f.dp_rank),
        (Sample.num_turns, operator.eq, f.num_turns),
    )
    where += [compare(column, value) for column, compare, value in bounds if value is not None]
    if f.truncated is not None:
        # samples below the cap hold NULL
        where.append(Sample.truncated.is_(True) if f.truncated else Sample.truncated.is_not(True))
    if f.with_text:
        where.append(Sample.repeat_period.is_not(None))
    if f.repeating is not None:
        where.append(Sample.repeat_period > 0 if f.repeating else Sample.repeat_period == 0)
    return where


def sample_page(
    session: Session,
    *,
    team_id: int,
    trace_id: int,
    filters: SampleFilter,
    sort: str,
    order: Literal["asc", "desc"],
    limit: int,
    offset: int,
) -> list[Sample]:
    """Matching samples sorted by column `sort` (ties in (step, group, sample) order),
    paged. Step filters use the primary key, length filters and length sorts the
    (trace_id, response_len) index."""
    key = getattr(Sample, sort)
    if sort == "response_len" and filters.has_steps():
        # Within steps the primary key range plus a top-k sort is cheap; walking the
        # whole trace's length index for a step's rows is not (the planner may pick it).
        key = key + 0
    primary = key.desc() if order == "desc" else key.asc()
    if sort in NULLS_LAST:
        primary = primary.nulls_last()
    tiebreak = [c.desc() if order == "desc" else c.asc() for c in (Sample.step, Sample.group_idx, Sample.sample_idx)]
    where = sample_where(team_id=team_id, trace_id=trace_id, filters=filters)
    return list(session.scalars(select(Sample).where(*where).order_by(primary, *tiebreak).limit(limit).offset(offset)))


def count_samples(
    session: Session, *, team_id: int, trace_id: int, filters: SampleFilter, cap: int
) -> tuple[int, bool]:
    """(total, total_is_lower_bound): with only step filters exact and O(steps) from the
    per-step counts written at ingestion, else at most `cap` matches counted."""
    if filters.steps_only():
        f = filters
        where = [Step.trace_id == trace_id, owned_trace(team_id, trace_id)]
        if f.step is not None:
            where.append(Step.step == f.step)
        if f.step_min is not None:
            where.append(Step.step >= f.step_min)
        if f.step_max is not None:
            where.append(Step.step <= f.step_max)
        return session.scalar(select(func.coalesce(func.sum(Step.n_samples), 0)).where(*where)) or 0, False
    where = sample_where(team_id=team_id, trace_id=trace_id, filters=filters)
    matching = select(Sample.step).where(*where).limit(cap + 1).subquery()
    total = session.scalar(select(func.count()).select_from(matching)) or 0
    return min(total, cap), total > cap


def sample_exists(session: Session, *, team_id: int, trace_id: int, key: SampleKey) -> bool:
    """The team's trace has this sample."""
    step, group_idx, sample_idx = key
    where = (
        Sample.trace_id == trace_id,
        Sample.step == step,
        Sample.group_idx == group_idx,
        Sample.sample_idx == sample_idx,
        owned_trace(team_id, trace_id),
    )
    return bool(session.scalar(select(func.count()).select_from(Sample).where(*where)))


def text_sample_rows(
    session: Session, *, team_id: int, trace_id: int, filters: SampleFilter
) -> dict[SampleKey, Row[int, int, int, float | None, int, int, int | None]]:
    """{key: (step, group_idx, sample_idx, reward, prompt_len, response_len,
    repeat_period)} of the matching samples with text (`with_text` is implied)."""
    where = sample_where(team_id=team_id, trace_id=trace_id, filters=replace(filters, with_text=True))
    columns = (Sample.step, Sample.group_idx, Sample.sample_idx, Sample.reward, Sample.prompt_len)
    rows = session.execute(select(*columns, Sample.response_len, Sample.repeat_period).where(*where))
    return {(r[0], r[1], r[2]): r for r in rows}
