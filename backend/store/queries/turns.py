"""Turns and tool calls of a trace's trajectories: one sample's turns, and a step's
trajectories as measured request timelines."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.store.models import Sample, ToolCall, Turn
from backend.store.queries.samples import SampleKey
from backend.store.queries.scope import owned_trace

DISCARD_FINISH = ("abort", "aborted", "error", "cancelled", "canceled")
DISCARD_TOOL_STATUS = ("error", "failed", "timeout", "rejected", "dropped")


def sample_turns(
    session: Session, *, team_id: int, trace_id: int, key: SampleKey
) -> tuple[list[Turn], dict[int | None, float | None]]:
    """(the sample's turns in order, {turn: the summed latency of its tool calls})."""
    step, group_idx, sample_idx = key
    owned = owned_trace(team_id, trace_id)
    call_key = (
        ToolCall.trace_id == trace_id,
        ToolCall.step == step,
        ToolCall.group_idx == group_idx,
        ToolCall.sample_idx == sample_idx,
    )
    tool_time = {
        turn: latency
        for turn, latency in session.execute(
            select(ToolCall.turn, func.sum(ToolCall.latency_s)).where(*call_key, owned).group_by(ToolCall.turn)
        )
    }
    turn_key = (
        Turn.trace_id == trace_id,
        Turn.step == step,
        Turn.group_idx == group_idx,
        Turn.sample_idx == sample_idx,
    )
    turns = list(session.scalars(select(Turn).where(*turn_key, owned).order_by(Turn.turn)))
    return turns, tool_time


@dataclass
class Trajectory:
    """A sample's engine and tool time back to back from 0: segments (what, start, length)."""

    group_idx: int
    sample_idx: int
    response_len: int
    num_turns: int | None
    truncated: bool
    discarded: bool = False
    segments: list[tuple[str, float, float]] = field(default_factory=list)
    end_s: float = 0.0


def step_trajectories(session: Session, *, team_id: int, trace_id: int, step: int, limit: int) -> list[Trajectory]:
    """The step's first `limit` samples (in (group, sample) order) as timelines, sorted by
    end (the long tail last); empty when the step has no samples. Discarded: a turn that
    finished with abort/error or a tool call that failed (DISCARD_* above)."""
    owned = owned_trace(team_id, trace_id)
    samples = session.execute(
        select(
            Sample.group_idx,
            Sample.sample_idx,
            Sample.response_len,
            Sample.num_turns,
            Sample.truncated,
            Sample.latency_s,
        )
        .where(Sample.trace_id == trace_id, Sample.step == step, owned)
        .order_by(Sample.group_idx, Sample.sample_idx)
        .limit(limit)
    ).all()
    if not samples:
        return []
    turns: dict[tuple[int, int], list] = {}
    for g, i, turn, engine, finish in session.execute(
        select(Turn.group_idx, Turn.sample_idx, Turn.turn, Turn.engine_latency_s, Turn.finish_reason)
        .where(Turn.trace_id == trace_id, Turn.step == step, owned)
        .order_by(Turn.group_idx, Turn.sample_idx, Turn.turn)
    ):
        turns.setdefault((g, i), []).append((turn, engine, finish))
    tools: dict[tuple[int, int, int | None], float] = {}
    failed: set[tuple[int, int]] = set()
    for g, i, tool_turn, latency, tool_status in session.execute(
        select(ToolCall.group_idx, ToolCall.sample_idx, ToolCall.turn, ToolCall.latency_s, ToolCall.status).where(
            ToolCall.trace_id == trace_id, ToolCall.step == step, owned
        )
    ):
        tools[(g, i, tool_turn)] = tools.get((g, i, tool_turn), 0.0) + (latency or 0.0)
        if (tool_status or "").lower() in DISCARD_TOOL_STATUS:
            failed.add((g, i))
    items = [_timeline(row, turns.get((row[0], row[1]), []), tools, failed) for row in samples]
    items.sort(key=lambda x: x.end_s)
    return items


def _timeline(sample, turns: list, tools: dict, failed: set) -> Trajectory:
    """One sample's timeline: each turn's engine time, then its tool calls' time."""
    g, i, response_len, num_turns, truncated, latency = sample
    out = Trajectory(g, i, response_len, num_turns, bool(truncated), discarded=(g, i) in failed)
    t = 0.0
    for turn, engine, finish in turns:
        if engine:
            out.segments.append(("engine", t, engine))
            t += engine
        tool = tools.get((g, i, turn))
        if tool:
            out.segments.append(("tool", t, tool))
            t += tool
        out.discarded = out.discarded or (finish or "").lower() in DISCARD_FINISH
    if not out.segments and latency:
        out.segments.append(("engine", 0.0, latency))
        t = latency
    out.end_s = t
    return out
