"""Per-step rows of a trace: the steps, their precomputed summaries and their series."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from backend.store.models import Step
from backend.store.queries.scope import owned_trace

# What the series of a step are read from (backend/store/series.py reads them by name).
SERIES_COLUMNS = (
    Step.step,
    Step.validate,
    Step.n_samples,
    Step.prompt_tokens,
    Step.response_tokens,
    Step.t_gen,
    Step.t_reward,
    Step.t_old_log_prob,
    Step.t_ref,
    Step.t_adv,
    Step.t_update_actor,
    Step.t_step,
    Step.metrics,
    Step.summary,
)


def list_steps(session: Session, *, team_id: int, trace_id: int) -> list[Step]:
    """The trace's steps in order."""
    where = (Step.trace_id == trace_id, owned_trace(team_id, trace_id))
    return list(session.scalars(select(Step).where(*where).order_by(Step.step)))


def step_summaries(session: Session, *, team_id: int, trace_id: int) -> Sequence[Row[int, bool, dict]]:
    """(step, validate, summary) in step order: the length statistics ingestion wrote."""
    where = (Step.trace_id == trace_id, owned_trace(team_id, trace_id))
    return session.execute(select(Step.step, Step.validate, Step.summary).where(*where).order_by(Step.step)).all()


def step_series_rows(session: Session, *, team_id: int, trace_id: int) -> Sequence[Row]:
    """The SERIES_COLUMNS of every step, in step order."""
    where = (Step.trace_id == trace_id, owned_trace(team_id, trace_id))
    return session.execute(select(*SERIES_COLUMNS).where(*where).order_by(Step.step)).all()
