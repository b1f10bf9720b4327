"""The compiled event loop of the rollout replicas (numba): `engine.ReplicaEngine`'s
continuous batching, with request and replica state as arrays, advanced in global time
order across the replicas of one cluster until a condition the caller names.

The rules are `engine.ReplicaEngine`'s, line for line (its module doc explains them);
that class stays the readable reference and the oracle the tests compare this loop
with; shared prompts (a request skips its prefill where its group's prompt is, or is
being, prefilled) are `pooled.PooledEngine`'s, which is that class plus them. Only what
a policy decides re-enters Python: the loop runs until a time, until a number of
groups has completed, or until an event finishes a request (`run`'s `mode`).

State layout (`array_cluster.ArrayCluster` owns the arrays):

- requests: `ri[n, 10]` int (columns `R_*`), `rf[n, 4]` float (`RF_*`);
- replicas: `es[R, 18]` int (`E_*`), `ef[R, 6]` float (`EF_*`), and per replica a
  finish heap `hp[R, C, 3]` (iteration, admission seq, rid), an arrivals heap
  `at[R, C]` / `ai[R, C, 2]` (time; order, rid), a waiting ring `wq[R, C]` and the
  admission stack `sk[R, C, 2]` (rid, seq); C bounds the requests bound to a replica;
- logs, written by `run`: closed busy intervals `busy[:, 4]` (replica, start, end,
  tail), idle gaps `gaps[:, 4]` (replica, start, end, rid that arrived or -1) and the
  requests finished in this call `fin[:]` / `fin_t[:]`, with their counts in `cnt`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

INF = math.inf

# request columns
R_PREFILL, R_CONTEXT, R_LEFT, R_NEXT, R_SEQ, R_G0, R_KV0, R_GEN = range(8)
# shared prompts: R_PKEY, the request whose R_PMARK marks this request's prompt on its
# replica (-1: none), R_PMARK: 1 prefilled there, 2 in the prefill being planned
R_PKEY, R_PMARK = 8, 9
RF_GAP, RF_ARRIVE, RF_ADMIT, RF_END = range(4)
# replica columns
(E_G, E_B, E_S, E_PEAK, E_SEQ, E_NARR, E_DEC, E_PRE, E_PREEMPT) = range(9)
(E_HN, E_AN, E_WH, E_WN, E_SN, E_PK, E_PM, E_PSP, E_BOPEN) = range(9, 18)
EF_T, EF_TAIL, EF_BSTART, EF_RECOMP, EF_PT, EF_PTAU = range(6)
N_E, N_EF = 18, 6
# parameters
P_DA, P_DB, P_DC, P_PA, P_PB, P_PC, P_KV, P_RUN, P_PREFILL = range(9)
P_SPEC_SEQS, P_SPEC_F = 9, 10  # speculative decoding of the tail: (tail_seqs, factor)
# log counters
C_BUSY, C_GAPS, C_FIN, C_DONE_GROUPS = range(4)
# plan kinds (E_PK); -1: no plan
IDLE, PREFILL, DECODE, PREEMPT = 0, 1, 2, 3
# run modes and outcomes
UNTIL, GROUPS, ANY_FINISH = 0, 1, 2
ALL_DONE, REACHED, STOPPED, GROW = 0, 1, 2, 3
# watched replicas (`run`'s `watch`, one row per replica): a tag (-1: not watched), the
# tie order among replicas (counted up at each of its events), set where the run stopped
W_TAG, W_ORDER, W_STOP = range(3)

_jit = numba.njit(cache=True, nogil=True)


@_jit
def decode_series(m: int, alpha: float, beta: float) -> float:
    return m * alpha + beta * (m * (m - 1) * 0.5)


@_jit
def iterations_until(delta: float, alpha: float, beta: float, at_least: bool) -> int:
    """`predictor.iterations_until`, compiled."""
    if delta <= 0:
        return 1 if at_least else 0
    h = alpha - 0.5 * beta
    root = 2.0 * delta / (h + math.sqrt(h * h + 2.0 * beta * delta)) if (h > 0 or beta > 0) else INF
    if at_least:
        m = 1 if root == INF else max(1, math.ceil(root - 1e-9))
        while decode_series(m, alpha, beta) < delta:
            m += 1
        while m > 1 and decode_series(m - 1, alpha, beta) >= delta:
            m -= 1
        return m
    m = 0 if root == INF else max(0, math.floor(root + 1e-9))
    while m > 0 and decode_series(m, alpha, beta) > delta:
        m -= 1
    while decode_series(m + 1, alpha, beta) <= delta:
        m += 1
    return m


# ---------------------------------------------------------------- heaps and queues


@_jit
def _hp_less(hp: np.ndarray, j: int, a: int, b: int) -> bool:
    return hp[j, a, 0] < hp[j, b, 0] or (hp[j, a, 0] == hp[j, b, 0] and hp[j, a, 1] < hp[j, b, 1])


@_jit
def _hp_swap(hp: np.ndarray, j: int, a: int, b: int) -> None:
    for c in range(3):
        x = hp[j, a, c]
        hp[j, a, c] = hp[j, b, c]
        hp[j, b, c] = x


@_jit
def _hp_down(hp: np.ndarray, j: int, n: int, i: int) -> None:
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _hp_less(hp, j, c + 1, c):
            c += 1
        if not _hp_less(hp, j, c, i):
            return
        _hp_swap(hp, j, c, i)
        i = c


@_jit
def _hp_pop(hp: np.ndarray, es: np.ndarray, j: int) -> None:
    n = es[j, E_HN] - 1
    es[j, E_HN] = n
    if n > 0:
        for c in range(3):
            hp[j, 0, c] = hp[j, n, c]
        _hp_down(hp, j, n, 0)


@_jit
def _hp_push(hp: np.ndarray, es: np.ndarray, ri: np.ndarray, j: int, fi: int, seq: int, rid: int) -> None:
    n = es[j, E_HN]
    if n == hp.shape[1]:  # full of stale entries of preempted requests: drop them
        k = 0
        for i in range(n):
            if ri[hp[j, i, 2], R_SEQ] == hp[j, i, 1]:
                for c in range(3):
                    hp[j, k, c] = hp[j, i, c]
                k += 1
        n = k
        for i in range(n // 2 - 1, -1, -1):
            _hp_down(hp, j, n, i)
    hp[j, n, 0] = fi
    hp[j, n, 1] = seq
    hp[j, n, 2] = rid
    i = n
    while i > 0:
        p = (i - 1) // 2
        if not _hp_less(hp, j, i, p):
            break
        _hp_swap(hp, j, i, p)
        i = p
    es[j, E_HN] = n + 1


@_jit
def _at_less(at: np.ndarray, ai: np.ndarray, j: int, a: int, b: int) -> bool:
    return at[j, a] < at[j, b] or (at[j, a] == at[j, b] and ai[j, a, 0] < ai[j, b, 0])


@_jit
def _at_swap(at: np.ndarray, ai: np.ndarray, j: int, a: int, b: int) -> None:
    x = at[j, a]
    at[j, a] = at[j, b]
    at[j, b] = x
    for c in range(2):
        y = ai[j, a, c]
        ai[j, a, c] = ai[j, b, c]
        ai[j, b, c] = y


@_jit
def arrival_push(at: np.ndarray, ai: np.ndarray, es: np.ndarray, j: int, time: float, rid: int) -> None:
    es[j, E_NARR] += 1
    i = es[j, E_AN]
    at[j, i] = time
    ai[j, i, 0] = es[j, E_NARR]
    ai[j, i, 1] = rid
    es[j, E_AN] = i + 1
    while i > 0:
        p = (i - 1) // 2
        if not _at_less(at, ai, j, i, p):
            break
        _at_swap(at, ai, j, i, p)
        i = p


@_jit
def _at_pop(at: np.ndarray, ai: np.ndarray, es: np.ndarray, j: int) -> int:
    rid = ai[j, 0, 1]
    n = es[j, E_AN] - 1
    es[j, E_AN] = n
    if n > 0:
        at[j, 0] = at[j, n]
        ai[j, 0, 0] = ai[j, n, 0]
        ai[j, 0, 1] = ai[j, n, 1]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and _at_less(at, ai, j, c + 1, c):
                c += 1
            if not _at_less(at, ai, j, c, i):
                break
            _at_swap(at, ai, j, c, i)
            i = c
    return rid


@_jit
def waiting_push(wq: np.ndarray, es: np.ndarray, j: int, rid: int) -> None:
    cap = wq.shape[1]
    wq[j, (es[j, E_WH] + es[j, E_WN]) % cap] = rid
    es[j, E_WN] += 1


@_jit
def _wq_popleft(wq: np.ndarray, es: np.ndarray, j: int) -> int:
    h = es[j, E_WH]
    rid = wq[j, h]
    es[j, E_WH] = (h + 1) % wq.shape[1]
    es[j, E_WN] -= 1
    return rid


@_jit
def _wq_pushleft(wq: np.ndarray, es: np.ndarray, j: int, rid: int) -> None:
    h = (es[j, E_WH] - 1) % wq.shape[1]
    es[j, E_WH] = h
    wq[j, h] = rid
    es[j, E_WN] += 1


@_jit
def _sk_push(sk: np.ndarray, es: np.ndarray, ri: np.ndarray, j: int, rid: int, seq: int) -> None:
    n = es[j, E_SN]
    if n == sk.shape[1]:  # full of stale entries: keep the live ones, in order
        k = 0
        for i in range(n):
            if ri[sk[j, i, 0], R_SEQ] == sk[j, i, 1]:
                sk[j, k, 0] = sk[j, i, 0]
                sk[j, k, 1] = sk[j, i, 1]
                k += 1
        n = k
    sk[j, n, 0] = rid
    sk[j, n, 1] = seq
    es[j, E_SN] = n + 1


# ---------------------------------------------------------------- planning


@_jit
def _decode_ab(j: int, es: np.ndarray, pr: np.ndarray) -> tuple[float, float]:
    """`ReplicaEngine._series`: (first iteration time, growth per iteration) of replica
    j's decode series, scaled by the speculation factor in its tail."""
    B = es[j, E_B]
    alpha = pr[P_DA] + pr[P_DB] * (es[j, E_S] + B * es[j, E_G]) + pr[P_DC] * B
    beta = pr[P_DB] * B
    if B <= pr[P_SPEC_SEQS]:
        f = pr[P_SPEC_F]
        return alpha * f, beta * f
    return alpha, beta


