"""Continuous batching on one rollout replica, advanced from event to event.

The replica runs iterations back to back. A *prefill iteration* admits waiting requests
(FIFO) while fewer than `max_running` are running, their KV fits in `kv_capacity` tokens
and their uncached tokens fit in `max_prefill_tokens` (at least one is always admitted
into an empty engine); it produces each admitted request's first token. Otherwise a
*decode iteration* gives every running request one token. When the KV cache would
overflow, the most recently admitted request is preempted by recompute: it goes back to
the head of the queue and later prefills its prompt plus what it had generated.

Event-driven: between events — a request finishes, a new request arrives (a tool call
returns) while there is a free slot, the KV cache fills — the running batch is constant,
so the next m decode iterations are one arithmetic series (ΣKV grows by B per
iteration) and are advanced in one closed-form step, never token by token.

KV accounting: a request admitted at decode-iteration index g0 with `context` prompt
tokens holds context + 1 + (G − g0) tokens during decode iteration G, and finishes at
iteration g0 + left − 2 (its first token came from the prefill). So ΣKV(G) = S + B·G
with S = Σ(context + 1 − g0) over running requests.

Interface (used by cluster.py): `submit(rid, time)`, `plan()` → the time the next event
completes (inf when idle with nothing pending), `commit()` applies it and returns the
requests that finished, `run()` loops to completion, `advance_to(t)` applies the decode
iterations completed by t (for stopping mid-run), `unfinished()` lists what is left.
`wake(t)`: the cluster may have work for this replica from time t on (a shared queue's
arrival, a request to steal): with a free slot it stops its decode series at the first
iteration boundary at or after t, or wakes up then when idle, and plans again
(`pooled.PooledEngine` takes that work; here a wake only splits a series, which leaves
the result unchanged).
Busy intervals (merged) are kept in `busy` as [start, end, tail]: `tail` is the
under-occupancy within — seconds × (1 − running / peak running) of decode iterations run
while nothing was waiting to be admitted (slots left empty by finished samples: the
rollout long tail, refined by batching). `decoded_tokens`, `prefilled_tokens`,
`preemptions` count work.

Speculative decoding of the tail (`speculation` = (tail_seqs, factor), off at (0, 1)):
while at most `tail_seqs` sequences run, each decode iteration drafts and verifies, so
a sequence gains `accept` tokens per iteration of `cost` times the plain iteration's
time; token by token, a decode iteration's time is scaled by factor = cost / accept
(`config.EngineLimits.speculation`). The batch is constant between events, so a whole
decode series is in the tail or not.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable
from itertools import islice
from typing import Protocol

from core.simulator.predictor import EngineCoefficients, decode_series, iterations_until
from core.simulator.requests import RequestStore

INF = math.inf

_IDLE, _PREFILL, _DECODE, _PREEMPT = 0, 1, 2, 3


class SharedWork(Protocol):
    """What a replica asks of the work its cluster shares (`pooled.WorkPool`)."""

    def has_ready(self, t: float) -> bool: ...

    def wake_after(self, t: float) -> float: ...


class ReplicaEngine:
    def __init__(
        self,
        store: RequestStore,
        coefficients: EngineCoefficients,
        *,
        max_running: int,
        kv_capacity: float,
        max_prefill_tokens: int,
        start_time: float = 0.0,
        speculation: tuple[int, float] = (0, 1.0),
    ) -> None:
        self.store = store
        c = coefficients
        self._da, self._db, self._dc = c.decode_a, c.decode_b, c.decode_c
        self._pa, self._pb, self._pc = c.prefill_a, c.prefill_b, c.prefill_c
        self.max_running = max_running
        self.kv_capacity = kv_capacity
        self.max_prefill_tokens = max_prefill_tokens
        self._spec_seqs, self._spec_factor = speculation
        self.t = start_time
        self.G = 0  # decode iterations done so far
        self.B = 0  # running requests
        self.S = 0  # ΣKV(G) = S + B·G
        self._heap: list[tuple[int, int, int]] = []  # (finish iteration, admission seq, rid)
        self._arrivals: list[tuple[float, int, int]] = []  # (time, order, rid)
        self._n_arrivals = 0
        self.waiting: deque[int] = deque()
        self._stack: list[tuple[int, int]] = []  # (rid, seq) in admission order
        self._seq = 0
        self.busy: list[list[float]] = []  # [start, end, tail seconds within]
        self._peak = 0  # most running requests in the open busy interval
        self._tail = 0.0  # its under-occupancy seconds so far
        self.idle_gaps: list[tuple[float, float, int]] = []  # (start, end, rid that arrived; -1: a wake)
        self._busy_start: float | None = None
        self.decoded_tokens = 0
        self.prefilled_tokens = 0
        self.preemptions = 0
        self.recompute_s = 0.0  # prefill seconds spent recomputing preempted requests
        self._plan: tuple | None = None
        self.pool: SharedWork | None = None  # the work the cluster shares, in a pooled cluster
        self._wake = INF  # when the cluster may have work for this replica next
        self._wakes: list[float] = []  # wake times announced and still ahead

    # ------------------------------------------------------------------ input

    def submit(self, rid: int, time: float) -> None:
        """Request `rid` arrives at `time` (>= the current time)."""
        self.store.arrive[rid] = time
        if time <= self.t:
            self.waiting.append(rid)
        else:
            self._n_arrivals += 1
            heapq.heappush(self._arrivals, (time, self._n_arrivals, rid))
        self._plan = None

    def submit_many(self, rids: Iterable[int], time: float) -> None:
        """Several requests arriving together, in order."""
        arrive = self.store.arrive
        for r in rids:
            arrive[r] = time
        if time <= self.t:
            self.waiting.extend(rids)
        else:
            for r in rids:
                self._n_arrivals += 1
                heapq.heappush(self._arrivals, (time, self._n_arrivals, r))
        self._plan = None

    def wake(self, time: float) -> None:
        """The cluster may have work for this replica from `time` on (see the module doc).
        The iteration under way is not reconsidered (it was decided on what was known
        when it started); a decode series is cut at the first iteration boundary at or
        after `time`, an idle replica wakes up then."""
        heapq.heappush(self._wakes, time)
        if time >= self._wake:
            return
        self._wake = time
        plan = self._plan
        if plan is None or self.B >= self.max_running or plan[0] <= time:
            return
        if plan[1] == _DECODE:
            alpha, beta = self._series()
            m = iterations_until(time - self.t, alpha, beta, at_least=True)
            if m < plan[2]:
                tau = decode_series(m, alpha, beta)
                self._plan = (self.t + tau, _DECODE, m, tau)
        elif plan[1] == _IDLE:
            self._plan = (time, _IDLE, -1)

    def _next_wake(self, t: float) -> None:
        wakes = self._wakes
        while wakes and wakes[0] <= t:
            heapq.heappop(wakes)
        self._wake = min(wakes[0] if wakes else INF, self.pool.wake_after(t) if self.pool is not None else INF)

    def _series(self) -> tuple[float, float]:
        """(first iteration time, growth per iteration) of a decode series from now; per
        token, so scaled by the speculation factor in the tail."""
        B = self.B
        alpha = self._da + self._db * (self.S + B * self.G) + self._dc * B
        beta = self._db * B
        if B <= self._spec_seqs:
            f = self._spec_factor
            return alpha * f, beta * f
        return alpha, beta

    # ------------------------------------------------------------------ planning

    def planned_admissions(self) -> int:
        """Waiting requests the planned prefill iteration admits (0 for other plans)."""
        plan = self._plan
        return plan[2] if plan is not None and plan[1] == _PREFILL else 0

    def plan(self) -> float:  # noqa: C901 -- the engine's admission rule: each branch is one limit it checks
        """When the next event completes (and remember what it is)."""
        if self._plan is not None:
            return self._plan[0]
        t = self.t
        if self._wake <= t:  # a wake is due now: this plan takes what it announced
            self._next_wake(t)
        arrivals = self._arrivals
        while arrivals and arrivals[0][0] <= t:
            self.waiting.append(heapq.heappop(arrivals)[2])
        heap = self._heap
        seqs = self.store.seq
        while heap and seqs[heap[0][2]] != heap[0][1]:
            heapq.heappop(heap)  # stale entry of a preempted request
        B = self.B
        G = self.G
        if B < self.max_running and (self.waiting or self.pool is not None):
            k, sp, sp2, need = self._admissible()
            if k:
                tau = self._pa + self._pb * sp + self._pc * sp2
                self._plan = (t + tau, _PREFILL, k, tau, sp)
                return t + tau
        t_next = arrivals[0][0] if arrivals else INF  # the next arrival or wake
        if self._wake < t_next:
            t_next = self._wake
        if B:
            kv_fits = self.S + B * G <= self.kv_capacity
            if not kv_fits and B > 1:
                self._plan = (t, _PREEMPT)
                return t
            m = heap[0][0] - G + 1
            if kv_fits and self.kv_capacity != INF:
                m_kv = int((self.kv_capacity - self.S) // B) - G + 1
                if m_kv < m:
                    m = m_kv
            alpha, beta = self._series()
            if t_next != INF and B < self.max_running:
                m_a = iterations_until(t_next - t, alpha, beta, at_least=True)
                if m_a < m:
                    m = m_a
            tau = decode_series(m, alpha, beta)
            self._plan = (t + tau, _DECODE, m, tau)
            return t + tau
        if t_next != INF:
            # idle until then; the request that arrives (-1: a wake from the cluster)
            rid = arrivals[0][2] if arrivals and arrivals[0][0] == t_next else -1
            self._plan = (t_next, _IDLE, rid)
            return t_next
        self._plan = (INF, _IDLE)
        return INF

    def _admissible(self) -> tuple[int, int, int, int]:
        """How many waiting requests the next prefill iteration admits."""
        st = self.store
        prefill, context = st.prefill, st.context
        room = self.max_running - self.B
        kv_free = self.kv_capacity - (self.S + self.B * self.G)
        budget = self.max_prefill_tokens
        k = sp = sp2 = need = 0
        for r in islice(self.waiting, room):
            p = prefill[r]
            kv = context[r] + 1
            if k and (sp + p > budget or need + kv > kv_free):
                break
            if not k and kv > kv_free and self.B:
                break  # wait for memory to free up
            k += 1
            sp += p
            sp2 += p * p
            need += kv
        return k, sp, sp2, need

    # ------------------------------------------------------------------ events

    def commit(self) -> list[int]:
        """Apply the planned event; returns the requests that finished in it."""
        if self._plan is None:
            self.plan()
        plan = self._plan
        assert plan is not None  # plan() always sets it
        self._plan = None
        kind = plan[1]
        if kind == _DECODE:
            return self._decode(plan[2], plan[3])
        if kind == _PREFILL:
            return self._prefill(plan[2], plan[3], plan[4])
        if kind == _PREEMPT:
            self._preempt()
            return []
        # idle until the next arrival
        if plan[0] == INF:
            return []
        self._close_busy(self.t)
        self.idle_gaps.append((self.t, plan[0], plan[2]))
        self.t = plan[0]
        return []

    def _mark_busy(self) -> None:
        if self._busy_start is None:
            self._busy_start = self.t
            self._peak = 0
            self._tail = 0.0

    def _close_busy(self, end: float) -> None:
        if self._busy_start is not None:
            self.busy.append([self._busy_start, max(end, self._busy_start), min(self._tail, end - self._busy_start)])
            self._busy_start = None

    def _decode(self, m: int, tau: float) -> list[int]:
        self._mark_busy()
        B = self.B
        if B < self._peak and not self.waiting and (self.pool is None or not self.pool.has_ready(self.t)):
            # nothing left to admit: the free slots are the rollout tail
            self._tail += tau * (1.0 - B / self._peak)
        self.t += tau
        self.G += m
        self.decoded_tokens += B * m
        G = self.G
        heap = self._heap
        st = self.store
        seqs, end, g0s, kv0, nxt, gen = st.seq, st.end, st.g0, st.kv0, st.next, st.generated
        pop = heapq.heappop
        done = []
        t = self.t
        S = self.S
        while heap and heap[0][0] < G:
            _, seq, r = pop(heap)
            if seqs[r] != seq:
                continue
            seqs[r] = -1
            B -= 1
            g0 = g0s[r]
            S -= kv0[r] - g0
            gen[r] += 1 + G - g0
            end[r] = t
            done.append(r)
            n = nxt[r]
            if n >= 0:
                self._next_turn(n, t + st.gap[r])
        self.B = B
        self.S = S
        return done

    def _next_turn(self, rid: int, time: float) -> None:
        """A trajectory's next turn arrives after its tool call (at once when gap 0)."""
        self.store.arrive[rid] = time
        if time <= self.t:
            self.waiting.append(rid)
        else:
            self._n_arrivals += 1
            heapq.heappush(self._arrivals, (time, self._n_arrivals, rid))

    def _prefill(self, k: int, tau: float, sp: int) -> list[int]:
        self._mark_busy()
        st = self.store
        seqs, left, context, g0s, kv0, admit = st.seq, st.left, st.context, st.g0, st.kv0, st.admit
        G = self.G
        start = self.t
        t = self.t = start + tau
        self.prefilled_tokens += sp
        done = []
        waiting = self.waiting
        heap, stack = self._heap, self._stack
        push = heapq.heappush
        seq = self._seq
        B, S = self.B, self.S
        for _ in range(k):
            r = waiting.popleft()
            if admit[r] != admit[r]:  # NaN: first admission
                admit[r] = start
            n_left = left[r]
            if n_left == 1:
                st.generated[r] += 1
                st.end[r] = t
                done.append(r)
                n = st.next[r]
                if n >= 0:
                    self._next_turn(n, t + st.gap[r])
                continue
            seq += 1
            seqs[r] = seq
            g0s[r] = G
            kv = context[r] + 1
            kv0[r] = kv
            S += kv - G
            B += 1
            push(heap, (G + n_left - 2, seq, r))
            stack.append((r, seq))
        self._seq = seq
        self.B, self.S = B, S
        if B > self._peak:
            self._peak = B
        return done

    def _preempt(self) -> None:
        """Recompute-preempt the most recently admitted running request."""
        st = self.store
        while self._stack:
            r, seq = self._stack.pop()
            if st.seq[r] != seq:
                continue
            gen = 1 + (self.G - st.g0[r])
            st.seq[r] = -1
            self.B -= 1
            self.S -= st.kv0[r] - st.g0[r]
            st.generated[r] += gen
            st.left[r] -= gen
            st.context[r] += gen
            p = st.prefill[r] = st.context[r]
            self.waiting.appendleft(r)
            self.preemptions += 1
            # its re-prefill, all of it work done before: its share of a prefill iteration
            self.recompute_s += self._pb * p + self._pc * p * p
            return

    # ------------------------------------------------------------------ driving

    def run(self, until: float = INF) -> list[int]:
        """Process events completing no later than `until`; returns finished requests."""
        done: list[int] = []
        while True:
            t_next = self.plan()
            if t_next == INF or t_next > until:
                break
            done += self.commit()
        return done

    def advance_to(self, time: float) -> None:
        """Apply the decode iterations that complete by `time` (< the next event)."""
        if time <= self.t:
            return
        self.plan()
        plan = self._plan
        assert plan is not None  # plan() always sets it
        if plan[1] == _DECODE and self.B:
            alpha, beta = self._series()
            m = iterations_until(time - self.t, alpha, beta, at_least=False)
            m = min(m, plan[2] - 1)
            if m > 0:
                self._plan = None
                self._decode(m, decode_series(m, alpha, beta))
        self._plan = None

    def open_busy(self) -> list[float] | None:
        """The busy interval in progress as [start, now, tail], or None."""
        if self._busy_start is None:
            return None
        return [self._busy_start, self.t, min(self._tail, self.t - self._busy_start)]

    def pending_arrivals(self) -> int:
        """Requests submitted or started (later turns) that have not arrived yet."""
        return len(self._arrivals)

    def kv_bound(self) -> int:
        """The most KV tokens the work bound to this replica can ever hold at once: per
        trajectory (running, waiting or arriving, with its later turns) the largest
        context + tokens to generate of its turns, which run one after another."""
        st = self.store
        ctx, left, nxt, seqs = st.context, st.left, st.next, st.seq
        heads = [r for r, seq in self._stack if seqs[r] == seq]
        heads += self.waiting
        heads += [r for _, _, r in self._arrivals]
        total = 0
        for r in heads:
            most = 0
            while r >= 0:
                most = max(most, ctx[r] + left[r])
                r = nxt[r]
            total += most
        return total

    def unfinished(self) -> list[int]:
        """Requests submitted but not finished (running, waiting or arriving), with
        `generated`/`left`/`context` updated to their progress at the current time."""
        st = self.store
        out = []
        for r, seq in self._stack:
            if st.seq[r] == seq:
                gen = self.G - st.g0[r] + 1
                st.generated[r] += gen
                st.left[r] -= gen
                st.context[r] += gen
                st.prefill[r] = st.context[r]
                st.seq[r] = -1
                out.append(r)
        out += list(self.waiting)
        out += [r for _, _, r in self._arrivals]
        return out
