"""Assembles the per-GPU busy/idle timeline of a replay and sums idle time by cause.

Colocated policies: every physical GPU serves a rollout replica (GPU // rollout_tp) and
a training rank (GPU // train_tp); GPUs with the same pair share a lane (role
"shared"). Disaggregated policies: rollout lanes (one per replica, role "rollout"),
training lanes (one per DP rank, role "train"), and one lane for GPUs in neither pool
(role "unused").

A replica's busy interval is drawn as busy followed by its under-occupancy (the free
batch slots once nothing was left to admit, see engine.py) as idle "rollout_tail", and
preceded by the time it spent recomputing carried or preempted samples as busy
"recompute": both aggregated per interval, not placed at the exact moments.

Time a lane does not account for explicitly is filled by `finish`: with the label of a
`background` interval a policy declared for the lane's pool over that time (e.g. "the
rollout pool is held back by the staleness bound from t0 to t1"), else with the pool's
default: a disaggregated rollout pool waits for the trainer (`rollout_waits_trainer`),
a training pool for rollouts (`trainer_waits_rollout`), time-shared GPUs for a
host-side stage (`stage_serialisation`). The causes are listed, with their definitions,
in result.py (IDLE_CAUSES, CAUSES).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from core.simulator.config import ClusterConfig
from core.simulator.result import Lane
from core.simulator.training import PassTime

DEFAULT_FILL = {"rollout": "rollout_waits_trainer", "train": "trainer_waits_rollout", "shared": "stage_serialisation"}


class TimelineBuilder:
    def __init__(self, cluster: ClusterConfig, disaggregated: bool) -> None:
        self.disaggregated = disaggregated
        self.lanes: list[Lane] = []
        self.rollout_lanes: list[tuple[Lane, int]] = []  # (lane, replica or -1)
        self.train_lanes: list[tuple[Lane, int]] = []  # (lane, dp rank or -1)
        self.backgrounds: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
        self.spare: Lane | None = None
        if disaggregated:
            self._disaggregated_lanes(cluster)
        else:
            self._colocated_lanes(cluster)

    def _disaggregated_lanes(self, cluster: ClusterConfig) -> None:
        tp, ttp = cluster.rollout_tp, cluster.train_tp
        for r in range(cluster.rollout_replicas):
            lane = Lane(f"rollout replica {r}", list(range(r * tp, (r + 1) * tp)), role="rollout")
            self.lanes.append(lane)
            self.rollout_lanes.append((lane, r))
        base = cluster.rollout_replicas * tp
        for d in range(cluster.train_dp):
            lane = Lane(f"train dp {d}", list(range(base + d * ttp, base + (d + 1) * ttp)), role="train")
            self.lanes.append(lane)
            self.train_lanes.append((lane, d))
        rest = list(range(base + cluster.train_dp * ttp, cluster.n_gpus))
        self.spare = Lane("unused GPUs", rest, role="unused") if rest else None

    def _colocated_lanes(self, cluster: ClusterConfig) -> None:
        tp, ttp = cluster.rollout_tp, cluster.train_tp
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for g in range(cluster.n_gpus):
            rep = g // tp if g < cluster.rollout_replicas * tp else -1
            rk = g // ttp if g < cluster.train_dp * ttp else -1
            groups[(rep, rk)].append(g)
        for (rep, rk), gpus in groups.items():
            name = ("replica " + (str(rep) if rep >= 0 else "-")) + " / dp " + (str(rk) if rk >= 0 else "-")
            lane = Lane(name, gpus, role="shared")
            self.lanes.append(lane)
            self.rollout_lanes.append((lane, rep))
            self.train_lanes.append((lane, rk))

    # ------------------------------------------------------------------ rollout

    def rollout(
        self,
        step: int,
        start: float,
        end: float,
        replica_busy: list[list[list[float]]],
        recompute: list[float] | None = None,
    ) -> None:
        """A synchronous rollout window: busy as the replicas were (their first
        `recompute[replica]` busy seconds drawn as recompute), gaps between busy
        intervals are tool waits, time after a replica's last busy interval is tail."""
        for lane, rep in self.rollout_lanes:
            if rep < 0:
                lane.add(start, end, "idle", "unused", step)
                continue
            t = start
            left = recompute[rep] if recompute is not None and rep < len(recompute) else 0.0
            for a, b, tail in replica_busy[rep] if rep < len(replica_busy) else []:
                a, b = max(a, start), min(b, end)
                if b <= a:
                    continue
                lane.add(t, a, "idle", "tool_wait" if t > start else "rollout_tail", step)
                left = _busy_segments(lane, a, b, tail, left, step)
                t = b
            lane.add(t, end, "idle", "rollout_tail", step)

    def streaming_rollout(
        self,
        busy: list[list[list[float]]],
        tool_gaps: list[list[tuple[float, float]]],
        step_of: Callable[[float], int],
        recompute: list[float] | None = None,
    ) -> None:
        """Replicas running across step boundaries: busy intervals (the first
        `recompute[replica]` busy seconds as recompute) and tool-wait gaps; the rest is
        left to the pool's background labels. `step_of(t)` tags an interval."""
        for lane, rep in self.rollout_lanes:
            if rep < 0 or rep >= len(busy):
                continue
            left = recompute[rep] if recompute is not None and rep < len(recompute) else 0.0
            for a, b, tail in busy[rep]:
                left = _busy_segments(lane, a, b, tail, left, step_of(a))
            for a, b in tool_gaps[rep]:
                lane.add(a, b, "idle", "tool_wait", step_of(a))

    def replica_idle(self, replica: int, start: float, end: float, label: str, step: int) -> None:
        """One rollout replica idle for `label` (e.g. pulling weights)."""
        for lane, rep in self.rollout_lanes:
            if rep == replica:
                lane.add(start, end, "idle", label, step)

    # ------------------------------------------------------------------ other stages

    def _stage_lanes(self, role: str) -> list[tuple[Lane, int]]:
        if self.disaggregated:
            return self.train_lanes if role == "train" else self.rollout_lanes
        return self.train_lanes

    def span(self, step: int, start: float, end: float, state: str, label: str, role: str = "train") -> None:
        """Every lane of a pool (colocated: all lanes) in the same state."""
        for lane, _ in self._stage_lanes(role):
            lane.add(start, end, state, label, step)

    def background(self, role: str, start: float, end: float, label: str) -> None:
        """What the pool `role` ("rollout" or "train"; colocated: the whole cluster)
        waits for from `start` to `end` wherever nothing else is drawn on its lanes."""
        if end > start:
            key = role if self.disaggregated else "shared"
            bisect.insort(self.backgrounds[key], (start, end, label))

    def training_pass(self, step: int, label: str, start: float, p: PassTime) -> None:
        """Busy for each rank's compute, then idle (DP imbalance) until the slowest."""
        end = start + p.seconds
        for lane, rk in self.train_lanes:
            if rk < 0:
                lane.add(start, end, "idle", "unused", step)
                continue
            mid = start + float(p.busy[rk])
            lane.add(start, mid, "busy", label, step)
            lane.add(mid, end, "idle", "dp_imbalance", step)

    # ------------------------------------------------------------------ totals

    def finish(self, makespan: float, step_of: Callable[[float], int]) -> tuple[list[Lane], dict, float, dict, dict]:
        """Fill unaccounted time from the backgrounds (else the pool's default); returns
        (lanes, idle per cause, busy GPU-seconds, idle per step and cause, busy per step)."""
        for lane in self.lanes:
            lane.intervals = self._filled(lane, makespan, step_of)
        lanes = list(self.lanes)
        if self.spare is not None and makespan > 0:
            self.spare.intervals = [[0.0, makespan, "idle", "unused", -1]]
            lanes.append(self.spare)
        idle: dict[str, float] = defaultdict(float)
        idle_step: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        busy_step: dict[int, float] = defaultdict(float)
        busy = 0.0
        for lane in lanes:
            k = len(lane.gpus)
            for a, b, state, label, step in lane.intervals:
                d = (b - a) * k
                if state == "busy":
                    busy += d
                    busy_step[step] += d
                else:
                    idle[label] += d
                    idle_step[step][label] += d
        return lanes, dict(idle), busy, {s: dict(v) for s, v in idle_step.items()}, dict(busy_step)

    def _filled(self, lane: Lane, makespan: float, step_of: Callable[[float], int]) -> list[list]:
        lane.intervals.sort(key=lambda iv: iv[0])
        bg = self.backgrounds.get(lane.role, [])
        default = DEFAULT_FILL.get(lane.role, "stage_serialisation")
        filled: list[list] = []
        t = 0.0
        for iv in lane.intervals:
            if iv[0] > t + 1e-9:
                filled += _gap(t, iv[0], bg, default, step_of)
            filled.append(iv)
            t = max(t, iv[1])
        if makespan > t + 1e-9:
            filled += _gap(t, makespan, bg, default, step_of)
        return filled