@_jit
def _admissible(j: int, ri: np.ndarray, es: np.ndarray, wq: np.ndarray, pr: np.ndarray) -> tuple[int, int, int]:
    """How many waiting requests replica j's next prefill iteration admits, and the sum
    and the sum of squares of their uncached tokens."""
    B = es[j, E_B]
    room = int(pr[P_RUN]) - B
    kv_free = pr[P_KV] - (es[j, E_S] + B * es[j, E_G])
    budget = pr[P_PREFILL]
    k = sp = sp2 = need = 0
    cap = wq.shape[1]
    h = es[j, E_WH]
    for i in range(min(room, es[j, E_WN])):
        r = wq[j, (h + i) % cap]
        p = ri[r, R_PREFILL]
        key = ri[r, R_PKEY]
        if key >= 0 and ri[key, R_PMARK]:
            p = 0  # its prompt is prefilled here already, or in this iteration
        kv = ri[r, R_CONTEXT] + 1
        if k and (sp + p > budget or need + kv > kv_free):
            break
        if not k and kv > kv_free and B:
            break  # wait for memory to free up
        if key >= 0 and not ri[key, R_PMARK]:
            ri[key, R_PMARK] = 2
        k += 1
        sp += p
        sp2 += p * p
        need += kv
    _unmark_planned(j, k, ri, es, wq)  # a plan may be dropped: _prefill marks its prompts
    return k, sp, sp2


