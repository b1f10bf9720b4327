"""Replicas sharing work (core/simulator/pooled.py): dynamic dispatch from a shared
queue, work stealing and a group's prompt prefilled once per replica — against a
token-by-token reference stepper of several replicas written here, and against the
static engine where they must replay identically."""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np
import pytest

from core.simulator.cluster import RolloutCluster
from core.simulator.predictor import EngineCoefficients
from core.simulator.requests import chunk_requests, sample_tokens, select_samples, step_request_arrays
from core.simulator.workload import StepWorkload

COEF = EngineCoefficients(decode_a=0.01, decode_b=1e-5, decode_c=2e-3, prefill_a=0.02, prefill_b=1e-4, prefill_c=1e-8)


# --------------------------------------------------------------------------- reference


class _Replica:
    def __init__(self):
        self.t = 0.0
        self.waiting: deque[int] = deque()
        self.arrivals: list[tuple[float, int, int]] = []
        self.running: list[int] = []  # admission order
        self.seen: set[int] = set()
        self.preemptions = 0
        self.prefilled = 0


def reference_stepper(req, n_replicas, *, bound, queued, stealing, coef, max_running, kv_cap, max_prefill):
    """One iteration at a time per replica, replicas in global time order (ties: lower
    index first). `req` holds per-request lists prefill, context, decode, gap, next,
    prefix, cont and optionally `migrate`, the chunk continuations; `bound` is
    [(rid, replica)] in submission order, `queued` [(key, rid)] for the shared queue. At
    every iteration boundary a replica with a free slot admits from its own queue, then
    from the shared queue (lowest key, then first queued; at most ceil(queued /
    replicas) at a time), or steals when both are empty; an idle replica looks again
    whenever another replica decides. A chunk's continuation is handed, when the chunk
    ends, to the replica with the fewest requests running (those ending later counted),
    waiting and arriving — the chunk's own replica on a tie, then the lowest index."""
    prefill, context, left = list(req["prefill"]), list(req["context"]), list(req["decode"])
    prefix, cont, gap, nxt = list(req["prefix"]), req["cont"], req["gap"], req["next"]
    migrate = set(req.get("migrate", ()))
    end = [math.nan] * len(prefill)
    reps = [_Replica() for _ in range(n_replicas)]
    for i, rep in enumerate(reps):
        rep.index, rep.ended = i, []  # ended: requests finished in its last iteration
    handoffs: list[tuple[float, int, int, int]] = []  # (time, replica, order, rid)
    for r, j in bound:
        reps[j].waiting.append(r)
    shared = [(k, i, r) for i, (k, r) in enumerate(queued)]
    heapq.heapify(shared)
    kv, gen = {}, {}
    order = 0

    def stealable(rep):
        return [r for r in rep.waiting if not cont[r]]

    def steal(thief):
        best, best_n = None, 0
        for rep in reps:
            n = len(stealable(rep)) if rep is not thief else 0
            if n > best_n:
                best, best_n = rep, n
        if best is None:
            return
        take = min(max_running - len(thief.running), (best_n + 1) // 2)
        mine = [r for r in reversed(best.waiting) if not cont[r]][:take]
        best.waiting = deque(r for r in best.waiting if r not in mine)
        thief.waiting.extend(reversed(mine))

    def admit(rep):
        if not rep.waiting and not shared and stealing:
            steal(rep)
        batch, keys = [], set()
        kv_free = kv_cap - sum(kv[r] for r in rep.running)
        sp = need = 0
        own = list(rep.waiting)
        share = -(-len(shared) // n_replicas)  # at most this many from the shared queue
        while len(batch) < max_running - len(rep.running):
            from_shared = len(batch) >= len(own)
            if from_shared and (not shared or len(batch) - len(own) >= share):
                break
            r = shared[0][2] if from_shared else own[len(batch)]
            p = 0 if prefix[r] >= 0 and (prefix[r] in rep.seen or prefix[r] in keys) else prefill[r]
            k = context[r] + 1
            if batch and (sp + p > max_prefill or need + k > kv_free):
                break
            if not batch and k > kv_free and rep.running:
                break
            if from_shared:
                heapq.heappop(shared)
                rep.waiting.append(r)
            batch.append((r, p))
            if prefix[r] >= 0:
                keys.add(prefix[r])
            sp += p
            need += k
        return batch

    def finish(rep, r, t):
        nonlocal order
        end[r] = t
        rep.ended.append(r)
        order += 1
        if nxt[r] in migrate:
            heapq.heappush(handoffs, (t, rep.index, order, nxt[r]))
        elif nxt[r] >= 0:
            heapq.heappush(rep.arrivals, (t + gap[r], order, nxt[r]))

    def hand_off(t, j, r):
        nonlocal order

        def load(rep):
            later = sum(1 for x in rep.ended if end[x] > t)  # its iteration under way
            return len(rep.running) + later + len(rep.waiting) + len(rep.arrivals)

        to = min(reps, key=lambda rep: (load(rep), rep.index != j, rep.index))
        order += 1
        heapq.heappush(to.arrivals, (t, order, r))

    def decide(rep):
        """One decision at rep.t; returns False when the replica has nothing to do."""
        while rep.arrivals and rep.arrivals[0][0] <= rep.t:
            rep.waiting.append(heapq.heappop(rep.arrivals)[2])
        rep.ended = []
        batch = admit(rep) if len(rep.running) < max_running else []
        if batch:
            sp = sum(p for _, p in batch)
            rep.t += coef.prefill_a + coef.prefill_b * sp + coef.prefill_c * sum(p * p for _, p in batch)
            rep.prefilled += sp
            for r, _ in batch:
                rep.waiting.popleft()
                if prefix[r] >= 0:
                    rep.seen.add(prefix[r])
                if left[r] == 1:
                    finish(rep, r, rep.t)
                else:
                    rep.running.append(r)
                    kv[r], gen[r] = context[r] + 1, 1
            return True
        if rep.running:
            total = sum(kv[r] for r in rep.running)
            if total > kv_cap and len(rep.running) > 1:
                r = rep.running.pop()
                context[r] += gen[r]
                prefill[r] = context[r]
                left[r] -= gen[r]
                prefix[r] = -1
                rep.waiting.appendleft(r)
                rep.preemptions += 1
                return True
            rep.t += coef.decode_a + coef.decode_b * total + coef.decode_c * len(rep.running)
            still = []
            for r in rep.running:
                gen[r] += 1
                kv[r] += 1
                if gen[r] == left[r]:
                    finish(rep, r, rep.t)
                else:
                    still.append(r)
            rep.running = still
            return True
        return False

    idle = [False] * n_replicas
    while True:

        def due(i):
            if not idle[i]:
                return reps[i].t
            return reps[i].arrivals[0][0] if reps[i].arrivals else math.inf

        j = min(range(n_replicas), key=lambda i: (due(i), i))
        if handoffs and handoffs[0][:2] <= (due(j), j):  # a chunk ended: before what follows
            t, came_from, _, r = heapq.heappop(handoffs)
            hand_off(t, came_from, r)
            continue
        if due(j) == math.inf:
            break
        rep = reps[j]
        rep.t, idle[j] = due(j), False
        now = rep.t
        if decide(rep):
            for i in range(n_replicas):  # idle replicas look again at this moment
                if idle[i]:
                    reps[i].t, idle[i] = now, False
        else:
            idle[j] = True
    return end, [r.preemptions for r in reps], [r.prefilled for r in reps]


def _random_requests(rng, n_groups):
    """Single-turn groups sharing a prompt (prefix key = group) and multi-turn
    trajectories (later turns arrive after a tool call, their prefix cached)."""
    cols = {k: [] for k in ("prefill", "context", "decode", "gap", "next", "prefix", "cont")}
    firsts = []
    for g in range(n_groups):
        if rng.random() < 0.6:
            prompt = int(rng.integers(5, 150))
            for _ in range(int(rng.integers(1, 5))):
                firsts.append(len(cols["prefill"]))
                for k, v in (("prefill", prompt), ("context", prompt), ("decode", int(rng.integers(1, 120)))):
                    cols[k].append(v)
                cols["gap"].append(0.0)
                cols["next"].append(-1)
                cols["prefix"].append(g)
                cols["cont"].append(False)
            continue
        ctx, cached = int(rng.integers(5, 200)), 0
        firsts.append(len(cols["prefill"]))
        turns = int(rng.integers(1, 4))
        for t in range(turns):
            out = int(rng.integers(1, 100))
            cols["prefill"].append(ctx - cached)
            cols["context"].append(ctx)
            cols["decode"].append(out)
            cols["gap"].append(float(rng.uniform(0, 0.5)) if t + 1 < turns else 0.0)
            cols["next"].append(len(cols["prefill"]) if t + 1 < turns else -1)
            cols["prefix"].append(-1)
            cols["cont"].append(t > 0)
            cached = ctx + out
            ctx = cached + int(rng.integers(10, 100))
    return cols, firsts


def _fast(req, n_replicas, *, bound, queued, stealing, max_running, kv_cap, max_prefill):
    rc = RolloutCluster(
        n_replicas,
        COEF,
        max_running=max_running,
        kv_capacity=kv_cap,
        max_prefill_tokens=max_prefill,
        shared_queue=bool(queued),
        stealing=stealing,
        spread_groups=True,
    )
    n = len(req["prefill"])
    rel_next = [x for x in req["next"]]
    rc.store.add(req["prefill"], req["context"], req["decode"], req["gap"], rel_next, list(range(n)), req["prefix"])
    if rc.pool is not None:
        rc.pool.migrating.update(req.get("migrate", ()))
    if bound:
        rc.submit(np.array([r for r, _ in bound]), np.array([j for _, j in bound]), 0.0)
    for k, r in queued:  # one run per request
        rc.enqueue([r], k, 0.0)
    rc.run_all()
    return rc


CASES = [  # seed, replicas, max_running, KV tokens, prefill budget
    (0, 3, 1000, math.inf, 10**9),
    (1, 2, 4, math.inf, 10**9),
    (2, 3, 8, 900.0, 256),  # small KV cache: preemption by recompute
    (3, 4, 3, 600.0, 64),
    (4, 2, 16, 2500.0, 512),
    (5, 3, 6, 1200.0, 300),
]


@pytest.mark.parametrize("mode", ["shared_queue", "stealing", "shared_queue+stealing", "spread"])
@pytest.mark.parametrize("seed,replicas,max_running,kv_cap,max_prefill", CASES)
def test_sharing_matches_token_by_token_stepper(mode, seed, replicas, max_running, kv_cap, max_prefill):
    rng = np.random.default_rng(seed)
    req, firsts = _random_requests(rng, 14)
    keys = rng.integers(0, 4, len(firsts)).astype(float)  # ties: first queued first
    queued = [(float(k), r) for k, r in zip(keys, firsts)] if "shared_queue" in mode else []
    # bound requests pile up on replica 0 so that stealing has something to take
    bound = [] if queued else [(r, 0 if rng.random() < 0.7 else int(rng.integers(replicas))) for r in firsts]
    stealing = "stealing" in mode
    limits = {"max_running": max_running, "kv_cap": kv_cap, "max_prefill": max_prefill}
    ref_end, ref_pre, ref_prefilled = reference_stepper(
        req, replicas, bound=bound, queued=queued, stealing=stealing, coef=COEF, **limits
    )
    rc = _fast(req, replicas, bound=bound, queued=queued, stealing=stealing, **limits)
    assert np.allclose(rc.store.end, ref_end, rtol=1e-9, atol=1e-12)
    assert [e.preemptions for e in rc.replicas] == ref_pre
    assert [e.prefilled_tokens for e in rc.replicas] == ref_prefilled
    assert sum(rc.store.generated) == sum(req["decode"])  # every token generated exactly once
    if seed == 2:
        assert sum(ref_pre) > 0  # the case exercises preemption


def _groups_workload(seed=0, groups=24, n=4):
    rng = np.random.default_rng(seed)
    prompts = rng.integers(50, 400, groups)
    return StepWorkload.from_groups(0, prompts, [rng.integers(1, 300, n) for _ in range(groups)])


def _cluster(n_replicas, **sharing):
    return RolloutCluster(n_replicas, COEF, max_running=6, kv_capacity=2000.0, max_prefill_tokens=700, **sharing)


def test_spread_groups_kept_together_replay_bit_identically_to_static_dispatch():
    """Prefix keys instead of `only the group's first sample prefills`: the same thing
    when a group stays on one replica (preemptions included)."""
    w = _groups_workload()
    replica = np.arange(w.n_groups)[w.group] % 3
    out = []
    for sharing in ({}, {"spread_groups": True}):
        rc = _cluster(3, **sharing)
        _, first, _ = rc.add_step(w, np.arange(w.n_samples))
        rc.submit(first, replica, 0.0)
        rc.run_all()
        out.append((list(rc.store.end), [(e.prefilled_tokens, e.preemptions) for e in rc.replicas]))
    assert out[0] == out[1]
    assert sum(p for _, p in out[0][1]) > 0  # preemptions happened


def test_a_group_spread_over_replicas_prefills_its_prompt_once_on_each():
    w = StepWorkload.from_groups(0, [300, 200], [[50] * 5, [40] * 2])
    rc = _cluster(3, spread_groups=True)
    _, first, _ = rc.add_step(w, np.arange(w.n_samples))
    rc.submit(first, np.arange(w.n_samples) % 3, 0.0)  # samples 0..6 round robin
    rc.run_all()
    # group 0 (samples 0-4) touches all three replicas, group 1 (samples 5, 6) two
    assert sum(e.prefilled_tokens for e in rc.replicas) == 3 * 300 + 2 * 200
    assert rc.store.generated == [50] * 5 + [40] * 2


def test_shared_queue_serves_in_key_order_and_follows_a_new_order():
    w = StepWorkload.from_groups(0, [10] * 6, [[20]] * 6)
    rc = RolloutCluster(1, COEF, max_running=1, kv_capacity=math.inf, max_prefill_tokens=10**6, shared_queue=True)
    _, first, _ = rc.add_step(w, np.arange(6))
    low = rc.enqueue(first[:3], 1.0, 0.0)  # served after the next run
    rc.enqueue(first[3:], 0.0, 0.0)
    seen = []

    def on_finish(done, t):
        seen.extend(done)
        if len(seen) == 1:  # from now on the first run comes first
            rc.reorder(low, -1.0, t)
        return False

    rc.run_until(on_finish)
    assert seen == [3, 0, 1, 2, 4, 5]


def test_stealing_spreads_work_bound_to_one_replica():
    w = _groups_workload(groups=32, n=1)
    times = {}
    for stealing in (False, True):
        rc = _cluster(4, stealing=stealing, spread_groups=True)
        _, first, last = rc.add_step(w, np.arange(w.n_samples))
        rc.submit(first, np.zeros(w.n_samples, dtype=int), 0.0)  # everything on replica 0
        rc.run_all()
        times[stealing] = max(rc.store.end)
        busy = [sum(b - a for a, b, _ in ivs) for ivs in rc.busy_intervals(0.0, math.inf)]
        assert (min(busy) > 0) == stealing
    assert times[True] < 0.4 * times[False]


def test_later_turns_stay_on_the_replica_holding_their_prefix(monkeypatch):
    from core.simulator import pooled

    rng = np.random.default_rng(7)
    req, firsts = _random_requests(rng, 30)
    where: dict[int, int] = {}
    prefill = pooled.PooledEngine._prefill

    def record(self, k, tau, sp):
        for r in list(self.waiting)[:k]:
            where.setdefault(r, self.pool.engines.index(self))
        return prefill(self, k, tau, sp)

    monkeypatch.setattr(pooled.PooledEngine, "_prefill", record)
    _fast(
        req, 3, bound=[], queued=[(0.0, r) for r in firsts], stealing=True, max_running=4, kv_cap=900.0, max_prefill=256
    )
    chains = 0
    for r, n in enumerate(req["next"]):
        if n >= 0:
            chains += 1
            assert where[n] == where[r]
    assert chains > 5 and len(set(where.values())) == 3


def test_select_samples_takes_whole_trajectories():
    arr = {
        "sample": np.array([0, 0, 1, 2, 2, 2]),
        "prefill": np.arange(6),
        "context": np.arange(6) + 10,
        "decode": np.arange(6) + 20,
        "gap": np.zeros(6),
        "next": np.array([1, -1, -1, 4, 5, -1]),
        "first": np.array([0, 2, 3]),
        "prefix": np.full(6, -1),
    }
    sel = select_samples(arr, np.array([2, 0]))
    assert sel["sample"].tolist() == [2, 2, 2, 0, 0]
    assert sel["prefill"].tolist() == [3, 4, 5, 0, 1]
    assert sel["next"].tolist() == [1, 2, -1, 4, -1]
    assert sel["first"].tolist() == [0, 3] and sel["last"].tolist() == [2, 4]
    w = _groups_workload(groups=3, n=2)
    full = step_request_arrays(w)
    assert select_samples(full, np.arange(w.n_samples))["prefill"].tolist() == full["prefill"].tolist()


# --------------------------------------------------------------------------- chunked requests (Seer)


def _chunked(req, firsts, chunk_tokens):
    """`_random_requests`' requests in chunks (`chunk_requests`), as the stepper reads them."""
    n = len(req["prefill"])
    sample = np.cumsum(np.isin(np.arange(n), firsts)) - 1
    arr = {k: np.asarray(req[k]) for k in ("prefill", "context", "decode", "gap", "next", "prefix")}
    ch = chunk_requests({**arr, "sample": sample, "first": np.asarray(firsts)}, chunk_tokens)
    out = {k: ch[k].tolist() for k in ("prefill", "context", "decode", "gap", "next", "prefix")}
    cont = np.zeros(len(out["prefill"]), dtype=bool)
    cont[ch["next"][ch["next"] >= 0]] = True
    out["cont"] = cont.tolist()
    out["migrate"] = np.flatnonzero(ch["migrate"]).tolist()
    return out, ch["first"].tolist()


@pytest.mark.parametrize("stealing", [False, True])
@pytest.mark.parametrize("seed,replicas,max_running,kv_cap,max_prefill", CASES)
def test_migration_matches_token_by_token_stepper(stealing, seed, replicas, max_running, kv_cap, max_prefill):
    rng = np.random.default_rng(seed)
    req, firsts = _chunked(*_random_requests(rng, 14), 30)
    assert req["migrate"]
    keys = rng.integers(0, 4, len(firsts)).astype(float)
    queued = [(float(k), r) for k, r in zip(keys, firsts)]
    limits = {"max_running": max_running, "kv_cap": kv_cap, "max_prefill": max_prefill}
    ref_end, ref_pre, _ = reference_stepper(
        req, replicas, bound=[], queued=queued, stealing=stealing, coef=COEF, **limits
    )
    rc = _fast(req, replicas, bound=[], queued=queued, stealing=stealing, **limits)
    assert np.allclose(rc.store.end, ref_end, rtol=1e-9, atol=1e-12)
    assert [e.preemptions for e in rc.replicas] == ref_pre
    assert rc.pool is not None and rc.pool.migrations > 0
    assert sum(rc.store.generated) == sum(req["decode"])


def test_chunks_keep_every_token_and_grow_their_context():
    w = StepWorkload.from_groups(0, [100, 200], [[10, 25], [7, 30]])
    arr = step_request_arrays(w, shared_prompt=True)
    ch = chunk_requests(arr, 10)
    assert np.array_equal(sample_tokens(ch, 4), sample_tokens(arr, 4))
    i = int(ch["first"][1])  # sample 1: 25 tokens in chunks of 10, 10, 5
    chunks = slice(i, i + 3)
    assert ch["decode"][chunks].tolist() == [10, 10, 5]
    assert ch["context"][chunks].tolist() == [100, 110, 120]
    assert ch["prefill"][chunks].tolist() == [100, 0, 0]  # later chunks: KV from the pool
    assert ch["prefix"][chunks].tolist() == [0, -1, -1]
    assert ch["migrate"][chunks].tolist() == [False, True, True]
    assert ch["next"][chunks].tolist() == [i + 1, i + 2, -1]


def test_a_turn_chunked_chains_to_the_next_turn_after_its_tool_call():
    arr = {
        "sample": np.array([0, 0]),
        "prefill": np.array([50, 10]),
        "context": np.array([50, 80]),
        "decode": np.array([25, 5]),
        "gap": np.array([1.5, 0.0]),
        "next": np.array([1, -1]),
        "first": np.array([0]),
        "prefix": np.array([-1, -1]),
    }
    ch = chunk_requests(arr, 10)
    assert ch["next"].tolist() == [1, 2, 3, -1]
    assert ch["gap"].tolist() == [0.0, 0.0, 1.5, 0.0]
    assert ch["migrate"].tolist() == [False, True, True, False]  # the next turn stays


def test_chunk_continuations_move_to_an_idle_replica():
    """Four long requests taken by one replica, four short by the other: unchunked the
    long ones decode four at a time on the first while the second idles; chunked, their
    continuations go to the less loaded replica and the rollout ends sooner."""
    w = StepWorkload.from_groups(0, [100] * 8, [[2000]] * 4 + [[50]] * 4)
    out = {}
    for chunk in (0, 200):
        rc = RolloutCluster(2, COEF, max_running=4, kv_capacity=math.inf, max_prefill_tokens=10**6, shared_queue=True)
        _, first, _ = rc.add_step(w, np.arange(8), chunk_tokens=chunk)
        rc.enqueue(first, 0.0, 0.0)
        rc.run_all()
        assert rc.pool is not None and not rc.pool.migrating
        out[chunk] = (max(rc.store.end), rc.pool.migrations, sum(e.decoded_tokens for e in rc.replicas))
    assert out[0][1] == 0 and out[200][1] > 0
    assert out[200][0] < 0.95 * out[0][0]
