"""The rollout replicas of one run, sharing one request store.

Replicas are independent engines (a trajectory stays on its replica), so a plain
rollout runs each to completion on its own (`run_all`). Policies that stop at a global
condition (partial rollout: the N-th finished group; async: a step's batch complete)
use `run_until`, which commits events of all replicas in global time order and asks a
callback after every event with finished requests.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np

from core.simulator.engine import ReplicaEngine
from core.simulator.predictor import EngineCoefficients
from core.simulator.requests import RequestStore, step_request_arrays
from core.simulator.workload import StepWorkload

INF = math.inf


class RolloutCluster:
    def __init__(
        self,
        n_replicas: int,
        coefficients: EngineCoefficients,
        *,
        max_running: int,
        kv_capacity: float,
        max_prefill_tokens: int,
        start_time: float = 0.0,
    ) -> None:
        self.store = RequestStore()
        self.replicas = [
            ReplicaEngine(
                self.store,
                coefficients,
                max_running=max_running,
                kv_capacity=kv_capacity,
                max_prefill_tokens=max_prefill_tokens,
                start_time=start_time,
            )
            for _ in range(n_replicas)
        ]

    def add_step(self, w: StepWorkload, owner: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """Add one step's requests; `owner` is a caller key per sample.

        Returns (first request id, first request id per sample, last request id per
        sample) — a sample is finished when its last request is.
        """
        arr = step_request_arrays(w)
        base = self.store.add(
            arr["prefill"], arr["context"], arr["decode"], arr["gap"], arr["next"], np.asarray(owner)[arr["sample"]]
        )
        first = base + arr["first"]
        n_req = arr["sample"].size
        last_local = np.r_[arr["first"][1:], n_req] - 1
        return base, first, base + last_local

    def submit(self, rids: np.ndarray, replica: np.ndarray, time: float) -> None:
        """Requests `rids` arrive at `time` at their replicas (order kept)."""
        rids = np.asarray(rids)
        replica = np.asarray(replica)
        for j in np.unique(replica):
            self.replicas[int(j)].submit_many(rids[replica == j].tolist(), time)

    def run_all(self) -> None:
        for eng in self.replicas:
            eng.run()

    def run_until(self, on_finish: Callable[[list[int], float], bool]) -> float | None:
        """Commit events in global time order until `on_finish(finished, t)` is true;
        returns that time, or None when all work is done first."""
        heap = [(eng.plan(), i) for i, eng in enumerate(self.replicas)]
        heapq.heapify(heap)
        while heap:
            t, i = heap[0]
            if t == INF:
                return None
            eng = self.replicas[i]
            now = eng.plan()
            if now != t:
                heapq.heapreplace(heap, (now, i))
                continue
            done = eng.commit()
            if done and on_finish(done, eng.t):
                return eng.t
            heapq.heapreplace(heap, (eng.plan(), i))
        return None

    def advance_to(self, time: float) -> None:
        """Bring every replica to `time` (decode progress included), e.g. at a stop."""
        for eng in self.replicas:
            eng.advance_to(time)

    def busy_intervals(self, lo: float, hi: float) -> list[list[list[float]]]:
        """Per replica, busy intervals [start, end, tail] within [lo, hi] (the open one
        up to the replica's current time)."""
        out = []
        for eng in self.replicas:
            ivs = list(eng.busy)
            cur = eng.open_busy()
            if cur is not None:
                ivs.append(cur)
            kept = []
            for a, b, tail in ivs:
                a2, b2 = max(a, lo), min(b, hi)
                if b2 > a2:
                    kept.append([a2, b2, min(tail, b2 - a2)])
            out.append(kept)
        return out
