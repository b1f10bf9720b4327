"""Replicas that share work: dynamic dispatch, work stealing, and a group's prompt
prefilled once per replica when its samples are spread over replicas.

- Dynamic dispatch (`WorkPool.queue`, a `SharedQueue`): requests wait at the cluster
  and a replica takes the next ones in the queue's order when it can admit them (a
  free slot, KV room and prefill budget, checked exactly as for its own queue), at
  most its share — ceil(queued / replicas) — per iteration, so that replicas free at
  the same moment split the queue (a router sends each request to a replica with
  room) rather than the first one taking it all. A replica admits what waits in its
  own queue first: later turns of its trajectories (they stay on the replica holding
  their prefix) and requests it preempted.
- Work stealing (`WorkPool.stealing`): a replica with a free slot, nothing waiting in
  its own queue and nothing in the shared queue takes requests waiting (not running,
  not planned for admission) in the queue of the replica with the most of them: from
  the end of that queue, at most its free slots and half of what waits there. Later
  turns of a trajectory are never taken (their prefix is cached where they wait).
- Migration (Seer's chunked requests over a global KV pool, `requests.chunk_requests`):
  when a chunk ends, its continuation (`WorkPool.migrating`) goes back to the cluster,
  which hands it to the replica with the fewest requests running, waiting and arriving
  (the one it ran on when none has fewer): it waits there ahead of the shared queue
  (after what arrived there before it) and is admitted without prefill (its KV is read
  from the pool) when a slot and KV room allow. Not through the shared queue: the
  replica the chunk freed a slot on plans first and would always take it back.
- Shared prompts: a request with a prefix key (`RequestStore.prefix`, a group's prompt)
  skips its prefill on a replica that already prefilled that key (or does so in the
  same iteration); a preempted request recomputes its whole context.

The replicas advance in global time order (`RolloutCluster.run_until`): a replica takes
work when it plans its next iteration, so it takes it at that iteration's start. Work
that appears later for a replica with a free slot wakes it — a queued arrival, a
preemption elsewhere that leaves a request to steal, a new head of the shared queue
(taken by another replica, or a new key order) when the old one did not fit its KV,
its own queue shortened by a thief: it stops its decode series at the first iteration
boundary after that time (the iteration under way stands: it was decided on what was
known when it started).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from itertools import islice
from typing import Any

from core.simulator.engine import INF, ReplicaEngine
from core.simulator.requests import RequestStore
from core.simulator.shared_queue import SharedQueue


class WorkPool:
    """What the replicas of one cluster share."""

    def __init__(self, store: RequestStore, queue: SharedQueue | None, stealing: bool) -> None:
        self.store = store
        self.queue = queue
        self.stealing = stealing
        self.engines: list[PooledEngine] = []
        self.dirty = False  # a replica was woken: the cluster re-orders its event heap
        # some replica may hold a request to steal: set when one is preempted or
        # submitted, cleared when a search finds none (and none is still to arrive)
        self.maybe_stealable = False
        # replicas whose last admission stopped at the shared queue's head (no KV room)
        self.blocked: set[PooledEngine] = set()
        self.migrating: set[int] = set()  # chunk continuations not handed to a replica yet
        self.migrations = 0  # continuations handed to another replica than their chunk's

    def has_ready(self, t: float) -> bool:
        return self.queue is not None and self.queue.peek(t) >= 0

    def wake_after(self, t: float) -> float:
        return self.queue.wake_after(t) if self.queue is not None else INF

    def wake(self, time: float, engines: Iterable[ReplicaEngine]) -> None:
        """`engines` look for work again at `time`."""
        for e in engines:
            e.wake(time)
            self.dirty = True

    def on_preempt(self, eng: PooledEngine) -> None:
        """A preempted request waits on `eng`: replicas with a free slot and nothing of
        their own waiting may steal it."""
        if self.stealing:
            self.maybe_stealable = True
            self.wake(eng.t, [e for e in self.engines if e is not eng and e.B < e.max_running and not e.waiting])

    def on_submit(self) -> None:
        """Requests were bound to replicas."""
        self.maybe_stealable = True

    def on_new_head(self, time: float, skip: ReplicaEngine | None = None) -> None:
        """The shared queue's head changed (taken, or a new order): replicas that could
        not fit the old head look at the new one."""
        if not self.blocked or (skip in self.blocked and len(self.blocked) == 1):
            return
        woken = [e for e in self.blocked if e is not skip]
        if woken:
            self.blocked.difference_update(woken)
            self.wake(time, woken)

    def settled(self) -> bool:
        """No replica can take work from another any more: nothing queued, no chunk's
        continuation still to hand off, and with
        stealing nothing to steal now or later (no request still to arrive, none waiting
        that could be stolen, no replica able to run out of KV and preempt one)."""
        if (self.queue is not None and len(self.queue)) or self.migrating:
            return False
        if not self.stealing:
            return True
        cont = self.store.cont
        for e in self.engines:
            if e.pending_arrivals():
                return False
            if any(not cont[r] for r in islice(e.waiting, e.planned_admissions(), None)):
                return False
            if e.kv_bound() > e.kv_capacity:
                return False
        return True

    def detach(self) -> None:
        """Settled for good (or done): the replicas go on as plain engines."""
        for e in self.engines:
            e.pool = None

    def migrate(self, rid: int, time: float, came_from: PooledEngine) -> None:
        """A chunk's continuation `rid`, due at `time`, to the least loaded replica."""
        self.migrating.discard(rid)
        to = min(self.engines, key=lambda e: (e.B + len(e.waiting) + e.pending_arrivals(), e is not came_from))
        to.take_over(rid, time)
        if to is not came_from:
            self.migrations += 1
            self.wake(time, [to])

    def steal_for(self, thief: PooledEngine) -> None:
        """Move requests from the most loaded replica's queue into `thief`'s."""
        if not self.maybe_stealable:
            return
        cont = self.store.cont
        best, best_n = None, 0
        for e in self.engines:
            if e is thief or not e.waiting:
                continue
            n = sum(1 for r in islice(e.waiting, e.planned_admissions(), None) if not cont[r])
            if n > best_n:
                best, best_n = e, n
        if best is None:  # none now; more only when one arrives or is preempted
            self.maybe_stealable = any(e.pending_arrivals() for e in self.engines)
            return
        take = min(thief.max_running - thief.B, (best_n + 1) // 2)
        queue = list(best.waiting)
        stolen: list[int] = []
        for i in range(len(queue) - 1, best.planned_admissions() - 1, -1):
            if len(stolen) == take:
                break
            if not cont[queue[i]]:
                stolen.append(queue[i])
                queue[i] = -1
        best.waiting.clear()
        best.waiting.extend(r for r in queue if r >= 0)
        thief.waiting.extend(reversed(stolen))
        self.wake(thief.t, [best])  # its queue changed: it looks again at its next boundary


class PooledEngine(ReplicaEngine):
    """A replica engine that takes work from its cluster's `WorkPool`."""

    def __init__(self, *args: Any, pool: WorkPool, index: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool = self.shared = pool
        # admission numbers unique across the cluster: a request preempted here and
        # stolen by another replica must not revive this replica's stale entries of it
        self._seq = index << 40
        self.prefixes: set[int] = set()  # shared-prompt keys prefilled here
        self._admitting: set[int] = set()  # keys of the planned prefill iteration
        self._handoff: list[tuple[int, float]] = []  # chunk continuations ended in this event

    def _admissible(self) -> tuple[int, int, int, int]:  # noqa: C901 -- the pool's admission rule: each branch is one limit it checks
        """Own queue first, then the shared queue (or a steal when both are empty);
        a shared prompt already prefilled here costs nothing."""
        pool = self.shared
        queue = pool.queue
        t = self.t
        waiting = self.waiting
        if not waiting and (queue is None or queue.peek(t) < 0):
            if pool.stealing:
                pool.steal_for(self)
            if not waiting:
                pool.blocked.discard(self)
                return 0, 0, 0, 0
        st = self.store
        prefill, context, prefix = st.prefill, st.context, st.prefix
        B = self.B
        room = self.max_running - B
        kv_free = self.kv_capacity - (self.S + B * self.G)
        budget = self.max_prefill_tokens
        seen = self.prefixes
        keys = self._admitting = set()
        k = sp = sp2 = need = 0
        fits = True
        for r in islice(waiting, room):
            p = prefill[r]
            key = prefix[r]
            new_key = key >= 0 and key not in seen and key not in keys
            if key >= 0 and not new_key:
                p = 0
            kv = context[r] + 1
            if (k and (sp + p > budget or need + kv > kv_free)) or (not k and kv > kv_free and B):
                fits = False
                break
            if new_key:
                keys.add(key)
            k += 1
            sp += p
            sp2 += p * p
            need += kv
        blocked = False
        if fits and queue is not None:
            pulled = k
            # its share of what is queued, so that the replicas planning at one moment
            # split the queue instead of the first filling up
            limit = min(room, k + -(-len(queue) // len(pool.engines)))
            while k < limit:
                r = queue.peek(t)
                if r < 0:
                    break
                p = prefill[r]
                key = prefix[r]
                new_key = key >= 0 and key not in seen and key not in keys
                if key >= 0 and not new_key:
                    p = 0
                kv = context[r] + 1
                if (k and (sp + p > budget or need + kv > kv_free)) or (not k and kv > kv_free and B):
                    blocked = not k
                    break
                waiting.append(queue.take())
                if new_key:
                    keys.add(key)
                k += 1
                sp += p
                sp2 += p * p
                need += kv
            if k > pulled:
                pool.on_new_head(t, skip=self)
        if blocked:
            pool.blocked.add(self)
        elif pool.blocked:
            pool.blocked.discard(self)
        return k, sp, sp2, need

    def _next_turn(self, rid: int, time: float) -> None:
        if rid in self.shared.migrating:
            self._handoff.append((rid, time))  # once the event is applied (B counts it)
        else:
            super()._next_turn(rid, time)

    def take_over(self, rid: int, time: float) -> None:
        """Continue a chunk's continuation `rid` from `time`, after what arrived before."""
        arrivals = self._arrivals
        while arrivals and arrivals[0][0] <= time <= self.t:
            self.waiting.append(heapq.heappop(arrivals)[2])
        ReplicaEngine._next_turn(self, rid, time)

    def _hand_off(self) -> None:
        for rid, time in self._handoff:
            self.shared.migrate(rid, time, self)
        self._handoff.clear()

    def _decode(self, m: int, tau: float) -> list[int]:
        done = super()._decode(m, tau)
        self._hand_off()
        return done

    def _prefill(self, k: int, tau: float, sp: int) -> list[int]:
        self.prefixes |= self._admitting
        done = super()._prefill(k, tau, sp)
        self._hand_off()
        return done

    def _preempt(self) -> None:
        before = self.preemptions
        super()._preempt()
        if self.preemptions > before:
            self.store.prefix[self.waiting[0]] = -1  # recomputes its whole context
            self.shared.on_preempt(self)
