"""The rollout replicas of one run on the compiled event loop (`kernel.py`).

`ArrayCluster` is `cluster.RolloutCluster` for replicas that share no work (static
dispatch; with `shared_prompts`, a group's samples spread over replicas, each prefilling
the group's prompt once, as `pooled.PooledEngine` once its pool is detached): the same
interface, with the request table and every replica's state held in arrays that
`kernel.run` advances. `ArrayStore` is `requests.RequestStore` as arrays
(its fields are column views); `ReplicaView` is what a policy reads of one replica, as
it reads a `ReplicaEngine`. Policies that stop at a number of finished groups
(`run_groups`) or at a time (`run_to`) never re-enter Python on the way.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from core.simulator import kernel as K
from core.simulator.cluster import RequestNoise, RolloutCluster, clip_intervals
from core.simulator.predictor import COEFFICIENT_FIELDS, EngineCoefficients

INF = math.inf
_NO_WATCH = np.zeros((0, 3), dtype=np.int64)
_INT_FIELDS = ("prefill", "context", "left", "next", "seq", "g0", "kv0", "generated", "prompt_row", "prompt_mark")
_FLOAT_FIELDS = ("gap", "arrive", "admit", "end")


@numba.njit(cache=True)
def _chain_lengths(nxt: np.ndarray) -> np.ndarray:
    """Requests from each one to the end of its trajectory (later turns come later)."""
    n = nxt.size
    out = np.ones(n, dtype=np.int64)
    for r in range(n - 1, -1, -1):
        if nxt[r] > r:
            out[r] += out[nxt[r]]
    return out


@numba.njit(cache=True)
def _submit(
    rids: np.ndarray,
    replica: np.ndarray,
    time: float,
    rf: np.ndarray,
    es: np.ndarray,
    ef: np.ndarray,
    at: np.ndarray,
    ai: np.ndarray,
    wq: np.ndarray,
) -> None:
    """Requests `rids` arrive at `time` at their replicas, in order."""
    for i in range(rids.size):
        es[replica[i], K.E_PK] = -1
    for i in range(rids.size):
        r, j = rids[i], replica[i]
        rf[r, K.RF_ARRIVE] = time
        if time <= ef[j, K.EF_T]:
            K.waiting_push(wq, es, j, r)
        else:
            K.arrival_push(at, ai, es, j, time, r)


@numba.njit(cache=True)
def _stop_at(
    time: float,
    ri: np.ndarray,
    rf: np.ndarray,
    es: np.ndarray,
    ef: np.ndarray,
    hp: np.ndarray,
    at: np.ndarray,
    ai: np.ndarray,
    wq: np.ndarray,
    sk: np.ndarray,
    pr: np.ndarray,
    fin: np.ndarray,
    fin_t: np.ndarray,
    cnt: np.ndarray,
) -> None:
    """Every replica `ReplicaView.advance_to(time)`, then its running requests' progress
    applied as `ReplicaView.unfinished` does."""
    for j in range(es.shape[0]):
        K.advance_to(j, time, ri, rf, es, ef, hp, at, ai, wq, pr, fin, fin_t, cnt)
        for i in range(es[j, K.E_SN]):
            r = sk[j, i, 0]
            if ri[r, K.R_SEQ] != sk[j, i, 1]:
                continue
            K.take_progress(ri, r, es[j, K.E_G] - ri[r, K.R_G0] + 1)


class ArrayStore:
    """`RequestStore` as growable arrays; each field is a view of its column."""

    prefill: np.ndarray
    context: np.ndarray
    left: np.ndarray
    next: np.ndarray
    seq: np.ndarray
    g0: np.ndarray
    kv0: np.ndarray
    generated: np.ndarray
    prompt_row: np.ndarray
    prompt_mark: np.ndarray
    gap: np.ndarray
    arrive: np.ndarray
    admit: np.ndarray
    end: np.ndarray

    def __init__(self, capacity: int = 1024) -> None:
        self.n = 0
        self.ri = np.zeros((capacity, len(_INT_FIELDS)), dtype=np.int64)
        self.rf = np.zeros((capacity, len(_FLOAT_FIELDS)), dtype=np.float64)
        self._owner = np.zeros(capacity, dtype=np.int64)
        self._cont = np.zeros(capacity, dtype=bool)
        self._prefix = np.full(capacity, -1, dtype=np.int64)
        self._chain = np.zeros(capacity, dtype=np.int64)
        self._views()

    def __len__(self) -> int:
        return self.n

    def _views(self) -> None:
        n = self.n
        for i, name in enumerate(_INT_FIELDS):
            setattr(self, name, self.ri[:n, i])
        for i, name in enumerate(_FLOAT_FIELDS):
            setattr(self, name, self.rf[:n, i])
        self.owner, self.cont, self.prefix, self.chain = (
            self._owner[:n],
            self._cont[:n],
            self._prefix[:n],
            self._chain[:n],
        )

    def add(
        self,
        prefill: np.ndarray,
        context: np.ndarray,
        decode: np.ndarray,
        gap: np.ndarray,
        nxt: np.ndarray,
        owner: np.ndarray,
        prefix: np.ndarray | None = None,
    ) -> int:
        """As `RequestStore.add`."""
        base, n = self.n, len(prefill)
        self._reserve(base + n)
        nxt = np.asarray(nxt, dtype=np.int64)
        s = slice(base, base + n)
        ri = self.ri[s]
        ri[:, K.R_PREFILL] = prefill
        ri[:, K.R_CONTEXT] = context
        ri[:, K.R_LEFT] = np.maximum(np.asarray(decode, dtype=np.int64), 1)
        ri[:, K.R_NEXT] = np.where(nxt >= 0, nxt + base, -1)
        ri[:, K.R_SEQ] = -1
        ri[:, K.R_G0] = ri[:, K.R_KV0] = ri[:, K.R_GEN] = ri[:, K.R_PMARK] = 0
        # a shared prompt's mark is found when submitted to a replica (-2: not yet)
        ri[:, K.R_PKEY] = -1 if prefix is None else np.where(np.asarray(prefix) >= 0, -2, -1)
        self.rf[s, K.RF_GAP] = gap
        self.rf[s, K.RF_ARRIVE :] = np.nan
        self._owner[s] = owner
        self._cont[s] = False
        self._cont[nxt[nxt >= 0] + base] = True
        self._prefix[s] = -1 if prefix is None else prefix
        self._chain[s] = _chain_lengths(nxt)
        self.n = base + n
        self._views()
        return base

    def clear(self) -> None:
        """Empty, keeping the capacity (`add` writes every column of a new row)."""
        self.n = 0
        self._views()

    def _reserve(self, n: int) -> None:
        cap = self.ri.shape[0]
        if n <= cap:
            return
        cap = max(n, 2 * cap)
        for name in ("ri", "rf", "_owner", "_cont", "_prefix", "_chain"):
            old = getattr(self, name)
            new = np.zeros((cap,) + old.shape[1:], dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)


class ReplicaView:
    """One replica of an `ArrayCluster`, read as a `ReplicaEngine` is."""

    def __init__(self, cluster: ArrayCluster, j: int) -> None:
        self._c = cluster
        self.j = j

    @property
    def t(self) -> float:
        return float(self._c.ef[self.j, K.EF_T])

    @property
    def B(self) -> int:
        return int(self._c.es[self.j, K.E_B])

    @property
    def decoded_tokens(self) -> int:
        return int(self._c.es[self.j, K.E_DEC])

    @property
    def prefilled_tokens(self) -> int:
        return int(self._c.es[self.j, K.E_PRE])

    @property
    def preemptions(self) -> int:
        return int(self._c.es[self.j, K.E_PREEMPT])

    @property
    def recompute_s(self) -> float:
        return float(self._c.ef[self.j, K.EF_RECOMP])

    @property
    def idle_gaps(self) -> list[tuple[float, float, int]]:
        rows = self._c.log_rows(self._c.gaps, K.C_GAPS, self.j)
        return [(a, b, int(r)) for a, b, r in rows[:, 1:].tolist()]

    def open_busy(self) -> list[float] | None:
        c, j = self._c, self.j
        if not c.es[j, K.E_BOPEN]:
            return None
        start, t = float(c.ef[j, K.EF_BSTART]), self.t
        return [start, t, min(float(c.ef[j, K.EF_TAIL]), t - start)]

    @property
    def waiting(self) -> list[int]:
        c, es = self._c, self._c.es[self.j]
        return c.wq[self.j, (es[K.E_WH] + np.arange(es[K.E_WN])) % c.wq.shape[1]].tolist()

    def run(self, until: float = INF) -> list[int]:
        return [r for _, r in self._c.run_to(until, [self.j])]

    def advance_to(self, time: float) -> None:
        c = self._c
        st = c.arrays
        c.before_call()
        K.advance_to(self.j, time, st.ri, st.rf, c.es, c.ef, c.hp, c.at, c.ai, c.wq, c.pr, *c.fin_args())

    def unfinished(self) -> list[int]:
        """As `ReplicaEngine.unfinished`: running (progress applied), waiting, arriving."""
        c, j = self._c, self.j
        ri, es = c.arrays.ri, c.es[j]
        stack = c.sk[j, : es[K.E_SN]]
        rids = stack[ri[stack[:, 0], K.R_SEQ] == stack[:, 1], 0]
        gen = es[K.E_G] - ri[rids, K.R_G0] + 1
        ri[rids, K.R_GEN] += gen
        ri[rids, K.R_LEFT] -= gen
        ri[rids, K.R_CONTEXT] += gen
        ri[rids, K.R_PREFILL] = ri[rids, K.R_CONTEXT]
        ri[rids, K.R_SEQ] = -1
        n_arr = es[K.E_AN]
        order = np.lexsort((c.ai[j, :n_arr, 0], c.at[j, :n_arr]))
        return rids.tolist() + self.waiting + c.ai[j, order, 1].tolist()


class ArrayCluster(RolloutCluster):
    """`RolloutCluster` without shared work (prompts aside), on the compiled loop."""

    def __init__(
        self,
        n_replicas: int,
        coefficients: EngineCoefficients,
        *,
        max_running: int,
        kv_capacity: float,
        max_prefill_tokens: int,
        start_time: float = 0.0,
        noise: RequestNoise | None = None,
        speculation: tuple[int, float] = (0, 1.0),
        shared_prompts: bool = False,
    ) -> None:
        self.arrays = ArrayStore()
        self.store = self.arrays  # type: ignore[assignment]  # the same fields, as arrays
        self.noise = noise
        self.pool = None
        self.shared_prompts = shared_prompts
        self._prefix_keys = 0
        # per shared-prompt key and replica, the request whose row marks it (-1: none yet)
        self._prompt_rows = np.full((0, n_replicas), -1, dtype=np.int64)
        c = coefficients
        self.pr = np.array(
            [getattr(c, f) for f in COEFFICIENT_FIELDS]
            + [kv_capacity, max_running, max_prefill_tokens, speculation[0], speculation[1]],
            dtype=np.float64,
        )
        self.n = n_replicas
        self.es = np.zeros((n_replicas, K.N_E), dtype=np.int64)
        self.ef = np.zeros((n_replicas, K.N_EF), dtype=np.float64)
        self.bound = np.zeros(n_replicas, dtype=np.int64)  # requests ever bound to each
        self._alloc(64)
        self.busy = np.zeros((256, 4))
        self.gaps = np.zeros((256, 4))
        self.fin = np.zeros(1024, dtype=np.int64)
        self.fin_t = np.zeros(1024)
        self.cnt = np.zeros(4, dtype=np.int64)
        for j in range(n_replicas):
            self._reset(j, start_time)
        self.replicas = [ReplicaView(self, j) for j in range(n_replicas)]  # type: ignore[misc]
        self._all = np.arange(n_replicas, dtype=np.int64)

    # ------------------------------------------------------------------ state

    def _alloc(self, cap: int) -> None:
        R = self.n
        self.hp = np.zeros((R, cap, 3), dtype=np.int64)
        self.at = np.zeros((R, cap))
        self.ai = np.zeros((R, cap, 2), dtype=np.int64)
        self.wq = np.zeros((R, cap), dtype=np.int64)
        self.sk = np.zeros((R, cap, 2), dtype=np.int64)

    def _grow(self, cap: int) -> None:
        old = (self.hp, self.at, self.ai, self.wq, self.sk)
        self._alloc(cap)
        c = old[0].shape[1]
        self.hp[:, :c] = old[0]
        self.at[:, :c] = old[1]
        self.ai[:, :c] = old[2]
        self.sk[:, :c] = old[4]
        for j in range(self.n):  # the waiting ring, unrolled from its head
            h, w = self.es[j, K.E_WH], self.es[j, K.E_WN]
            self.wq[j, :w] = old[3][j, (h + np.arange(w)) % c]
            self.es[j, K.E_WH] = 0

    def _reset(self, j: int, start_time: float) -> None:
        self.es[j] = 0
        self.es[j, K.E_PK] = -1
        self.ef[j] = 0.0
        self.ef[j, K.EF_T] = start_time
        self.bound[j] = 0

    def reset(self, start_time: float) -> None:
        """As a fresh cluster from `start_time`, on the arrays this one has grown (a
        policy rolling out step after step allocates them once)."""
        self.arrays.clear()
        self._prefix_keys = 0
        self._prompt_rows = self._prompt_rows[:0]
        self.cnt[:] = 0
        for j in range(self.n):
            self._reset(j, start_time)

    def replace_replica(self, j: int, start_time: float) -> None:
        """An empty engine in replica j's place from `start_time`; its logs are dropped
        (the caller keeps what it needs of them first)."""
        for log, key in ((self.busy, K.C_BUSY), (self.gaps, K.C_GAPS)):
            rows = log[: self.cnt[key]]
            rows[rows[:, 0] == j, 0] = -1
        self._reset(j, start_time)
        self._prompt_rows[:, j] = -1  # prompts prefilled on the old engine are not here

    def log_rows(self, log: np.ndarray, key: int, j: int) -> np.ndarray:
        rows = log[: self.cnt[key]]
        return rows[rows[:, 0] == j]

    def before_call(self) -> None:
        """Room in the finished log for every request (its count starts at 0) and in the
        interval logs for one event (`kernel.run` asks for more when it needs it)."""
        n = len(self.store)
        if self.fin.size < n:
            self.fin = np.zeros(2 * n, dtype=np.int64)
            self.fin_t = np.zeros(2 * n)
        self.cnt[K.C_FIN] = 0
        if self.cnt[K.C_BUSY] + 2 >= self.busy.shape[0] or self.cnt[K.C_GAPS] + 2 >= self.gaps.shape[0]:
            self._grow_logs()

    def _grow_logs(self) -> None:
        self.busy = np.concatenate([self.busy, np.zeros_like(self.busy)])
        self.gaps = np.concatenate([self.gaps, np.zeros_like(self.gaps)])

    def fin_args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.fin, self.fin_t, self.cnt

    # ------------------------------------------------------------------ input

    @property
    def coupled(self) -> bool:
        return False

    def submit(self, rids: np.ndarray, replica: np.ndarray, time: float) -> None:
        rids = np.asarray(rids, dtype=np.int64)
        replica = np.asarray(replica, dtype=np.int64)
        self.bound += np.bincount(replica, self.arrays.chain[rids], self.n).astype(np.int64)
        need = int(self.bound.max(initial=0))
        if need > self.hp.shape[1]:
            self._grow(max(need, 2 * self.hp.shape[1]))
        st = self.arrays
        if self.shared_prompts:
            self._bind_prompts(rids, replica)
        _submit(rids, replica, float(time), st.rf, self.es, self.ef, self.at, self.ai, self.wq)

    def _bind_prompts(self, rids: np.ndarray, replica: np.ndarray) -> None:
        """Point each request with a shared prompt (not preempted: those recompute all)
        at the row marking that prompt on its replica: the first such request there.
        Later turns carry none (`requests.step_request_arrays`), so only submitted
        requests are bound."""
        ri = self.arrays.ri
        keep = ri[rids, K.R_PKEY] != -1
        rids, replica = rids[keep], replica[keep]
        if not rids.size:
            return
        key = self.arrays.prefix[rids]
        rows = self._prompt_rows
        n_keys = int(key.max()) + 1
        if rows.shape[0] < n_keys:
            rows = self._prompt_rows = np.vstack([rows, np.full((n_keys - rows.shape[0], self.n), -1)])
        new = rows[key, replica] < 0
        _, first = np.unique(key[new] * self.n + replica[new], return_index=True)
        rows[key[new][first], replica[new][first]] = rids[new][first]
        ri[rids, K.R_PKEY] = rows[key, replica]

    # ------------------------------------------------------------------ running

    def _run(
        self,
        replicas: np.ndarray,
        mode: int,
        until: float = INF,
        target: int = 0,
        last_item: np.ndarray | None = None,
        item_group: np.ndarray | None = None,
        group_left: np.ndarray | None = None,
        watch: np.ndarray | None = None,
        tail: float = 0.0,
    ) -> tuple[int, float]:
        empty = np.zeros(0, dtype=np.int64)  # read in GROUPS mode only
        li = empty if last_item is None else last_item
        ig = empty if item_group is None else item_group
        gl = empty if group_left is None else group_left
        wt = _NO_WATCH if watch is None else watch
        st = self.arrays
        while True:
            out, t = K.run(
                replicas, mode, until, target, li, ig, gl,
                st.ri, st.rf, self.es, self.ef, self.hp, self.at, self.ai, self.wq, self.sk, self.pr,
                self.busy, self.gaps, self.fin, self.fin_t, self.cnt, wt, tail,
            )  # fmt: skip
            if out != K.GROW:
                return int(out), float(t)
            self._grow_logs()

    def run_to(self, until: float, replicas: list[int] | None = None) -> list[tuple[float, int]]:
        """Commit every event completing by `until`; (end, rid) of the requests finished."""
        self.before_call()
        reps = self._all if replicas is None else np.asarray(replicas, dtype=np.int64)
        self._run(reps, K.UNTIL, until)
        k = self.cnt[K.C_FIN]
        return list(zip(self.fin_t[:k].tolist(), self.fin[:k].tolist()))

    def run_all(self) -> None:
        self.run_to(INF)

    def run_until(self, on_finish: Callable[[list[int], float], bool]) -> float | None:
        while True:
            self.before_call()
            out, t = self._run(self._all, K.ANY_FINISH)
            if out != K.STOPPED:
                return None
            if on_finish(self.fin[: self.cnt[K.C_FIN]].tolist(), t):
                return t

    def run_groups(
        self, target: int, done: int, last_item: np.ndarray, item_group: np.ndarray, group_left: np.ndarray
    ) -> tuple[bool, list[tuple[float, int]]]:
        """Run until `target` groups are done (`done` already are; a group's last item's
        last request, `last_item`, decrements `group_left`, a copy); returns whether
        they were, and (end, rid) of the requests finished, in order."""
        reached, ends, rids = self.run_groups_log(target, done, last_item, item_group, group_left)
        return reached, list(zip(ends.tolist(), rids.tolist()))

    def run_groups_log(
        self, target: int, done: int, last_item: np.ndarray, item_group: np.ndarray, group_left: np.ndarray
    ) -> tuple[bool, np.ndarray, np.ndarray]:
        """`run_groups`, the requests finished as arrays: their ends, their ids."""
        self.before_call()
        self.cnt[K.C_DONE_GROUPS] = done
        out, _ = self._run(self._all, K.GROUPS, INF, target, last_item, item_group, group_left)
        k = self.cnt[K.C_FIN]
        return out == K.STOPPED, self.fin_t[:k].copy(), self.fin[:k].copy()

    def run_watched(
        self, until: float, watch: np.ndarray, tail: float, groups: tuple | None = None
    ) -> tuple[int, np.ndarray, np.ndarray]:
        """Run until `until` or a stop of `kernel.run`'s `watch` (replicas drained or in
        their tail; `watch` is updated) or, with `groups` (target, last_item, item_group,
        group_left: as `run_groups`, counted from 0), that many groups done. Returns the
        replica it stopped after (-1: none, `until` reached or nothing left) and the
        requests finished, in order: their ends, their ids (as `run_groups_log`)."""
        self.before_call()
        self.cnt[K.C_DONE_GROUPS] = 0
        if groups is None:
            out, _ = self._run(self._all, K.UNTIL, until, watch=watch, tail=tail)
        else:
            target, last_item, item_group, group_left = groups
            out, _ = self._run(self._all, K.GROUPS, until, target, last_item, item_group, group_left, watch, tail)
        stopped = -1
        if out == K.STOPPED:
            stopped = int(np.flatnonzero(watch[:, K.W_STOP])[0])
            watch[stopped, K.W_STOP] = 0
        k = self.cnt[K.C_FIN]
        return stopped, self.fin_t[:k].copy(), self.fin[:k].copy()

    def advance_to(self, time: float) -> None:
        for eng in self.replicas:
            eng.advance_to(time)

    def stop_at(self, time: float) -> None:
        st = self.arrays
        self.before_call()
        _stop_at(
            time, st.ri, st.rf, self.es, self.ef, self.hp, self.at, self.ai, self.wq, self.sk, self.pr, *self.fin_args()
        )

    def busy_intervals(self, lo: float, hi: float) -> list[list[list[float]]]:
        rows = self.busy[: self.cnt[K.C_BUSY]]
        rows = rows[(rows[:, 2] > lo) & (rows[:, 1] < hi)]  # a long run's log: only what overlaps
        return [
            clip_intervals(rows[rows[:, 0] == j, 1:].tolist(), eng.open_busy(), lo, hi)
            for j, eng in enumerate(self.replicas)
        ]
