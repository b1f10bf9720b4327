"""Assembles the per-GPU busy/idle timeline of a replay and sums idle time by cause.

Colocated policies: every physical GPU serves a rollout replica (GPU // rollout_tp) and
a training rank (GPU // train_tp); GPUs with the same pair share a lane. Disaggregated
policies: rollout lanes (one per replica), training lanes (one per DP rank), and one
lane for GPUs in neither pool. Time a lane does not account for explicitly (waiting for
the other pool) is filled as idle "stage_serialisation" by `finish`.

A replica's busy interval is drawn as busy followed by its under-occupancy (the free
batch slots once nothing was left to admit, see engine.py) as idle "rollout_tail":
aggregated, not placed at the exact moments.

Idle causes: rollout_tail (a replica done, waiting for the slowest one, or running a
half-empty batch with nothing left to admit), tool_wait (a
replica with nothing to run while tool calls are out), reward_wait (reward computation
on the host), dp_imbalance (ranks waiting at a synchronisation point),
stage_serialisation (a pool waiting for the other one, or for a host-side stage),
unused (GPUs outside the pools a stage uses).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from core.simulator.config import ClusterConfig
from core.simulator.result import Lane
from core.simulator.training import PassTime


class TimelineBuilder:
    def __init__(self, cluster: ClusterConfig, disaggregated: bool) -> None:
        self.disaggregated = disaggregated
        tp, ttp = cluster.rollout_tp, cluster.train_tp
        R, D = cluster.rollout_replicas, cluster.train_dp
        self.lanes: list[Lane] = []
        self.rollout_lanes: list[tuple[Lane, int]] = []  # (lane, replica or -1)
        self.train_lanes: list[tuple[Lane, int]] = []  # (lane, dp rank or -1)
        if disaggregated:
            for r in range(R):
                lane = Lane(f"rollout replica {r}", list(range(r * tp, (r + 1) * tp)))
                self.lanes.append(lane)
                self.rollout_lanes.append((lane, r))
            base = R * tp
            for d in range(D):
                lane = Lane(f"train dp {d}", list(range(base + d * ttp, base + (d + 1) * ttp)))
                self.lanes.append(lane)
                self.train_lanes.append((lane, d))
            rest = list(range(base + D * ttp, cluster.n_gpus))
            self.spare = Lane("unused GPUs", rest) if rest else None
        else:
            groups: dict[tuple[int, int], list[int]] = defaultdict(list)
            for g in range(cluster.n_gpus):
                rep = g // tp if g < R * tp else -1
                rk = g // ttp if g < D * ttp else -1
                groups[(rep, rk)].append(g)
            for (rep, rk), gpus in groups.items():
                name = ("replica " + (str(rep) if rep >= 0 else "-")) + " / dp " + (str(rk) if rk >= 0 else "-")
                lane = Lane(name, gpus)
                self.lanes.append(lane)
                self.rollout_lanes.append((lane, rep))
                self.train_lanes.append((lane, rk))
            self.spare = None

    # ------------------------------------------------------------------ rollout

    def rollout(self, step: int, start: float, end: float, replica_busy: list[list[list[float]]]) -> None:
        """A synchronous rollout window: busy as the replicas were, gaps between busy
        intervals are tool waits, time after a replica's last busy interval is tail."""
        for lane, rep in self.rollout_lanes:
            if rep < 0:
                lane.add(start, end, "idle", "unused", step)
                continue
            t = start
            ivs = replica_busy[rep] if rep < len(replica_busy) else []
            for a, b, tail in ivs:
                a, b = max(a, start), min(b, end)
                if b <= a:
                    continue
                lane.add(t, a, "idle", "tool_wait" if t > start else "rollout_tail", step)
                _busy_with_tail(lane, a, b, tail, step)
                t = b
            lane.add(t, end, "idle", "rollout_tail", step)

    def streaming_rollout(
        self, busy: list[list[list[float]]], gaps: list[list[tuple[float, float, str]]], step_of
    ) -> None:
        """A continuously running rollout pool (async): busy intervals and labelled gaps;
        `step_of(t)` tags an interval with the training step it overlaps."""
        for lane, rep in self.rollout_lanes:
            for a, b, tail in busy[rep]:
                _busy_with_tail(lane, a, b, tail, step_of(a))
            for a, b, label in gaps[rep]:
                lane.add(a, b, "idle", label, step_of(a))
            lane.intervals.sort(key=lambda iv: iv[0])

    # ------------------------------------------------------------------ other stages

    def _stage_lanes(self, role: str):
        if self.disaggregated:
            return self.train_lanes if role == "train" else self.rollout_lanes
        return self.train_lanes

    def span(self, step: int, start: float, end: float, state: str, label: str, role: str = "train") -> None:
        """Every lane of a pool (colocated: all lanes) in the same state."""
        for lane, _ in self._stage_lanes(role):
            lane.add(start, end, state, label, step)

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

    def finish(self, makespan: float, step_of) -> tuple[list[Lane], dict, float, dict, dict]:
        """Fill unaccounted time as stage serialisation; returns (lanes, idle per cause,
        busy GPU-seconds, idle per step and cause, busy per step)."""
        for lane in self.lanes:
            lane.intervals.sort(key=lambda iv: iv[0])
            filled = []
            t = 0.0
            for iv in lane.intervals:
                if iv[0] > t + 1e-9:
                    filled.append([t, iv[0], "idle", "stage_serialisation", step_of(t)])
                filled.append(iv)
                t = max(t, iv[1])
            if makespan > t + 1e-9:
                filled.append([t, makespan, "idle", "stage_serialisation", step_of(t)])
            lane.intervals = filled
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


def _busy_with_tail(lane: Lane, a: float, b: float, tail: float, step: int) -> None:
    """A replica's busy interval, its under-occupancy shown as tail idle at its end."""
    cut = b - min(max(tail, 0.0), b - a)
    lane.add(a, cut, "busy", "rollout", step)
    lane.add(cut, b, "idle", "rollout_tail", step)


def step_locator(ends: list[float], steps: list[int]):
    """t -> the step whose window [previous end, end) contains t."""
    arr = np.asarray(ends, dtype=np.float64)

    def step_of(t: float) -> int:
        i = int(np.searchsorted(arr, t, side="right"))
        return steps[min(i, len(steps) - 1)] if steps else -1

    return step_of