def _gap(
    a: float, b: float, bg: list[tuple[float, float, str]], default: str, step_of: Callable[[float], int]
) -> list[list]:
    """[a, b) split by the background intervals over it; the rest is `default`."""
    out: list[list] = []
    t = a
    i = max(0, bisect.bisect_right(bg, (a, float("inf"), "")) - 1)
    for s, e, label in bg[i:]:
        if s >= b:
            break
        if e <= t:
            continue
        if s > t:
            out.append([t, s, "idle", default, step_of(t)])
            t = s
        stop = min(e, b)
        out.append([t, stop, "idle", label, step_of(t)])
        t = stop
        if t >= b:
            break
    if b > t + 1e-12:
        out.append([t, b, "idle", default, step_of(t)])
    return [iv for iv in out if iv[1] > iv[0]]


def _busy_segments(lane: Lane, a: float, b: float, tail: float, recompute_left: float, step: int) -> float:
    """A replica's busy interval: recompute first (up to `recompute_left` seconds),
    then generation, its under-occupancy shown as tail idle at its end; returns the
    recompute seconds still to draw."""
    cut = b - min(max(tail, 0.0), b - a)
    re_end = min(cut, a + max(recompute_left, 0.0))
    lane.add(a, re_end, "busy", "recompute", step)
    lane.add(re_end, cut, "busy", "rollout", step)
    lane.add(cut, b, "idle", "rollout_tail", step)
    return max(0.0, recompute_left - (re_end - a))


def step_locator(ends: list[float], steps: list[int]) -> Callable[[float], int]:
    """t -> the step whose window [previous end, end) contains t."""
    # bisect on a list of floats finds what searchsorted(side="right") does, without
    # numpy's per-call cost (called once per interval by the streaming policies)
    arr = np.asarray(ends, dtype=np.float64).tolist()

    def step_of(t: float) -> int:
        i = bisect.bisect_right(arr, t)
        return steps[min(i, len(steps) - 1)] if steps else -1

    return step_of
