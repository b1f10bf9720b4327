"""A run of the rollout replicas that partial and streaming policies drive: groups of
pending samples are launched at given times, events are committed in global time order,
group completions are recorded with their times, and the run can be stopped at a time
with every unfinished sample's progress kept (to resume it later by recomputation) or
a replica's trajectories moved onto another replica.

Group ids are indices into `groups` (`Groups`), in launch order; `completed` lists (group id,
time) in completion order. Per launched item (a sample submitted once) the run keeps
numpy columns (`items`: its sample id, `item_group`, `item_replica`, `item_first`,
`item_last`), valid up to `n_items`: a replay launches millions.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from core.simulator.array_cluster import ArrayCluster
from core.simulator.cluster import RolloutCluster
from core.simulator.dispatch import assign_groups
from core.simulator.engine import ReplicaEngine
from core.simulator.policies.base import Env, rollout_stats
from core.simulator.policies.carryover import ChainPool, Groups
from core.simulator.policies.recompute import prefill_seconds

_FEW = 16  # requests finished at once below which they are recorded one by one
_ITEM_COLS = ("items", "item_group", "item_replica", "item_first", "item_last")


class PoolRun:
    def __init__(
        self, env: Env, pool: ChainPool, start: float, *, compiled: bool = True, recycle: PoolRun | None = None
    ) -> None:
        """A run from `start`; `recycle`: a finished run, every result of it read, whose
        arrays (and compiled replicas) this one takes over rather than allocate anew."""
        self.env = env
        self.pool = pool
        self.start = start
        self.groups = Groups()  # never recycled: groups handed out stay valid
        self.completed: list[tuple[int, float]] = []
        n = env.cluster.rollout_replicas
        self.recompute_s = [0.0] * n  # re-prefill of resumed samples, per replica
        self.recompute_tokens = 0
        self.retired: list[list[list[float]]] = [[] for _ in range(n)]  # busy of replaced engines
        self.retired_gaps: list[list[tuple[float, float]]] = [[] for _ in range(n)]
        self.retired_work = {"preemptions": 0, "decoded_tokens": 0, "prefilled_tokens": 0}
        self.retired_recompute = [0.0] * n  # preemption recompute of replaced engines
        # per launched item; item_replica is -1 once stopped (a moved sample is a new item)
        self.n_items = 0
        self._live = 0  # items before this one are finished or stopped
        if recycle is None:
            self.items = self.item_group = self.item_replica = self.item_first = self.item_last = np.zeros(0, np.int64)
            self._grow_items(1024)
            self._left = np.zeros(64, np.int64)  # per group: its items not finished
            self._last_item = np.full(1024, -1, dtype=np.int64)  # per request: the item it ends, or -1
            self._rid_src = np.zeros(1024, dtype=np.int64)  # per request: index into its step's requests
        else:
            for name in _ITEM_COLS + ("_left", "_last_item", "_rid_src"):
                setattr(self, name, getattr(recycle, name))
            self._last_item[: len(recycle.rc.store)] = -1
        self.rc: RolloutCluster
        if recycle is not None and compiled and isinstance(recycle.rc, ArrayCluster):
            recycle.rc.reset(start)
            self.rc = recycle.rc
        else:
            self.rc = env.new_cluster(start, compiled=compiled)
        self.on_group_done: Callable[[int, float], None] | None = None  # (group id, time)
        self.on_item_done: Callable[[int, float], None] | None = None  # (item index, time)
        # per item the last `interrupt` stopped (in its order): when its current turn can run
        self.resume_when = np.zeros(0)

    @property
    def group_left(self) -> np.ndarray:
        """Per group: its items not finished yet."""
        return self._left[: len(self.groups)]

    def _grow_items(self, cap: int) -> None:
        for name in _ITEM_COLS:
            new = np.zeros(cap, np.int64)
            new[: self.n_items] = getattr(self, name)[: self.n_items]
            setattr(self, name, new)

    # ------------------------------------------------------------------ launching

    def launch(self, groups: Groups, time: float, replica: int | None = None) -> list[int]:
        """Submit the unfinished samples of `groups` at `time`, each group to one replica
        (`replica`, or the policy's dispatch); returns their group ids."""
        g0 = len(self.groups)
        gids = list(range(g0, g0 + len(groups)))
        if not len(groups):
            return gids
        self.groups.extend(groups)
        ids = groups.ids
        owner = np.repeat(np.arange(g0, g0 + len(groups)), groups.sizes())
        todo = ~self.pool.done[ids]
        left = np.bincount(owner - g0, todo, len(groups)).astype(np.int64)
        if self._left.size < g0 + len(groups):
            self._left = np.concatenate([self._left, np.zeros(max(len(groups), self._left.size), np.int64)])
        self._left[g0 : g0 + len(groups)] = left
        self.completed += [(g, time) for g in np.flatnonzero(left == 0).tolist()]  # nothing left to run
        if todo.all():  # fresh groups: nothing to leave out
            self._submit(ids, owner, time, replica)
        elif todo.any():
            self._submit(ids[todo], owner[todo], time, replica)
        return gids

    def _submit(self, ids: np.ndarray, owner: np.ndarray, time: float | np.ndarray, replica: int | None) -> None:
        """Submit samples `ids` at `time` (one time, or one per sample)."""
        n = ids.size
        ch = self.pool.chains(ids)
        k0 = self.n_items
        base = self.rc.add_requests(ch, ch["owner"] + k0)
        rep = self._replicas(ids, owner, replica)
        if np.ndim(time) == 0:
            self.rc.submit(base + ch["first"], rep, float(time))
        else:
            times = np.asarray(time, dtype=np.float64)
            for t in np.unique(times).tolist():
                m = times == t
                self.rc.submit(base + ch["first"][m], rep[m], t)
        last = self._requests(base + ch["src"].size)
        self._rid_src[base : base + ch["src"].size] = ch["src"]
        last[base + ch["last"]] = np.arange(k0, k0 + n)
        if k0 + n > self.items.size:
            self._grow_items(max(k0 + n, 2 * self.items.size))
        s = slice(k0, k0 + n)
        self.items[s], self.item_group[s], self.item_replica[s] = ids, owner, rep
        self.item_first[s], self.item_last[s] = base + ch["first"], base + ch["last"]
        self.n_items = k0 + n
        resumed = ch["recompute"] > 0
        self.recompute_tokens += int(ch["recompute"].sum())
        if resumed.any():
            secs = prefill_seconds(self.env.coefficients, ch["recompute"][resumed], rep[resumed], len(self.recompute_s))
            for j in np.unique(rep[resumed]).tolist():
                self.recompute_s[j] += float(secs[j])

    def _requests(self, n: int) -> np.ndarray:
        """Per request up to `n` (grown to it): the item whose last request it is, or -1."""
        if self._last_item.size < n:
            cap = max(n, 2 * self._last_item.size)
            self._last_item = np.concatenate([self._last_item, np.full(cap - self._last_item.size, -1, np.int64)])
            self._rid_src = np.concatenate([self._rid_src, np.zeros(cap - self._rid_src.size, np.int64)])
        return self._last_item

    def _replicas(self, ids: np.ndarray, owner: np.ndarray, replica: int | None) -> np.ndarray:
        if replica is not None:
            return np.full(ids.size, replica, dtype=np.int64)
        if owner.size and (owner[1:] >= owner[:-1]).all():  # a launch's: group by group, no sort
            idx = np.cumsum(owner != np.r_[owner[0], owner[:-1]])
            n = int(idx[-1]) + 1
        else:
            gids, idx = np.unique(owner, return_inverse=True)
            n = gids.size
        prompt, total = (np.bincount(idx, v, n) for v in self.pool.lookup(ids, "prompt", "total"))
        per_group = assign_groups(self.env.policy.dispatch, len(self.rc.replicas), prompt, total)
        return per_group[idx]

    # ------------------------------------------------------------------ running

    def finished(self, rids: list[int], now: float) -> None:
        """Record requests that finished at `now` (a sample is done with its last)."""
        if len(rids) > _FEW:
            self._finished(np.full(len(rids), now), np.asarray(rids, dtype=np.int64))
        elif rids:
            self._finished_few(rids, now)

    def _finished_few(self, rids: list[int], now: float) -> None:
        """`_finished` one request at a time: for a few, cheaper than arrays (a policy
        that steps the engine event by event records a few per event)."""
        last, items, group, left, done = self._last_item, self.items, self.item_group, self._left, self.pool.done
        on_item, on_group = self.on_item_done, self.on_group_done
        for r in rids:
            k = int(last[r])
            if k < 0:
                continue
            done[items[k]] = True
            g = int(group[k])
            left[g] -= 1
            if on_item is not None:
                on_item(k, now)
            if left[g] == 0:
                self.completed.append((g, now))
                if on_group is not None:
                    on_group(g, now)

    def finished_at(self, times: np.ndarray, rids: np.ndarray) -> None:
        """Record requests `rids` that finished at `times`, in the order they did."""
        if rids.size:
            self._finished(times, rids)

    def _finished(self, times: np.ndarray, rids: np.ndarray) -> None:
        """Requests `rids` finished at `times`, in that order: their items are done, and a
        group whose last item that was completes then."""
        ks = self._last_item[rids]
        keep = ks >= 0
        ks, times = ks[keep], times[keep]
        if not ks.size:
            return
        at = _close_groups(ks, self.items, self.item_group, self._left, self.pool.done)
        closed_g, closed_t = self.item_group[ks[at]].tolist(), times[at].tolist()
        self.completed += zip(closed_g, closed_t)
        on_item, on_group = self.on_item_done, self.on_group_done
        if on_item is None:
            if on_group is not None:  # groups alone: no walk over every item
                for gid, now in zip(closed_g, closed_t):
                    on_group(gid, now)
            return
        at_l, c = at.tolist() + [-1], 0
        for i, (k, now) in enumerate(zip(ks.tolist(), times.tolist())):  # in order, as they finished
            on_item(k, now)
            if at_l[c] == i:
                if on_group is not None:
                    on_group(closed_g[c], now)
                c += 1

    def run_until_completed(self, n: int) -> bool:
        """Run until `n` groups have completed in all; False when the work ran out first."""
        if len(self.completed) >= n:
            return True
        last = self._requests(len(self.rc.store))[: len(self.rc.store)]
        group, left = self.item_group[: self.n_items], self.group_left.copy()
        # compiled: no Python on the way
        reached, ends, rids = self.rc.run_groups_log(n, len(self.completed), last, group, left)
        self._finished(ends, rids)
        return reached

    def run_to(self, t: float) -> None:
        """Commit every event completing by `t`."""
        done = self.rc.run_to(t)
        if done:
            times = np.fromiter((p[0] for p in done), np.float64, len(done))
            rids = np.fromiter((p[1] for p in done), np.int64, len(done))
            order = np.lexsort((rids, times))  # as sorted (time, rid) pairs
            self._finished(times[order], rids[order])

    def drain(self) -> float:
        """Run everything launched to completion; returns when the last replica stopped."""
        self.run_to(math.inf)
        return max([self.start] + [eng.t for eng in self.rc.replicas])

    def _running(self, replica: int | None) -> np.ndarray:
        """Indices of the items still running (on every replica, or one)."""
        lo = self._live
        rep = self.item_replica[lo : self.n_items]
        alive = (rep >= 0) & ~self.pool.done[self.items[lo : self.n_items]]
        first = int(np.argmax(alive)) if alive.any() else alive.size
        self._live = lo + first
        mine = alive if replica is None else alive & (rep == replica)
        return lo + np.flatnonzero(mine)

    def interrupt(self, t: float, replica: int | None = None) -> list[int]:
        """Stop at `t` (every replica, or one): unfinished samples keep their progress
        in the pool (resumed later by recomputing prompt + partial response); returns
        the indices of the items stopped."""
        store = self.rc.store
        if replica is None:
            self.run_to(t)
            self.rc.stop_at(t)
        else:
            eng = self.rc.replicas[replica]
            ran = np.asarray(eng.run(until=t), dtype=np.int64)
            ends = _take(store.end, ran).astype(np.float64)
            order = np.argsort(ends, kind="stable")
            self._finished(ends[order], ran[order])
            eng.advance_to(t)
            eng.unfinished()
        stopped = self._running(replica)
        self.resume_when = np.zeros(0)
        if not stopped.size:
            return []
        r = self._resumed_turn(stopped)
        came = _take(store.arrive, r).astype(np.float64)
        when = np.where(np.isnan(came), t, np.maximum(t, came))
        self.resume_when = when
        sid, src = self.items[stopped], self._rid_src[r]
        kept = np.where(src == self.pool.req[sid], self.pool.generated[sid], 0)
        self.pool.generated[sid] = _take(store.generated, r) + kept
        self.pool.req[sid] = src
        self._last_item[self.item_last[stopped]] = -1
        self.item_replica[stopped] = -1
        return stopped.tolist()

    def _resumed_turn(self, stopped: np.ndarray) -> np.ndarray:
        """Per stopped item, the request to resume: its first unfinished turn (every
        one but the last finished: the last)."""
        first, last = self.item_first[stopped], self.item_last[stopped]
        if (first == last).all():  # one request each (single-turn)
            return last
        length = last - first + 1
        starts = np.cumsum(length) - length
        rids = np.repeat(first, length) + (np.arange(int(length.sum())) - np.repeat(starts, length))
        open_ = np.isnan(_take(self.rc.store.end, rids)) | (rids == np.repeat(last, length))
        return rids[np.flatnonzero(open_)[np.searchsorted(np.flatnonzero(open_), starts)]]

    def move(self, src: int, dst: int, t: float) -> int:
        """Repack: stop replica `src`'s trajectories at `t` and resume them on `dst`
        (recomputing what they had generated); `src` restarts empty. Returns how many
        samples moved."""
        stopped = np.asarray(self.interrupt(t, src), dtype=np.int64)
        self._retire(src, t)
        if stopped.size:
            when = self.resume_when  # a tool call out returns when it would have
            k0 = self.n_items
            self._submit(self.items[stopped], self.item_group[stopped], when, dst)
            for k in np.flatnonzero(when > t).tolist():  # the turn arrives after its tool call, as before the move
                self.rc.store.cont[int(self.item_first[k0 + k])] = True
        return int(stopped.size)

    def _retire(self, j: int, t: float) -> None:
        """Replace replica `j`'s engine by an empty one from `t`, keeping its record."""
        old = self.rc.replicas[j]
        self.retired[j] += self._busy_of(j, t, self.rc.busy_intervals(self.start, t)[j])
        self.retired_gaps[j] += self._tool_gaps(old)
        for key in self.retired_work:
            self.retired_work[key] += getattr(old, key)
        self.retired_recompute[j] += old.recompute_s
        self.rc.replace_replica(j, t)

    # ------------------------------------------------------------------ results

    def busy(self, lo: float, hi: float) -> list[list[list[float]]]:
        """Per replica, busy intervals [start, end, tail] within [lo, hi]."""
        now = self.rc.busy_intervals(lo, hi)
        return [
            [iv for iv in old if iv[1] > lo and iv[0] < hi] + self._busy_of(j, hi, now[j])
            for j, old in enumerate(self.retired)
        ]

    def _busy_of(self, j: int, hi: float, ivs: list[list[float]]) -> list[list[float]]:
        """Replica j's busy intervals `ivs` (up to `hi`); one still running at `hi`
        (stopped mid-iteration, or at the end of the replay) is busy up to `hi`."""
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
        n = self.n_items
        kept = self.pool.done[self.items[:n]] & (self.item_replica[:n] >= 0)
        return _take(self.rc.store.end, self.item_last[:n][kept]).astype(np.float64)

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


@numba.njit(cache=True)
def _close_groups(
    ks: np.ndarray, items: np.ndarray, group: np.ndarray, left: np.ndarray, done: np.ndarray
) -> np.ndarray:
    """Items `ks` finished, in that order: their samples are done and their groups have
    one item less left; returns the positions in `ks` at which a group completed."""
    at = np.empty(ks.size, np.int64)
    n = 0
    for i in range(ks.size):
        k = ks[i]
        done[items[k]] = True
        g = group[k]
        left[g] -= 1
        if left[g] == 0:
            at[n] = i
            n += 1
    return at[:n]


def _take(col: np.ndarray | list, idx: np.ndarray) -> np.ndarray:
    """col[idx] of a store column: an array (compiled loop) or a list (Python engine),
    which may be long, so only the entries asked for are read."""
    if isinstance(col, np.ndarray):
        return col[idx]
    return np.asarray([col[i] for i in idx.tolist()])