@_jit
def _unmark_planned(j: int, k: int, ri: np.ndarray, es: np.ndarray, wq: np.ndarray) -> None:
    """Clear the marks (2) of the prompts of the first k requests waiting on replica j."""
    cap = wq.shape[1]
    h = es[j, E_WH]
    for i in range(k):
        key = ri[wq[j, (h + i) % cap], R_PKEY]
        if key >= 0 and ri[key, R_PMARK] == 2:
            ri[key, R_PMARK] = 0


@_jit
def plan(
    j: int,
    ri: np.ndarray,
    rf: np.ndarray,
    es: np.ndarray,
    ef: np.ndarray,
    hp: np.ndarray,
    at: np.ndarray,
    ai: np.ndarray,
    wq: np.ndarray,
    pr: np.ndarray,
) -> float:
    """Plan replica j's next event (kept in E_PK, E_PM, E_PSP, EF_PT, EF_PTAU)."""
    if es[j, E_PK] >= 0:
        return ef[j, EF_PT]
    t = ef[j, EF_T]
    while es[j, E_AN] > 0 and at[j, 0] <= t:
        waiting_push(wq, es, j, _at_pop(at, ai, es, j))
    while es[j, E_HN] > 0 and ri[hp[j, 0, 2], R_SEQ] != hp[j, 0, 1]:
        _hp_pop(hp, es, j)  # stale entry of a preempted request
    B = es[j, E_B]
    G = es[j, E_G]
    S = es[j, E_S]
    kv_cap = pr[P_KV]
    if B < pr[P_RUN] and es[j, E_WN] > 0:
        k, sp, sp2 = _admissible(j, ri, es, wq, pr)
        if k:
            tau = pr[P_PA] + pr[P_PB] * sp + pr[P_PC] * sp2
            es[j, E_PK] = PREFILL
            es[j, E_PM] = k
            es[j, E_PSP] = sp
            ef[j, EF_PTAU] = tau
            ef[j, EF_PT] = t + tau
            return t + tau
    t_next = at[j, 0] if es[j, E_AN] > 0 else INF
    if B:
        kv_fits = S + B * G <= kv_cap
        if not kv_fits and B > 1:
            es[j, E_PK] = PREEMPT
            ef[j, EF_PT] = t
            return t
        m = hp[j, 0, 0] - G + 1
        if kv_fits and kv_cap != INF:
            m_kv = int((kv_cap - S) // B) - G + 1
            if m_kv < m:
                m = m_kv
        alpha, beta = _decode_ab(j, es, pr)
        if t_next != INF and B < pr[P_RUN]:
            m_a = iterations_until(t_next - t, alpha, beta, True)
            if m_a < m:
                m = m_a
        tau = decode_series(m, alpha, beta)
        es[j, E_PK] = DECODE
        es[j, E_PM] = m
        ef[j, EF_PTAU] = tau
        ef[j, EF_PT] = t + tau
        return t + tau
    es[j, E_PK] = IDLE
    es[j, E_PM] = ai[j, 0, 1] if es[j, E_AN] > 0 else -1
    ef[j, EF_PT] = t_next
    return t_next


# ---------------------------------------------------------------- events


@_jit
def _mark_busy(es: np.ndarray, ef: np.ndarray, j: int) -> None:
    if not es[j, E_BOPEN]:
        es[j, E_BOPEN] = 1
        ef[j, EF_BSTART] = ef[j, EF_T]
        es[j, E_PEAK] = 0
        ef[j, EF_TAIL] = 0.0


@_jit
def _close_busy(es: np.ndarray, ef: np.ndarray, busy: np.ndarray, cnt: np.ndarray, j: int, end: float) -> None:
    if es[j, E_BOPEN]:
        start = ef[j, EF_BSTART]
        i = cnt[C_BUSY]
        busy[i, 0] = j
        busy[i, 1] = start
        busy[i, 2] = max(end, start)
        busy[i, 3] = min(ef[j, EF_TAIL], end - start)
        cnt[C_BUSY] = i + 1
        es[j, E_BOPEN] = 0


@_jit
def _finish(
    j: int,
    r: int,
    t: float,
    ri: np.ndarray,
    rf: np.ndarray,
    es: np.ndarray,
    at: np.ndarray,
    ai: np.ndarray,
    wq: np.ndarray,
    fin: np.ndarray,
    fin_t: np.ndarray,
    cnt: np.ndarray,
) -> None:
    """Request r finished at t: log it; its trajectory's next turn arrives after its gap."""
    rf[r, RF_END] = t
    i = cnt[C_FIN]
    fin[i] = r
    fin_t[i] = t
    cnt[C_FIN] = i + 1
    n = ri[r, R_NEXT]
    if n >= 0:
        time = t + rf[r, RF_GAP]
        rf[n, RF_ARRIVE] = time
        if time <= t:
            waiting_push(wq, es, j, n)
        else:
            arrival_push(at, ai, es, j, time, n)


@_jit
def _decode(
    j: int,
    m: int,
    tau: float,
    ri: np.ndarray,
    rf: np.ndarray,
    es: np.ndarray,
    ef: np.ndarray,
    hp: np.ndarray,
    at: np.ndarray,
    ai: np.ndarray,
    wq: np.ndarray,
    fin: np.ndarray,
    fin_t: np.ndarray,
    cnt: np.ndarray,
) -> None:
    _mark_busy(es, ef, j)
    B = es[j, E_B]
    if B < es[j, E_PEAK] and es[j, E_WN] == 0:
        # nothing left to admit: the free slots are the rollout tail
        ef[j, EF_TAIL] += tau * (1.0 - B / es[j, E_PEAK])
    t = ef[j, EF_T] + tau
    ef[j, EF_T] = t
    G = es[j, E_G] + m
    es[j, E_G] = G
    es[j, E_DEC] += B * m
    S = es[j, E_S]
    while es[j, E_HN] > 0 and hp[j, 0, 0] < G:
        seq = hp[j, 0, 1]
        r = hp[j, 0, 2]
        _hp_pop(hp, es, j)
        if ri[r, R_SEQ] != seq:
            continue
        ri[r, R_SEQ] = -1
        B -= 1
        g0 = ri[r, R_G0]
        S -= ri[r, R_KV0] - g0
        ri[r, R_GEN] += 1 + G - g0
        _finish(j, r, t, ri, rf, es, at, ai, wq, fin, fin_t, cnt)
    es[j, E_B] = B
    es[j, E_S] = S


@_jit
def _prefill(
    j: int,
    k: int,
    tau: float,
    sp: int,
    ri: np.ndarray,
    rf: np.ndarray,
    es: np.ndarray,
    ef: np.ndarray,
    hp: np.ndarray,
    at: np.ndarray,
    ai: np.ndarray,
    wq: np.ndarray,
    sk: np.ndarray,
    fin: np.ndarray,
    fin_t: np.ndarray,
    cnt: np.ndarray,
) -> None:
    _mark_busy(es, ef, j)
    G = es[j, E_G]
    start = ef[j, EF_T]
    t = start + tau
    ef[j, EF_T] = t
    es[j, E_PRE] += sp
    seq = es[j, E_SEQ]
    B = es[j, E_B]
    S = es[j, E_S]
    for _ in range(k):
        r = _wq_popleft(wq, es, j)
        if ri[r, R_PKEY] >= 0:
            ri[ri[r, R_PKEY], R_PMARK] = 1  # its prompt is prefilled here now
        if rf[r, RF_ADMIT] != rf[r, RF_ADMIT]:  # NaN: first admission
            rf[r, RF_ADMIT] = start
        n_left = ri[r, R_LEFT]
        if n_left == 1:
            ri[r, R_GEN] += 1
            _finish(j, r, t, ri, rf, es, at, ai, wq, fin, fin_t, cnt)
            continue
        seq += 1
        ri[r, R_SEQ] = seq
        ri[r, R_G0] = G
        kv = ri[r, R_CONTEXT] + 1
        ri[r, R_KV0] = kv
        S += kv - G
        B += 1
        _hp_push(hp, es, ri, j, G + n_left - 2, seq, r)
        _sk_push(sk, es, ri, j, r, seq)
    es[j, E_SEQ] = seq
    es[j, E_B] = B
    es[j, E_S] = S
    if B > es[j, E_PEAK]:
        es[j, E_PEAK] = B


@_jit
def take_progress(ri: np.ndarray, r: int, gen: int) -> None:
    """Running request r leaves its batch after `gen` tokens: they join its context,
    which it prefills again when it resumes (recompute)."""
    ri[r, R_SEQ] = -1
    ri[r, R_GEN] += gen
    ri[r, R_LEFT] -= gen
    ri[r, R_CONTEXT] += gen
    ri[r, R_PREFILL] = ri[r, R_CONTEXT]


@_jit
def _preempt(
    j: int, ri: np.ndarray, es: np.ndarray, ef: np.ndarray, wq: np.ndarray, sk: np.ndarray, pr: np.ndarray
) -> None:
    """Recompute-preempt the most recently admitted running request."""
    while es[j, E_SN] > 0:
        n = es[j, E_SN] - 1
        es[j, E_SN] = n
        r = sk[j, n, 0]
        if ri[r, R_SEQ] != sk[j, n, 1]:
            continue
        es[j, E_B] -= 1
        es[j, E_S] -= ri[r, R_KV0] - ri[r, R_G0]
        take_progress(ri, r, 1 + (es[j, E_G] - ri[r, R_G0]))
        p = ri[r, R_CONTEXT]
        ri[r, R_PKEY] = -1  # recomputes its whole context
        _wq_pushleft(wq, es, j, r)
        es[j, E_PREEMPT] += 1
        ef[j, EF_RECOMP] += pr[P_PB] * p + pr[P_PC] * p * p
        return


@_jit
def commit(
    j: int,
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
    busy: np.ndarray,
    gaps: np.ndarray,
    fin: np.ndarray,
    fin_t: np.ndarray,
    cnt: np.ndarray,
) -> None:
    """Apply replica j's planned event."""
    plan(j, ri, rf, es, ef, hp, at, ai, wq, pr)
    kind = es[j, E_PK]
    es[j, E_PK] = -1
    if kind == DECODE:
        _decode(j, es[j, E_PM], ef[j, EF_PTAU], ri, rf, es, ef, hp, at, ai, wq, fin, fin_t, cnt)
    elif kind == PREFILL:
        _prefill(j, es[j, E_PM], ef[j, EF_PTAU], es[j, E_PSP], ri, rf, es, ef, hp, at, ai, wq, sk, fin, fin_t, cnt)
    elif kind == PREEMPT:
        _preempt(j, ri, es, ef, wq, sk, pr)
    elif ef[j, EF_PT] != INF:  # idle until the next arrival
        _close_busy(es, ef, busy, cnt, j, ef[j, EF_T])
        i = cnt[C_GAPS]
        gaps[i, 0] = j
        gaps[i, 1] = ef[j, EF_T]
        gaps[i, 2] = ef[j, EF_PT]
        gaps[i, 3] = es[j, E_PM]
        cnt[C_GAPS] = i + 1
        ef[j, EF_T] = ef[j, EF_PT]


# ---------------------------------------------------------------- driving


@_jit
def _groups_done(
    n_fin: int, last_item: np.ndarray, item_group: np.ndarray, group_left: np.ndarray, fin: np.ndarray, cnt: np.ndarray
) -> int:
    """Count the groups the requests finished since log entry `n_fin` complete."""
    for i in range(n_fin, cnt[C_FIN]):
        k = last_item[fin[i]]
        if k >= 0:
            g = item_group[k]
            group_left[g] -= 1
            if group_left[g] == 0:
                cnt[C_DONE_GROUPS] += 1
    return cnt[C_DONE_GROUPS]


@_jit
def _goes_first(a: int, b: int, watch: np.ndarray) -> bool:
    """Replica a's event before b's at the same time (`run`'s tie order)."""
    if watch.shape[0] and watch[a, W_ORDER] != watch[b, W_ORDER]:
        return watch[a, W_ORDER] < watch[b, W_ORDER]
    return a < b


@_jit
def _in_tail(j: int, tail: float, es: np.ndarray) -> bool:
    """Running its last few (a replica whose batch has not arrived yet is not in its tail)."""
    return 0 < es[j, E_B] <= tail and es[j, E_WN] == 0


@_jit
def _watched_stop(
    j: int,
    n_fin: int,
    groups: bool,
    target: int,
    last_item: np.ndarray,
    item_group: np.ndarray,
    group_left: np.ndarray,
    fin: np.ndarray,
    cnt: np.ndarray,
    watch: np.ndarray,
    tail: float,
    es: np.ndarray,
) -> bool:
    """After replica j's event (its finished requests logged from `n_fin` on): stop
    there (`run`'s `watch`, and in GROUPS mode its group count)?"""
    watch[j, W_ORDER] += 1
    tag = watch[j, W_TAG]
    stop = False
    if groups and cnt[C_FIN] > n_fin:
        stop = _groups_done(n_fin, last_item, item_group, group_left, fin, cnt) >= target
    if not stop and tag >= 0:
        stop = es[j, E_B] + es[j, E_WN] + es[j, E_AN] == 0  # drained
        if not stop and _in_tail(j, tail, es):
            for k in range(watch.shape[0]):
                if k != j and watch[k, W_TAG] == tag and _in_tail(k, tail, es):
                    stop = True
                    break
    if stop:
        watch[j, W_STOP] = 1
    return stop


@_jit
def run(
    replicas: np.ndarray,
    mode: int,
    until: float,
    target: int,
    last_item: np.ndarray,
    item_group: np.ndarray,
    group_left: np.ndarray,
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
    busy: np.ndarray,
    gaps: np.ndarray,
    fin: np.ndarray,
    fin_t: np.ndarray,
    cnt: np.ndarray,
    watch: np.ndarray,
    tail: float,
) -> tuple[int, float]:
    """Commit events of `replicas` in global time order (ties: lower index first).

    mode UNTIL: every event completing by `until`; GROUPS: until `cnt[C_DONE_GROUPS]`
    reaches `target`, counting a group done when its `group_left` (decremented as the
    last requests of its items, `last_item`, finish) reaches 0; ANY_FINISH: until an
    event finishes a request. Returns (outcome, time): ALL_DONE (nothing left), REACHED
    (`until`), STOPPED (the condition held after the event ending at `time`) or GROW
    (a log is full: enlarge it and call again; nothing was applied).

    With `watch` (a row per replica, `W_*`; empty: none), ties go by `W_ORDER` first, and
    the run also stops after an event of a watched replica that left it drained or in
    its tail (at most `tail` running, none waiting) while a watched replica of the same
    tag is in its tail too; it stops before that replica plans again (as the Python
    engine's caller sees it) and marks it `W_STOP`. Laminar repacks and ends batches there.
    """
    n_rep = replicas.size
    times = np.empty(n_rep)  # each replica's next event; only the one that moved re-plans
    for q in range(n_rep):
        times[q] = plan(replicas[q], ri, rf, es, ef, hp, at, ai, wq, pr)
    while True:
        q_best = -1
        t_best = INF
        for q in range(n_rep):
            tq = times[q]
            if tq < t_best or (tq == t_best and q_best >= 0 and _goes_first(replicas[q], replicas[q_best], watch)):
                q_best = q
                t_best = tq
        if q_best < 0 or t_best == INF:
            return ALL_DONE, INF
        if t_best > until:
            return REACHED, until
        if cnt[C_BUSY] + 1 >= busy.shape[0] or cnt[C_GAPS] + 1 >= gaps.shape[0]:
            return GROW, t_best
        best = replicas[q_best]
        n_fin = cnt[C_FIN]
        commit(best, ri, rf, es, ef, hp, at, ai, wq, sk, pr, busy, gaps, fin, fin_t, cnt)
        if watch.shape[0] and _watched_stop(
            best, n_fin, mode == GROUPS, target, last_item, item_group, group_left, fin, cnt, watch, tail, es
        ):
            return STOPPED, t_best  # before the replica plans on
        times[q_best] = plan(best, ri, rf, es, ef, hp, at, ai, wq, pr)
        if watch.shape[0] or cnt[C_FIN] == n_fin:
            continue
        if mode == ANY_FINISH:
            return STOPPED, t_best
        if mode == GROUPS and _groups_done(n_fin, last_item, item_group, group_left, fin, cnt) >= target:
            return STOPPED, t_best


@_jit
def advance_to(
    j: int,
    time: float,
    ri: np.ndarray,
    rf: np.ndarray,
    es: np.ndarray,
    ef: np.ndarray,
    hp: np.ndarray,
    at: np.ndarray,
    ai: np.ndarray,
    wq: np.ndarray,
    pr: np.ndarray,
    fin: np.ndarray,
    fin_t: np.ndarray,
    cnt: np.ndarray,
) -> None:
    """`ReplicaEngine.advance_to`: the decode iterations of replica j complete by `time`."""
    if time <= ef[j, EF_T]:
        return
    plan(j, ri, rf, es, ef, hp, at, ai, wq, pr)
    if es[j, E_PK] == DECODE and es[j, E_B]:
        alpha, beta = _decode_ab(j, es, pr)
        m = iterations_until(time - ef[j, EF_T], alpha, beta, False)
        m = min(m, es[j, E_PM] - 1)
        if m > 0:
            es[j, E_PK] = -1
            _decode(j, m, decode_series(m, alpha, beta), ri, rf, es, ef, hp, at, ai, wq, fin, fin_t, cnt)
    es[j, E_PK] = -1
