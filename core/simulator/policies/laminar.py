"""Laminar (arXiv 2510.12633): trajectory-level asynchrony on disaggregated pools.

- Each rollout replica works on its own: it pulls a batch of prompt groups (in trace
  order; past the trace's end they cycle through it again, a stand-in for the prompt
  pool's further prompts, so the last updates need not wait for the trace's longest
  trajectories), generates them with the weights it holds and, once its batch is done,
  loads the latest weights
  from its host's relay worker (weight bytes / `relay_load_gb_s`, the replica idle as
  weight_sync) and pulls the next batch. Groups reach the experience buffer as they
  finish; nothing waits for a global synchronisation.
- The trainer pushes new weights to the master relay (the trainer busy as weight_sync
  for weight bytes / `weight_sync_bandwidth`) and resumes at once; the relays
  broadcast them among themselves off everyone's critical path (one more transfer
  time) before rollouts can load them.
- Bounded staleness per trajectory: update u trains the step's N_u groups, oldest
  weight version first, and every trajectory is trained at most `max_staleness`
  versions after the weights that generated it: a replica holding version v starts
  no more groups than updates up to v + max_staleness will consume (it waits:
  staleness_wait), and the trainer does not start update u while a group generated
  with version u - max_staleness or older is unfinished (it waits: staleness_wait).
- Dynamic repack: when a replica's batch has dwindled to its tail (at most
  `repack_threshold` x max_running_seqs running, nothing waiting) and another replica
  holding the same weights is in its tail too, the one running fewer trajectories
  hands them to the other — which resumes them by recomputing prompt + generated
  tokens (busy recompute) — and pulls new weights and a new batch.

Trace step j is update j. Not modelled: relay fault tolerance, the partial-response
pool, KV-cache transfer on repack (modelled as recomputation).

The replay decides after engine events: a replica's batch ended, it entered its tail
(repack), a group finished while the trainer waits for one. On the compiled loop
(`_Compiled`) the kernel runs until the next of these or the next event of the policy's
own (weight loads, the trainer); on the Python engine (`reference_engine()`) it steps
event by event, the reference the compiled run equals.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.simulator import kernel as K
from core.simulator.array_cluster import ArrayCluster
from core.simulator.policies.base import Env, PolicyRun, reward_seconds, step_result, sync_weights, train_on
from core.simulator.policies.carryover import ChainPool, FreshStream, group_tokens
from core.simulator.policies.pool_run import PoolRun
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.timeline import TimelineBuilder, step_locator
from core.simulator.training import weight_sync_seconds
from core.simulator.workload import StepWorkload


@dataclass(frozen=True)
class LaminarParams:
    max_staleness: int = param(
        4,
        "most weight versions between the weights generating a trajectory and the update training it (the "
        "paper bounds staleness per trajectory; this default is ours)",
        ge=0,
        grid=(1,),
    )
    batch_groups: int | None = param(
        None,
        "prompt groups a rollout replica pulls per batch; null: the step's groups divided among the replicas",
        ge=1,
    )
    repack: bool = param(True, "consolidate replicas' long-tail trajectories onto fewer replicas (dynamic repack)")
    repack_threshold: float = param(
        0.25,
        "a replica is in its tail, and may be repacked, when at most this share of max_running_seqs still runs "
        "(this default is ours)",
        gt=0.0,
        le=1.0,
    )
    relay_load_gb_s: float = param(
        25.0,
        "GB/s at which a rollout replica loads new weights from its host's relay worker (host to GPU; "
        "default: a PCIe 4.0 x16 link)",
        gt=0.0,
    )


class _Laminar:
    def __init__(self, env: Env, workload: list[StepWorkload]) -> None:
        self.env, self.w = env, workload
        self.prm: LaminarParams = env.params
        self.tb = TimelineBuilder(env.cluster, disaggregated=True)
        self.pool = ChainPool(workload)
        self.stream = FreshStream(workload, self.pool)
        self.run = PoolRun(env, self.pool, 0.0)
        self.run.on_group_done = self._group_done
        n = env.cluster.rollout_replicas
        self.tail = self.prm.repack_threshold * env.limits.max_running_seqs
        # the compiled loop counts finished samples per replica in bulk (`_absorb`)
        self.fast = _Compiled(self.run, n, self.tail if self.prm.repack else -1.0) if self._compiled() else None
        if self.fast is None:
            self.run.on_item_done = self._item_done
        self.version = [0] * n
        self.loading = [0] * n  # the version a replica is loading
        self.state = ["idle"] * n  # run | pull | wait
        self.since = [0.0] * n
        self.left = [0] * n  # unfinished samples of the replica's batch
        self.ended: list[int] = []
        self.marks: list[tuple[int, float, float, str]] = []  # replica idle intervals
        self.gversion: dict[int, int] = {}
        self.in_flight: Counter = Counter()
        self.started = [0]  # groups started per weight version
        self.n_started = 0
        self.buffer: list[tuple[int, float, int]] = []  # (version, time, group id)
        self.open_groups: set[int] = set()
        self.n_groups = [w.n_groups for w in workload]
        self.cum = np.cumsum(self.n_groups)
        self.transfer = weight_sync_seconds(env.model, env.cluster)
        self.pull_s = env.model.weight_bytes / (self.prm.relay_load_gb_s * 1e9)
        self.avail = [0.0]  # when each weight version can be pulled
        self.events: list[tuple[float, int, str, int]] = []
        self.engine_events: list[tuple[float, int, int]] = []  # (time, stamp, replica)
        self.stamp = [0] * n
        self.seq = 0
        self.u, self.free = 0, 0.0
        self.now = 0.0  # the time of the last event handled
        self.wait_since, self.wait_reason = 0.0, "trainer_waits_rollout"
        self.steps: list = []
        self.repacks = 0
        self.stale_wait = 0.0
        self.progress: Callable[[float], None] = lambda f: None

    # ------------------------------------------------------------------ the loop

    def _compiled(self) -> bool:
        return isinstance(self.run.rc, ArrayCluster)

    def replay(self) -> None:
        for i in range(len(self.version)):
            self._start_batch(i, 0.0)
        if self.fast is not None:
            self._replay_compiled(self.fast)
            return
        rc = self.run.rc
        for i in range(len(self.version)):
            self._schedule(i)
        while self.u < len(self.w):
            heap = self.engine_events
            while heap and heap[0][1] != self.stamp[heap[0][2]]:
                heapq.heappop(heap)  # superseded
            t_eng = heap[0][0] if heap else math.inf
            if heap and rc.replicas[heap[0][2]].plan() != t_eng:
                self._schedule(heap[0][2])
                continue
            t_ext = self.events[0][0] if self.events else math.inf
            if t_ext == math.inf and t_eng == math.inf:
                raise RuntimeError("laminar replay stalled")  # the bound makes this unreachable
            touched = self._external() if t_ext <= t_eng else self._engine(heap[0][2])
            for i in set(touched):
                self._schedule(i)

    def _schedule(self, i: int) -> None:
        """Replica i's next event in the queue (one live entry per replica)."""
        self.stamp[i] += 1
        heapq.heappush(self.engine_events, (self.run.rc.replicas[i].plan(), self.stamp[i], i))

    def _replay_compiled(self, c: _Compiled) -> None:
        """The loop above on the compiled loop: the kernel stops only where a decision
        may change (`_Compiled.advance`); the samples finished on the way are counted
        after it, at their times."""
        while self.u < len(self.w):
            t_ext = self.events[0][0] if self.events else math.inf
            # groups finished before the stop left the trainer as it was (else it stopped there)
            n_buffered = len(self.buffer)
            # engine events at t_ext come after the policy's own (the queue's order)
            i, ends, rids = c.advance(np.nextafter(t_ext, -math.inf), self.state, self.version, self._group_stop())
            self._absorb(ends, rids)
            if i >= 0:
                self.now = c.rc.replicas[i].t
                if self.left[i] == 0 and self.state[i] == "run":
                    self.ended.append(i)
                c.touch(set(self._after_event(i, self.now, n_buffered)), stopped=i)
            elif t_ext == math.inf:
                raise RuntimeError("laminar replay stalled")  # the bound makes this unreachable
            else:
                self.now = t_ext
                c.touch(set(self._external()))

    def _group_stop(self) -> tuple | None:
        """While the trainer is free, stop where a group may let it start: its N_u-th
        buffered group, or (held back by the bound) each one."""
        if self.u >= len(self.w) or self.free > self.now:
            return None
        need = self.n_groups[self.u] - len(self.buffer)
        assert self.fast is not None
        return self.fast.groups(max(need, 1), self.open_groups)

    def _absorb(self, ends: np.ndarray, rids: np.ndarray) -> None:
        """Requests finished on the compiled loop (at `ends`): samples and groups done."""
        if not rids.size:
            return
        self.run.finished_at(ends, rids)
        assert self.fast is not None
        for j, k in enumerate(self.fast.finished_per_replica(rids, len(self.left))):
            self.left[j] -= k

    def _engine(self, i: int) -> list[int]:
        eng = self.run.rc.replicas[i]
        n_buffered = len(self.buffer)
        self.run.finished(eng.commit(), eng.t)
        return self._after_event(i, eng.t, n_buffered)

    def _after_event(self, i: int, now: float, n_buffered: int) -> list[int]:
        """Decisions after replica i's event at `now` (its finished samples counted)."""
        touched = [i]
        if self.prm.repack and self.state[i] == "run" and self.left[i] > 0:
            touched += self._repack(i, now)
        while self.ended:
            j = self.ended.pop()
            touched += self._batch_end(j, now)
        if len(self.buffer) > n_buffered:
            self._trainer(now)
        return touched

    def _external(self) -> list[int]:
        t, _, kind, arg = heapq.heappop(self.events)
        if kind == "trainer":
            self._trainer(t)
            return []
        if kind == "wake":
            self.version[arg] = self.loading[arg]
            return self._start_batch(arg, t)
        for i, s in enumerate(self.state):  # a new version: waiting replicas pull it
            if s == "wait":
                self.marks.append((i, self.since[i], t, "staleness_wait"))
                self._pull(i, t)
        return []

    def _push(self, t: float, kind: str, arg: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, arg))

    def version_at(self, t: float) -> int:
        return bisect.bisect_right(self.avail, t) - 1  # `avail` grows in time

    # ------------------------------------------------------------------ rollout replicas

    def _start_batch(self, i: int, t: float) -> list[int]:
        """Replica i pulls its next batch at `t`, as many groups as the staleness bound
        allows (none: it waits for newer weights)."""
        v = self.version[i]
        started_le = self.n_started - sum(self.started[v + 1 :])  # few versions newer than v
        allowed = self._consumed_by(v + self.prm.max_staleness) - started_le
        n_groups = self.n_groups[min(v, len(self.w) - 1)]
        n = min(self.prm.batch_groups or math.ceil(n_groups / len(self.version)), allowed)
        if n <= 0:
            self.state[i] = "wait"
            self.since[i] = t
            return []
        groups = self.stream.take(n)
        for g in self.run.launch(groups, t, replica=i):
            self.gversion[g] = v
            self.open_groups.add(g)
        if self.fast is not None:
            self.fast.track()
        self.in_flight[v] += n
        self.started[v] += n
        self.n_started += n
        self.left[i] = groups.ids.size
        self.state[i] = "run"
        return [i]

    def _consumed_by(self, u: int) -> int:
        """Groups updates 0..u train (past the trace's end, as many a step as its last)."""
        last = len(self.w) - 1
        return int(self.cum[min(u, last)]) + max(0, u - last) * self.n_groups[-1]

    def _batch_end(self, i: int, t: float) -> list[int]:
        if self.version_at(t) > self.version[i]:
            self._pull(i, t)
            return []
        return self._start_batch(i, t)

    def _pull(self, i: int, t: float) -> None:
        self.state[i] = "pull"
        self.loading[i] = self.version_at(t)
        self.marks.append((i, t, t + self.pull_s, "weight_sync"))
        self._push(t + self.pull_s, "wake", i)

    def _item_done(self, k: int, now: float) -> None:
        i = self.run.item_replica[k]
        self.left[i] -= 1
        if self.left[i] == 0 and self.state[i] == "run":
            self.ended.append(i)

    def _group_done(self, g: int, now: float) -> None:
        v = self.gversion[g]
        self.in_flight[v] -= 1
        if not self.in_flight[v]:
            del self.in_flight[v]  # the trainer's check looks at versions in flight only
        self.open_groups.discard(g)
        self.buffer.append((v, now, g))

    def _in_tail(self, j: int) -> bool:
        e = self.run.rc.replicas[j]
        # running its last few: a replica whose batch has not arrived yet runs none
        if not (self.state[j] == "run" and self.left[j] > 0 and 0 < e.B <= self.tail):
            return False
        return not (self.fast.rc.es[j, K.E_WN] if self.fast is not None else e.waiting)  # its length: no copy

    def _repack(self, i: int, now: float) -> list[int]:
        """Consolidate two tail replicas holding the same weights."""
        if not self._in_tail(i):
            return []
        engines = self.run.rc.replicas
        peers = [j for j, v in enumerate(self.version) if j != i and v == self.version[i] and self._in_tail(j)]
        if not peers:
            return []
        j = max(peers, key=lambda j: engines[j].B)
        if engines[i].B + engines[j].B > self.env.limits.max_running_seqs:
            return []
        src, dst = (i, j) if engines[i].B <= engines[j].B else (j, i)
        moved = self.run.move(src, dst, now)
        if self.fast is not None:
            self.fast.track()
        self.left[dst] += moved
        self.left[src] = 0
        self.ended = [e for e in self.ended if e != src]
        self.repacks += 1
        return [dst, *self._batch_end(src, now)]

    # ------------------------------------------------------------------ the trainer

    def _trainer(self, now: float) -> None:
        """Start update u at `now` if the trainer is free and may: N_u groups are
        finished and none generated u - max_staleness versions ago is still running."""
        if self.u >= len(self.w) or self.free > now:
            return
        n = self.n_groups[self.u]
        oldest = self.u - self.prm.max_staleness
        blocked = any(c > 0 for v, c in self.in_flight.items() if v <= oldest)
        reason = "trainer_waits_rollout" if len(self.buffer) < n else "staleness_wait" if blocked else None
        if reason != self.wait_reason or reason is None:
            self._close_wait(now)
            self.wait_reason, self.wait_since = reason or "trainer_waits_rollout", now
        if reason is None:
            self._update(now)

    def _close_wait(self, now: float) -> None:
        if self.wait_reason == "staleness_wait" and now > self.wait_since:
            self.tb.span(self.w[self.u].step, self.wait_since, now, "idle", "staleness_wait")
            self.stale_wait += now - self.wait_since

    def _update(self, start: float) -> None:
        w, prev = self.w[self.u], self.free
        self.buffer.sort()
        take, self.buffer = self.buffer[: w.n_groups], self.buffer[w.n_groups :]
        groups = self.run.groups.pick(np.array([g for _, _, g in take], np.int64))
        total_len, tokens, n = group_tokens(self.pool, groups)
        stages: dict = {"rollout": start - prev}
        windows: dict = {"rollout": [prev, start]}
        t = train_on(
            self.env, self.tb, w.step, start, total_len, reward_seconds(w, self.env.policy, n), stages, windows
        )
        end = sync_weights(self.env, self.tb, w.step, t, stages, windows, seconds=self.transfer)
        age = np.array([self.u - v for v, _, _ in take])
        stats = {
            "time_s": start - prev,
            "groups_consumed": len(take),
            "stale_groups": int((age > 0).sum()),
            "staleness_mean": float(age.mean()) if age.size else 0.0,
            "staleness_max": int(age.max()) if age.size else 0,
            "staleness_wait_s": self.stale_wait,
            "repacks": self.repacks,
        }
        self.steps.append(step_result(w.step, prev, end, prev, stages, windows, n, tokens, stats, None))
        self.stale_wait, self.repacks = 0.0, 0
        self.u += 1
        self.free = end
        self.avail.append(end + self.transfer)  # the relays' broadcast
        self.started.append(0)
        self._push(end, "trainer", 0)
        self._push(end + self.transfer, "version", self.u)
        self.progress(self.u / len(self.w))

    # ------------------------------------------------------------------ the timeline

    def finish(self) -> float:
        makespan = self.free
        step_of = step_locator([s.end for s in self.steps], [s.step for s in self.steps])
        run = self.run
        run.rc.advance_to(makespan)  # the replicas' decoding up to the end
        for i, state in enumerate(self.state):  # still held back by the bound at the end
            if state == "wait":
                self.marks.append((i, self.since[i], makespan, "staleness_wait"))
        self.tb.streaming_rollout(run.busy(0.0, makespan), run.tool_gaps(), step_of, run.recompute())
        for i, a, b, label in self.marks:
            b = min(b, makespan)
            if b > a:
                self.tb.replica_idle(i, a, b, label, step_of(a))
        return makespan


