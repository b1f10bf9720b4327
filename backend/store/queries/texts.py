"""Rollout-dump texts of a trace's samples: one sample with its text and extras, its
group's other members, and responses by key. Texts stay packed (the caller unpacks)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.store.models import Sample, SampleExtra, SampleText
from backend.store.queries.samples import SampleKey
from backend.store.queries.scope import owned_trace


def sample_with_text(
    session: Session, *, team_id: int, trace_id: int, key: SampleKey
) -> tuple[Sample | None, SampleText | None]:
    """The sample and its text (None where there is none)."""
    step, group_idx, sample_idx = key
    owned = owned_trace(team_id, trace_id)
    sample = session.scalars(
        select(Sample).where(
            Sample.trace_id == trace_id,
            Sample.step == step,
            Sample.group_idx == group_idx,
            Sample.sample_idx == sample_idx,
            owned,
        )
    ).first()
    text = session.scalars(
        select(SampleText).where(
            SampleText.trace_id == trace_id,
            SampleText.step == step,
            SampleText.group_idx == group_idx,
            SampleText.sample_idx == sample_idx,
            owned,
        )
    ).first()
    return sample, text


def sample_extras(session: Session, *, team_id: int, trace_id: int, key: SampleKey) -> dict[str, float | str | None]:
    """{key: value} of the fields of the sample's dump the schema has no column for."""
    step, group_idx, sample_idx = key
    rows = session.scalars(
        select(SampleExtra).where(
            SampleExtra.trace_id == trace_id,
            SampleExtra.step == step,
            SampleExtra.group_idx == group_idx,
            SampleExtra.sample_idx == sample_idx,
            owned_trace(team_id, trace_id),
        )
    )
    return {e.key: e.value_num if e.value_num is not None else e.value_text for e in rows}


def group_others(
    session: Session, *, team_id: int, trace_id: int, key: SampleKey
) -> tuple[list[Sample], dict[int, SampleText]]:
    """(the other samples of the sample's group in order, {sample_idx: text} of the group)."""
    step, group_idx, sample_idx = key
    owned = owned_trace(team_id, trace_id)
    where = (Sample.trace_id == trace_id, Sample.step == step, Sample.group_idx == group_idx, owned)
    others = session.scalars(select(Sample).where(*where, Sample.sample_idx != sample_idx).order_by(Sample.sample_idx))
    texts = session.scalars(
        select(SampleText).where(
            SampleText.trace_id == trace_id, SampleText.step == step, SampleText.group_idx == group_idx, owned
        )
    )
    return list(others), {t.sample_idx: t for t in texts}


def packed_responses(
    session: Session, *, team_id: int, trace_id: int, keys: Iterable[SampleKey]
) -> dict[SampleKey, bytes]:
    """{key: packed response} of these samples (read a step at a time: a step's texts
    are stored together)."""
    wanted = set(keys)
    out: dict[SampleKey, bytes] = {}
    for step in sorted({k[0] for k in wanted}):
        rows = session.execute(
            select(SampleText.group_idx, SampleText.sample_idx, SampleText.response).where(
                SampleText.trace_id == trace_id, SampleText.step == step, owned_trace(team_id, trace_id)
            )
        )
        out.update({(step, g, i): blob for g, i, blob in rows if (step, g, i) in wanted})
    return out
