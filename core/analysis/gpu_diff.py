"""HTA's TraceDiff: ops summaries of two traces and what was added, deleted or changed
between them, on `TraceEvents`."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from core.analysis.gpu_events import TraceEvents
from core.analysis.gpu_frames import (
    hta_frames,
)

# --- trace diff (TraceEvents x 2) ---------------------------------------------------------


def iterations(ev: TraceEvents) -> list[int]:
    """ProfilerStep numbers named in the trace, sorted (HTA LabeledTrace.iterations)."""
    out = set()
    for n in ev.names:
        m = re.match(r"ProfilerStep\s*#\s*(\d+)", n)
        if m:
            out.add(int(m.group(1)))
    return sorted(out)


def ops_summary(
    ev: TraceEvents,
    rank: int | Sequence[int] | None = None,
    iteration: int | Sequence[int] | None = None,
    device: str = "all",
) -> dict[str, tuple[int, float]]:
    """{name: (count, total duration us)} of the ops and kernels of the chosen ranks and
    ProfilerSteps (HTA LabeledTrace.extract_ops + get_ops_summary; defaults: the first
    rank and the first step; device "cpu" = stream -1, "gpu" = the rest)."""
    frames = hta_frames(ev, window=False)
    ranks = sorted(frames) if rank is None else None
    if ranks:
        chosen_ranks = [ranks[0]]
    elif rank is None:
        chosen_ranks = []
    else:
        chosen_ranks = [rank] if isinstance(rank, int) else list(rank)
    its = iterations(ev)
    chosen_its = its[:1] if iteration is None else ([iteration] if isinstance(iteration, int) else list(iteration))
    counts: dict[int, int] = {}
    sums: dict[int, float] = {}
    for r in chosen_ranks:
        if r not in frames:
            raise ValueError(f"rank {r} is not in the trace (ranks: {sorted(frames)})")
        f = frames[r]
        m = np.isin(f.iteration, chosen_its)
        if device == "cpu":
            m &= ~f.gpu
        elif device == "gpu":
            m &= f.gpu
        name = ev.name[f.idx[m]]
        dur = f.dur[m]
        c = np.bincount(name, minlength=len(ev.names))
        t = np.bincount(name, weights=dur, minlength=len(ev.names))
        for i in np.flatnonzero(c).tolist():
            counts[i] = counts.get(i, 0) + int(c[i])
            sums[i] = sums.get(i, 0.0) + float(t[i])
    out: dict[str, tuple[int, float]] = {}
    for i, count in counts.items():
        label = ev.names[i]
        prev = out.get(label, (0, 0.0))
        out[label] = (prev[0] + count, prev[1] + sums[i])
    return out


_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def steps_by_position(a: dict, b: dict) -> tuple[dict, dict]:
    """The compared ProfilerStep annotations paired by position (the first step of A with
    the first of B, ...), named "ProfilerStep#550 / #551": two runs rarely profile the
    same step numbers, and "#550 deleted, #551 added" would lead the diff with noise."""

    def steps(d: dict) -> list[tuple[int, str]]:
        return sorted((int(m.group(1)), k) for k in d if (m := _PROFILER_STEP.match(k)))

    sa, sb = steps(a), steps(b)
    a, b = dict(a), dict(b)
    for (na, ka), (nb, kb) in zip(sa, sb):
        label = ka if na == nb else f"ProfilerStep#{na} / #{nb}"
        a[label], b[label] = a.pop(ka), b.pop(kb)
    return a, b


def trace_diff(
    control: TraceEvents,
    test: TraceEvents,
    *,
    control_rank: int | None = None,
    test_rank: int | None = None,
    control_iteration: int | None = None,
    test_iteration: int | None = None,
    device: str = "all",
    match_steps: bool = True,
) -> dict:
    """Ops and kernels added, removed and changed between two traces, in count and in
    time (HTA TraceDiff.compare_traces / ops_diff; the same defaults: first rank, first
    ProfilerStep of each). `match_steps`: the compared ProfilerStep annotations are
    paired by position (`steps_by_position`); False compares them by name, as HTA does.

    ``rows``: name, control_counts, test_counts, control_total_us, test_total_us,
    diff_counts, diff_duration_us, change ("+" more in test, "-" fewer, "=" same), sorted by
    name; ``ops_diff``: {added, deleted, increased, decreased, unchanged} name counts;
    ``control`` / ``test``: the ranks and steps compared.
    """
    a = ops_summary(control, control_rank, control_iteration, device)
    b = ops_summary(test, test_rank, test_iteration, device)
    if match_steps:
        a, b = steps_by_position(a, b)
    rows: dict[str, list] = {
        k: []
        for k in (
            "name",
            "control_counts",
            "test_counts",
            "control_total_us",
            "test_total_us",
            "diff_counts",
            "diff_duration_us",
            "change",
        )
    }
    groups = {"added": 0, "deleted": 0, "increased": 0, "decreased": 0, "unchanged": 0}
    for name in sorted(set(a) | set(b)):
        ca, ta = a.get(name, (0, 0.0))
        cb, tb = b.get(name, (0, 0.0))
        d = cb - ca
        rows["name"].append(name)
        rows["control_counts"].append(ca)
        rows["test_counts"].append(cb)
        rows["control_total_us"].append(ta)
        rows["test_total_us"].append(tb)
        rows["diff_counts"].append(d)
        rows["diff_duration_us"].append(tb - ta)
        rows["change"].append("+" if d > 0 else "-" if d < 0 else "=")
        if ca == 0 and cb > 0:
            groups["added"] += 1
        if ca > 0 and cb == 0:
            groups["deleted"] += 1
        if ca > 0 and d > 0:
            groups["increased"] += 1
        if cb > 0 and d < 0:
            groups["decreased"] += 1
        if cb > 0 and d == 0:
            groups["unchanged"] += 1

    def chosen(ev: TraceEvents, rank: int | None, iteration: int | None) -> dict[str, int | None]:
        return {
            "rank": ev.ranks()[0] if rank is None else rank,
            "step": next(iter(iterations(ev)), None) if iteration is None else iteration,
        }

    return {
        "rows": rows,
        "ops_diff": groups,
        "control": chosen(control, control_rank, control_iteration),
        "test": chosen(test, test_rank, test_iteration),
    }