class _Compiled:
    """What the replay keeps to run on the compiled loop: per request of the store, the
    replica and group of the sample it ends (-1: none); and the kernel's watch rows (a
    running replica's tag is its weight version: only replicas holding the same weights
    repack; its order, the count of its (re)queuings in `_Laminar.replay`'s queue, by
    which that queue orders events at the same time)."""

    def __init__(self, run: PoolRun, n: int, tail: float) -> None:
        assert isinstance(run.rc, ArrayCluster)
        self.run, self.rc, self.tail = run, run.rc, tail
        self.watch = np.zeros((n, 3), dtype=np.int64)
        self.watch[:, K.W_ORDER] = 1  # each queued once at the start
        self.rid_rep = np.full(1024, -1, dtype=np.int64)
        self.rid_group = np.full(1024, -1, dtype=np.int64)
        self.ident = np.arange(1024, dtype=np.int64)  # a group's index is its id
        self.group_left = np.zeros(1024, dtype=np.int64)
        self.tracked = 0  # items mapped so far

    def track(self) -> None:
        """Map the requests of the items launched since the last call."""
        run = self.run
        k0, k1 = self.tracked, run.n_items
        n = len(run.rc.store)
        if self.rid_rep.size < n:
            grow = np.full(2 * n, -1, dtype=np.int64)
            self.rid_rep, self.rid_group = (np.r_[a, grow[: 2 * n - a.size]] for a in (self.rid_rep, self.rid_group))
        last = np.asarray(run.item_last[k0:k1], dtype=np.int64)
        self.rid_rep[last] = run.item_replica[k0:k1]
        self.rid_group[last] = run.item_group[k0:k1]
        self.tracked = k1

    def advance(
        self, until: float, state: list[str], version: list[int], groups: tuple | None
    ) -> tuple[int, np.ndarray, np.ndarray]:
        """Run until `until`, a batch's end, two tails of the same weights, or `groups`."""
        self.watch[:, K.W_TAG] = [v if s == "run" else -1 for s, v in zip(state, version)]
        return self.rc.run_watched(until, self.watch, self.tail, groups)

    def groups(self, target: int, open_groups: set[int]) -> tuple:
        """`run_watched`'s group stop: `target` more groups done."""
        n = len(self.run.groups)
        if self.ident.size < n:
            self.ident = np.arange(2 * n, dtype=np.int64)
            self.group_left = np.zeros(2 * n, dtype=np.int64)
        if open_groups:
            ids = np.fromiter(open_groups, dtype=np.int64, count=len(open_groups))
            self.group_left[ids] = self.run.group_left[ids]
        return target, self.rid_group, self.ident, self.group_left

    def finished_per_replica(self, rids: np.ndarray, n: int) -> list[int]:
        reps = self.rid_rep[rids]
        return np.bincount(reps[reps >= 0], minlength=n).tolist()

    def touch(self, touched: set[int], stopped: int = -1) -> None:
        """Requeue the replicas a decision touched (`stopped`: by the kernel already)."""
        for j in touched:
            if j != stopped:
                self.watch[j, K.W_ORDER] += 1


def run_laminar(env: Env, workload: list[StepWorkload], progress: Callable[[float], None]) -> PolicyRun:
    r = _Laminar(env, workload)
    r.progress = progress
    r.replay()
    makespan = r.finish()
    return r.steps, r.tb, makespan


SPEC = PolicySpec(
    kind="laminar",
    not_on_engine="relay workers and trajectory-level weight sync are not acted out on a real engine yet",
    disaggregated=True,
    params=LaminarParams,
    # groups in flight at the end are carried; prompts past the trace's end stand in for more
    carries_over=True,
    stand_ins=True,
    paper="Laminar: A Scalable Asynchronous RL Post-Training Framework (arXiv 2510.12633)",
    help="disaggregated, trajectory-level asynchrony: each rollout replica pulls prompts and the latest weights "
    "(from relay workers, off the trainer's path) at its own pace; per-trajectory staleness bound; long-tail "
    "trajectories repacked onto fewer replicas",
    run=run_laminar,
)
