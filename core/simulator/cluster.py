"""The rollout replicas of one run, sharing one request store.

With static dispatch (requests bound to a replica when submitted, `submit`) replicas
are independent engines (a trajectory stays on its replica), so a plain rollout runs
each to completion on its own (`run_all`). Policies that stop at a global condition
(partial rollout: the N-th finished group; async: a step's batch complete) use
`run_until`, which commits events of all replicas in global time order and asks a
callback after every event with finished requests.

Replicas may also share work (`pooled.py`): `shared_queue` — dynamic dispatch, requests
queued at the cluster (`enqueue`, in a key order the policy gives and may change with
`reorder`) and taken by a replica when it can admit them; `stealing` — idle replicas
take waiting requests from the most loaded one; `spread_groups` — a group's samples may
run on several replicas, each prefilling the group's prompt once (implied by the other
two). Shared work couples the replicas, so they then always advance in global time order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Protocol

import numpy as np

from core.simulator.engine import ReplicaEngine
from core.simulator.pooled import PooledEngine, WorkPool
from core.simulator.predictor import EngineCoefficients
from core.simulator.requests import RequestStore, chunk_requests, step_request_arrays
from core.simulator.shared_queue import SharedQueue
from core.simulator.workload import StepWorkload

INF = math.inf


class RequestNoise(Protocol):
    """A Monte-Carlo run's perturbation of requests (`request_noise.RequestNoise`)."""

    def scale_decode(self, arr: dict[str, np.ndarray], owner: np.ndarray) -> np.ndarray: ...


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
        shared_queue: bool = False,
        stealing: bool = False,
        spread_groups: bool = False,
        noise: RequestNoise | None = None,
        speculation: tuple[int, float] = (0, 1.0),
    ) -> None:
        self.store = RequestStore()
        # a Monte-Carlo run's perturbation of every request added (None: the replay of means)
        self.noise = noise
        # what every engine of this cluster is made with (a replaced one too)
        self._engine_args: dict = {
            "max_running": max_running,
            "max_prefill_tokens": max_prefill_tokens,
            "speculation": speculation,
        }
        self._coefficients, self._kv_capacity = coefficients, kv_capacity
        limits = {"kv_capacity": kv_capacity, "start_time": start_time}
        self.pool: WorkPool | None = None
        # a group's samples may run on several replicas, each prefilling its prompt once
        self.shared_prompts = shared_queue or stealing or spread_groups
        self.replicas: list[ReplicaEngine]
        if shared_queue or stealing or spread_groups:
            pool = self.pool = WorkPool(self.store, SharedQueue() if shared_queue else None, stealing)
            pool.engines = [
                PooledEngine(
                    self.store,
                    coefficients,
                    pool=pool,
                    index=i,
                    **self._engine_args,
                    **limits,
                )
                for i in range(n_replicas)
            ]
            self.replicas = list(pool.engines)
            if not self.coupled:
                pool.detach()  # prompts shared, but no work: each replica on its own
        else:
            self.replicas = [self._new_engine(start_time) for _ in range(n_replicas)]
        self._prefix_keys = 0  # shared-prompt keys handed out so far

    @property
    def coupled(self) -> bool:
        """Replicas share work, so they must advance in global time order."""
        return self.pool is not None and (self.pool.queue is not None or self.pool.stealing)

    def add_step(self, w: StepWorkload, owner: np.ndarray, chunk_tokens: int = 0) -> tuple[int, np.ndarray, np.ndarray]:
        """Add one step's requests; `owner` is a caller key per sample; with
        `chunk_tokens`, requests split in chunks that migrate (`requests.chunk_requests`,
        `pooled.WorkPool.migrating`).

        Returns (first request id, first request id per sample, last request id per
        sample) — a sample is finished when its last request is.
        """
        arr = step_request_arrays(w, shared_prompt=self.shared_prompts)
        noisy = self.noise is not None
        if chunk_tokens:
            if self.noise is not None:  # a request's length is perturbed whole, then chunked
                arr = {**arr, "decode": self.noise.scale_decode(arr, np.asarray(owner)[arr["sample"]])}
                noisy = False
            if arr["decode"].max(initial=0) > chunk_tokens:  # else no request splits: the same requests
                arr = chunk_requests(arr, chunk_tokens)
        base = self.add_requests(arr, np.asarray(owner)[arr["sample"]], noisy=noisy)
        first = base + arr["first"]
        n_req = arr["sample"].size
        last_local = np.r_[arr["first"][1:], n_req] - 1
        return base, first, base + last_local

    def add_requests(self, arr: dict[str, np.ndarray], owner: np.ndarray, noisy: bool = True) -> int:
        """Add request arrays (`requests.step_request_arrays` / `select_samples`) with
        a caller key per request; returns the first new request id. Shared-prompt keys
        are made unique within the cluster; a Monte-Carlo run's noise perturbs the
        lengths unless `noisy` is False (already perturbed)."""
        prefix: np.ndarray | None = None
        if self.shared_prompts and arr.get("prefix") is not None and arr["prefix"].size:
            prefix = np.where(arr["prefix"] >= 0, arr["prefix"] + self._prefix_keys, -1)
            self._prefix_keys += int(arr["prefix"].max()) + 1
        decode = arr["decode"] if self.noise is None or not noisy else self.noise.scale_decode(arr, np.asarray(owner))
        base = self.store.add(arr["prefill"], arr["context"], decode, arr["gap"], arr["next"], owner, prefix)
        if "migrate" in arr and arr["migrate"].any():
            assert self.pool is not None and self.pool.queue is not None, "a cluster made with shared_queue=True"
            self.pool.migrating.update((base + np.flatnonzero(arr["migrate"])).tolist())
        return base

    def submit(self, rids: np.ndarray, replica: np.ndarray, time: float) -> None:
        """Requests `rids` arrive at `time` at their replicas (order kept)."""
        rids = np.asarray(rids)
        replica = np.asarray(replica)
        for j in np.unique(replica):
            self.replicas[int(j)].submit_many(rids[replica == j].tolist(), time)
        if self.pool is not None:
            self.pool.on_submit()

    def enqueue(self, rids: np.ndarray, key: float, time: float) -> int:
        """Requests `rids` arrive at `time` in the shared queue (dynamic dispatch), to be
        served in this order under `key` (`SharedQueue.push`); returns the run's id."""
        return self.enqueue_runs([(rids, key)], time)[0]

    def enqueue_runs(self, runs: list[tuple[np.ndarray, float]], time: float) -> list[int]:
        """Several runs (rids, key) at once, arriving at `time`; their ids."""
        assert self.pool is not None and self.pool.queue is not None, "a cluster made with shared_queue=True"
        queue = self.pool.queue
        ids = [queue.push(np.asarray(rids).tolist(), float(key), time) for rids, key in runs]
        self.pool.wake(time, self.replicas)
        return ids

    def reorder(self, run: int, key: float, time: float) -> None:
        """A new key, from `time` on, for a run still waiting in the shared queue."""
        assert self.pool is not None and self.pool.queue is not None, "a cluster made with shared_queue=True"
        if self.pool.queue.reorder(run, key):
            self.pool.on_new_head(time)

    def run_all(self) -> None:
        """Run to completion: in global time order while the replicas share work, then
        (once `WorkPool.settled`: e.g. the shared queue is empty) each on its own."""
        if self.coupled:
            self.run_until(self._settled_check())
            if self.pool is not None:
                self.pool.detach()
        for eng in self.replicas:
            eng.run()

    def _settled_check(self) -> Callable[[list[int], float], bool]:
        pool = self.pool
        assert pool is not None
        wait = 0  # the full check reads every replica's work: not at every event

        def check(done: list[int], now: float) -> bool:
            nonlocal wait
            if (pool.queue is not None and len(pool.queue)) or wait:
                wait = max(0, wait - 1)
                return False
            wait = 255
            return pool.settled()

        return check

    def run_until(self, on_finish: Callable[[list[int], float], bool]) -> float | None:
        """Commit events in global time order until `on_finish(finished, t)` is true;
        returns that time, or None when all work is done first."""
        pool = self.pool
        heap = self._event_heap()
        while heap:
            t, i = heap[0]
            if t == INF:
                return None
            eng = self.replicas[i]
            now = eng.plan()
            if now != t:
                heapq.heapreplace(heap, (now, i))
                continue
            while True:  # this replica's events, while they come before any other's
                done = eng.commit()
                if done and on_finish(done, eng.t):
                    return eng.t
                nxt = eng.plan()  # (taking shared work may wake other replicas)
                if pool is not None and pool.dirty:
                    heap = self._event_heap()  # a woken replica's next event may come sooner
                    break
                n = len(heap)
                other = (heap[1] if n == 2 or heap[1] < heap[2] else heap[2]) if n > 1 else (INF, -1)
                if nxt == INF or (nxt, i) >= other:
                    heapq.heapreplace(heap, (nxt, i))
                    break
        return None

    def run_groups(
        self, target: int, done: int, last_item: np.ndarray, item_group: np.ndarray, group_left: np.ndarray
    ) -> tuple[bool, list[tuple[float, int]]]:
        """Run until `target` groups are done (`done` already are): a group is done when
        the last requests of its items (`last_item`: per request, its item or -1;
        `item_group`: per item, its group) have all finished, counted down in
        `group_left` (a copy). Returns whether they were, and (end, rid) of the requests
        finished, in order."""
        log: list[tuple[float, int]] = []
        count = done

        def enough(rids: list[int], now: float) -> bool:
            nonlocal count
            for r in rids:
                log.append((now, r))
                k = last_item[r] if r < last_item.size else -1
                if k >= 0:
                    g = item_group[k]
                    group_left[g] -= 1
                    count += group_left[g] == 0
            return count >= target

        return self.run_until(enough) is not None, log

    def run_groups_log(
        self, target: int, done: int, last_item: np.ndarray, item_group: np.ndarray, group_left: np.ndarray
    ) -> tuple[bool, np.ndarray, np.ndarray]:
        """`run_groups`, the requests finished as arrays: their ends, their ids."""
        reached, log = self.run_groups(target, done, last_item, item_group, group_left)
        ends = np.asarray([e for e, _ in log], dtype=np.float64)
        return reached, ends, np.asarray([r for _, r in log], dtype=np.int64)

    def run_to(self, until: float, replicas: list[int] | None = None) -> list[tuple[float, int]]:
        """Commit every event completing by `until`; (end, rid) of the requests finished."""
        engines = self.replicas if replicas is None else [self.replicas[j] for j in replicas]
        end = self.store.end
        return [(end[r], r) for eng in engines for r in eng.run(until=until)]

    def replace_replica(self, j: int, start_time: float) -> None:
        """An empty engine in replica j's place from `start_time` (static dispatch)."""
        self.replicas[j] = self._new_engine(start_time)

    def _new_engine(self, start_time: float) -> ReplicaEngine:
        return ReplicaEngine(
            self.store, self._coefficients, kv_capacity=self._kv_capacity, start_time=start_time, **self._engine_args
        )

    def _event_heap(self) -> list[tuple[float, int]]:
        """Every replica's next event; planning may wake others, so until none is woken."""
        while True:
            heap = [(eng.plan(), i) for i, eng in enumerate(self.replicas)]
            if self.pool is None or not self.pool.dirty:
                break
            self.pool.dirty = False
        heapq.heapify(heap)
        return heap

    def advance_to(self, time: float) -> None:
        """Bring every replica to `time` (decode progress included), e.g. at a stop."""
        for eng in self.replicas:
            eng.advance_to(time)

    def unfinished(self) -> list[int]:
        """Requests not finished: each replica's (`ReplicaEngine.unfinished`, progress
        updated) and those still in the shared queue."""
        out = [r for eng in self.replicas for r in eng.unfinished()]
        if self.pool is not None and self.pool.queue is not None:
            out += self.pool.queue.drain()
        return out

    def stop_at(self, time: float) -> None:
        """Every replica advanced to `time` and its running requests' progress applied
        (`ReplicaEngine.advance_to`, then `unfinished`), the requests left unlisted."""
        for eng in self.replicas:
            eng.advance_to(time)
            eng.unfinished()

    def busy_intervals(self, lo: float, hi: float) -> list[list[list[float]]]:
        """Per replica, busy intervals [start, end, tail] within [lo, hi] (the open one
        up to the replica's current time)."""
        return [clip_intervals(list(eng.busy), eng.open_busy(), lo, hi) for eng in self.replicas]


def clip_intervals(ivs: list[list[float]], cur: list[float] | None, lo: float, hi: float) -> list[list[float]]:
    """Busy intervals [start, end, tail] (and the open one, `cur`) cut to [lo, hi]."""
    if cur is not None:
        ivs.append(cur)
    kept = []
    for a, b, tail in ivs:
        a2, b2 = max(a, lo), min(b, hi)
        if b2 > a2:
            kept.append([a2, b2, min(tail, b2 - a2)])
    return kept
