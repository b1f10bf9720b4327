"""Pure: whether a figure built from an analysis result is behind its trace, said with
its age: "computed 3 min ago, steps 0-41 of 45 — refreshing".

A live trace grows between an analysis run and its re-run; what a card or panel shows
meanwhile is the older result. `stale_note` is None while the result covers every step
the trace has (and no re-run is going), so only figures that are behind are marked.
"""

from __future__ import annotations

from datetime import UTC, datetime


def result_steps(result: dict | None) -> list[int]:
    """The steps an analysis result covers (its per-step entries), sorted."""
    entries = (result or {}).get("steps")
    if not isinstance(entries, list):
        return []
    return sorted({int(e["step"]) for e in entries if isinstance(e, dict) and e.get("step") is not None})


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        when = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def age_text(ts: str | None, now: datetime) -> str:
    """'computed 12 s ago', '3 min ago', '2 h ago' (from a job's finished_at)."""
    when = _parse(ts)
    if when is None:
        return "computed earlier"
    s = max(0.0, (now - when).total_seconds())
    if s < 90:
        return f"computed {s:.0f} s ago"
    if s < 90 * 60:
        return f"computed {s / 60:.0f} min ago"
    return f"computed {s / 3600:.0f} h ago"


def stale_note(
    job: dict | None, result: dict | None, trace_steps: list[int], *, refreshing: bool, now: datetime | None = None
) -> str | None:
    """The mark of a result behind its trace, else None. `trace_steps`: the steps the
    analysis would cover now (training steps with samples); behind = the trace has a
    step after the result's last. `refreshing`: a re-run is queued or running, or the
    trace is live (its analyses are queued again as steps arrive)."""
    steps = result_steps(result)
    if not steps or not trace_steps or max(trace_steps) <= steps[-1]:
        return None
    covered = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}–{steps[-1]}"
    age = age_text((job or {}).get("finished_at"), now or datetime.now(UTC))
    return f"{age}, {covered} of {len(trace_steps)}" + (" — refreshing" if refreshing else "")
