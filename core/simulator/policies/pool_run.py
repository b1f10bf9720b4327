"""A run of the rollout replicas that partial and streaming policies drive: groups of
pending samples are launched at given times, events are committed in global time order,
group completions are recorded with their times, and the run can be stopped at a time
with every unfinished sample's progress kept (to resume it later by recomputation) or
a replica's trajectories moved onto another replica.

Group ids are indices into `groups`, in launch order; `completed` lists (group id,
time) in completion order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from itertools import chain, repeat

import numpy as np

from core.simulator.dispatch import assign_groups
from core.simulator.engine import ReplicaEngine
from core.simulator.policies.base import Env, rollout_stats
from core.simulator.policies.carryover import ChainPool, Pending
from core.simulator.policies.recompute import prefill_seconds


class PoolRun:
    def __init__(self, env: Env, pool: ChainPool, start: float, *, compiled: bool = True) -> None:
        self.env = env
        self.pool = pool
        self.start = start
        self.rc = env.new_cluster(start, compiled=compiled)
        self.groups: list[list[Pending]] = []
        self.group_left: list[int] = []
        self.launched_at: list[float] = []
        self.completed: list[tuple[int, float]] = []
        n = env.cluster.rollout_replicas
        self.recompute_s = [0.0] * n  # re-prefill of resumed samples, per replica
        self.recompute_tokens = 0
        self.retired: list[list[list[float]]] = [[] for _ in range(n)]  # busy of replaced engines
        self.retired_gaps: list[list[tuple[float, float]]] = [[] for _ in range(n)]
        self.retired_work = {"preemptions": 0, "decoded_tokens": 0, "prefilled_tokens": 0}
        self.retired_recompute = [0.0] * n  # preemption recompute of replaced engines
        # per launched item
        self.items: list[Pending] = []
        self.item_group: list[int] = []
        self.item_replica: list[int] = []  # -1 once stopped (a moved sample is a new item)
        self.running: list[set[int]] = [set() for _ in range(n)]  # unfinished items per replica
        self.item_first: list[int] = []
        self.item_last: list[int] = []
        self._last_item = np.full(1024, -1, dtype=np.int64)  # per request: the item it ends, or -1
        self._rid_src: list[int] = []
        self.on_group_done: Callable[[int, float], None] | None = None  # (group id, time)
        self.on_item_done: Callable[[int, float], None] | None = None  # (item index, time)
        self.resume_at: dict[int, float] = {}  # stopped item -> when its current turn can run

    # ------------------------------------------------------------------ launching

    def launch(self, groups: list[list[Pending]], time: float, replica: int | None = None) -> list[int]:
        """Submit the unfinished samples of `groups` at `time`, each group to one replica
        (`replica`, or the policy's dispatch); returns their group ids."""
        gids, items, owner = [], [], []
        for grp in groups:
            gid = len(self.groups)
            gids.append(gid)
            self.groups.append(grp)
            self.launched_at.append(time)
            todo = [it for it in grp if not it.done]
            self.group_left.append(len(todo))
            if not todo:
                self.completed.append((gid, time))
            items += todo
            owner += [gid] * len(todo)
        if items:
            self._submit(items, np.asarray(owner), time, replica)
        return gids

    def _submit(self, items: list[Pending], owner: np.ndarray, time: float | list[float], replica: int | None) -> None:
        """Submit `items` at `time` (one time, or one per item)."""
        ch = self.pool.chains(items)
        k0 = len(self.items)
        base = self.rc.add_requests(ch, ch["owner"] + k0)
        rep = self._replicas(items, owner, replica)
        times = np.broadcast_to(np.asarray(time, dtype=np.float64), (len(items),))
        for t in np.unique(times).tolist():
            m = times == t
            self.rc.submit(base + ch["first"][m], rep[m], t)
        self._rid_src += ch["src"].tolist()
        self._note_last(base + ch["last"], np.arange(k0, k0 + len(items)))
        self.items += items
        self.item_group += owner.tolist()
        for k, j in enumerate(rep.tolist()):
            self.running[j].add(k0 + k)
        self.item_replica += rep.tolist()
        self.item_first += (base + ch["first"]).tolist()
        self.item_last += (base + ch["last"]).tolist()
        resumed = ch["recompute"] > 0
        self.recompute_tokens += int(ch["recompute"].sum())
        for j in np.unique(rep[resumed]).tolist():
            self.recompute_s[j] += prefill_seconds(self.env.coefficients, ch["recompute"][resumed & (rep == j)])

    def _note_last(self, rids: np.ndarray, items: np.ndarray) -> None:
        self._last_items()[rids] = items

    def _last_items(self) -> np.ndarray:
        """Per request of the store: the item whose last request it is, or -1."""
        n = len(self.rc.store)
        if self._last_item.size < n:
            grown = np.full(max(n, 2 * self._last_item.size), -1, dtype=np.int64)
            grown[: self._last_item.size] = self._last_item
            self._last_item = grown
        return self._last_item[:n]

    def _replicas(self, items: list[Pending], owner: np.ndarray, replica: int | None) -> np.ndarray:
        if replica is not None:
            return np.full(len(items), replica, dtype=np.int64)
        gids, idx = np.unique(owner, return_inverse=True)
        prompt, total = (np.bincount(idx, v, gids.size) for v in self.pool.lookup(items, "prompt", "total"))
        per_group = assign_groups(self.env.policy.dispatch, len(self.rc.replicas), prompt, total)
        return per_group[idx]

    # ------------------------------------------------------------------ running

    def finished(self, rids: list[int], now: float) -> None:
        """Record requests that finished at `now` (a sample is done with its last)."""
        if rids:
            self.finished_at(zip(repeat(now), rids))

    def finished_at(self, done: Iterable[tuple[float, int]]) -> None:
        """Record requests that finished, as (time, rid) in the order they did."""
        pairs = list(done)
        if not pairs:
            return
        item_of = self._last_item[[r for _, r in pairs]].tolist()
        items, replica, group, left = (
            self.items,
            self.item_replica,
            self.item_group,
            self.group_left,
        )
        running = self.running
        on_item, on_group = self.on_item_done, self.on_group_done
        for (now, _), k in zip(pairs, item_of):
            if k < 0:
                continue
            items[k].done = True
            running[replica[k]].discard(k)
            g = group[k]
            left[g] -= 1
            if on_item is not None:
                on_item(k, now)
            if left[g] == 0:
                self.completed.append((g, now))
                if on_group is not None:
                    on_group(g, now)

    def run_until_completed(self, n: int) -> bool:
        """Run until `n` groups have completed in all; False when the work ran out first."""
        if len(self.completed) >= n:
            return True
        last = self._last_items()
        group, left = np.asarray(self.item_group, dtype=np.int64), np.asarray(self.group_left, dtype=np.int64)
        reached, done = self.rc.run_groups(n, len(self.completed), last, group, left)  # compiled: no Python on the way
        self.finished_at(done)
        return reached

    def run_to(self, t: float) -> None:
        """Commit every event completing by `t`."""
        self.finished_at(sorted(self.rc.run_to(t)))

    def drain(self) -> float:
        """Run everything launched to completion; returns when the last replica stopped."""
        self.run_to(math.inf)
        return max([self.start] + [eng.t for eng in self.rc.replicas])

    def interrupt(self, t: float, replica: int | None = None) -> list[int]:
        """Stop at `t` (every replica, or one): unfinished samples keep their progress
        in their `Pending` (resumed later by recomputing prompt + partial response);
        returns the indices of the items stopped."""
        store = self.rc.store
        if replica is None:
            self.run_to(t)
            engines = list(self.rc.replicas)
        else:
            engines = [self.rc.replicas[replica]]
            ran = engines[0].run(until=t)
            ends = [float(store.end[r]) for r in ran]
            self.finished_at(sorted(zip(ends, ran), key=lambda d: d[0]))
        for eng in engines:
            eng.advance_to(t)
            eng.unfinished()
        end, arrive, generated = store.end, store.arrive, store.generated  # read per item: the store may be long
        pools = self.running if replica is None else [self.running[replica]]
        stopped = sorted(chain.from_iterable(pools))
        for pool in pools:
            pool.clear()
        self.resume_at = {}
        for k in stopped:
            it = self.items[k]
            r = self.item_first[k]
            while r < self.item_last[k] and end[r] == end[r]:  # finished turn
                r += 1
            came = float(arrive[r])
            self.resume_at[k] = max(t, came) if came == came else t
            src = self._rid_src[r]
            it.generated = int(generated[r]) + (it.generated if src == it.req else 0)
            it.req = src
            self._last_item[self.item_last[k]] = -1
            self.item_replica[k] = -1
        return stopped

    def move(self, src: int, dst: int, t: float) -> int:
        """Repack: stop replica `src`'s trajectories at `t` and resume them on `dst`
        (recomputing what they had generated); `src` restarts empty. Returns how many
        samples moved."""
        stopped = self.interrupt(t, src)
        self._retire(src, t)
        if stopped:
            owner = np.asarray([self.item_group[k] for k in stopped])
            when = [self.resume_at[k] for k in stopped]  # a tool call out returns when it would have
            k0 = len(self.items)
            self._submit([self.items[k] for k in stopped], owner, when, dst)
            for k, w in enumerate(when):
                if w > t:  # the turn arrives after its tool call, as before the move
                    self.rc.store.cont[self.item_first[k0 + k]] = True
        return len(stopped)

    def _retire(self, j: int, t: float) -> None:
        """Replace replica `j`'s engine by an empty one from `t`, keeping its record."""
        old = self.rc.replicas[j]
        self.retired[j] += self._busy_of(j, self.start, t)
        self.retired_gaps[j] += self._tool_gaps(old)
        for key in self.retired_work:
            self.retired_work[key] += getattr(old, key)
        self.retired_recompute[j] += old.recompute_s
        self.rc.replace_replica(j, t)

    # ------------------------------------------------------------------ results

    def busy(self, lo: float, hi: float) -> list[list[list[float]]]:
        """Per replica, busy intervals [start, end, tail] within [lo, hi]."""
        return [
            [iv for iv in old if iv[1] > lo and iv[0] < hi] + self._busy_of(j, lo, hi)
            for j, old in enumerate(self.retired)
        ]

    def _busy_of(self, j: int, lo: float, hi: float) -> list[list[float]]:
        """Replica j's busy intervals within [lo, hi]; one still running at `hi` (stopped
        mid-iteration, or at the end of the replay) is busy up to `hi`."""
        ivs = self.rc.busy_intervals(lo, hi)[j]
        eng = self.rc.replicas[j]
        if ivs and eng.B > 0 and eng.open_busy() is not None and ivs[-1][1] < hi:
            ivs[-1][1] = hi
        return ivs

    def tool_gaps(self) -> list[list[tuple[float, float]]]:
        """Per replica, the gaps in which it waited for a tool call to return."""
        return [old + self._tool_gaps(eng) for old, eng in zip(self.retired_gaps, self.rc.replicas)]

    def _tool_gaps(self, eng: ReplicaEngine) -> list[tuple[float, float]]:
        cont = self.rc.store.cont
        return [(a, b) for a, b, r in eng.idle_gaps if cont[r] and b > a]

    def sample_completions(self) -> np.ndarray:
        """When each sample finished in this run (absolute seconds)."""
        done = np.fromiter((it.done for it in self.items), bool, len(self.items))
        kept = done & (np.asarray(self.item_replica, dtype=np.int64) >= 0)
        return np.asarray(self.rc.store.end, dtype=np.float64)[np.asarray(self.item_last, dtype=np.int64)[kept]]

    def recompute(self) -> list[float]:
        """Seconds per replica recomputing: resumed samples and preemptions."""
        pre = [e.recompute_s + r for e, r in zip(self.rc.replicas, self.retired_recompute)]
        return [a + b for a, b in zip(self.recompute_s, pre)]

    def stats(self, completion: np.ndarray, duration: float) -> dict:
        out = rollout_stats(self.rc, completion, duration)
        for key, v in self.retired_work.items():
            out[key] += v
        out["recompute_tokens"] = self.recompute_tokens
        return out
