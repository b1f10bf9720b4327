"""The event-driven replica engine against hand-computed times and a token-by-token
reference stepper written here (admission limits, preemption, tool-call arrivals)."""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np
import pytest

from core.simulator.cluster import RolloutCluster
from core.simulator.engine import ReplicaEngine
from core.simulator.predictor import EngineCoefficients, decode_series, iterations_until
from core.simulator.requests import RequestStore

COEF = EngineCoefficients(decode_a=0.01, decode_b=1e-5, decode_c=2e-3, prefill_a=0.02, prefill_b=1e-4, prefill_c=1e-8)


def _store(prefill, context, decode, gap=None, nxt=None):
    st = RequestStore()
    n = len(prefill)
    st.add(
        prefill,
        context,
        decode,
        gap if gap is not None else [0.0] * n,
        nxt if nxt is not None else [-1] * n,
        list(range(n)),
    )
    return st


def _engine(st, max_running=1000, kv=math.inf, max_prefill=10**9, coef=COEF):
    return ReplicaEngine(st, coef, max_running=max_running, kv_capacity=kv, max_prefill_tokens=max_prefill)


@pytest.mark.parametrize("alpha,beta", [(0.01, 0.0), (0.01, 1e-4), (2.0, 0.5), (1e-3, 1e-7)])
def test_iterations_until_matches_brute_force(alpha, beta):
    rng = np.random.default_rng(0)
    for delta in rng.uniform(0, 50, 40):
        times = np.cumsum(alpha + beta * np.arange(100_000))
        first_at_least = int(np.searchsorted(times, delta, side="left")) + 1
        done_by = int(np.searchsorted(times, delta, side="right"))
        assert iterations_until(delta, alpha, beta, at_least=True) == max(1, first_at_least)
        assert iterations_until(delta, alpha, beta, at_least=False) == done_by
        assert decode_series(7, alpha, beta) == pytest.approx(times[6])


def test_single_request_latency_by_hand():
    p, n = 300, 50
    st = _store([p], [p], [n])
    eng = _engine(st)
    eng.submit(0, 0.0)
    eng.run()
    prefill = 0.02 + 1e-4 * p + 1e-8 * p * p
    # decode iteration k (k = 0..n-2) sees context + 1 + k cached tokens and one sequence
    decode = sum(0.01 + 1e-5 * (p + 1 + k) + 2e-3 for k in range(n - 1))
    assert st.end[0] == pytest.approx(prefill + decode, rel=1e-12)
    assert st.generated[0] == n
    assert eng.decoded_tokens == n - 1 and eng.prefilled_tokens == p


def test_speculation_scales_decode_time_in_the_tail_only():
    """Two requests, the tail threshold 1: while both run, plain iterations; once the
    short one is done, the long one's iterations take cost / accept of their time."""
    p, short, long, f = 300, 20, 60, 0.4
    times = {}
    for spec in ((0, 1.0), (1, f)):
        st = _store([p, 0], [p, p], [short, long])
        eng = ReplicaEngine(st, COEF, max_running=10, kv_capacity=math.inf, max_prefill_tokens=10**9, speculation=spec)
        eng.submit_many([0, 1], 0.0)
        eng.run()
        times[spec[0]] = (st.end[0], st.end[1])
    prefill = 0.02 + 1e-4 * p + 1e-8 * p * p
    both = sum(0.01 + 1e-5 * 2 * (p + 1 + k) + 2 * 2e-3 for k in range(short - 1))
    alone = sum(0.01 + 1e-5 * (p + short + k) + 2e-3 for k in range(long - short))
    assert times[0] == pytest.approx((prefill + both, prefill + both + alone), rel=1e-12)
    assert times[1] == pytest.approx((prefill + both, prefill + both + f * alone), rel=1e-12)


def test_whole_run_is_a_handful_of_events_not_one_per_token():
    st = _store([100], [100], [200_000])
    eng = _engine(st)
    eng.submit(0, 0.0)
    commits = 0
    while eng.plan() != math.inf:
        eng.commit()
        commits += 1
    assert commits <= 3
    assert st.generated[0] == 200_000


def test_max_running_one_serialises_requests():
    st = _store([10, 20], [10, 20], [5, 3])
    eng = _engine(st, max_running=1)
    eng.submit_many([0, 1], 0.0)
    eng.run()

    def alone(p, n, start):
        t = start + 0.02 + 1e-4 * p + 1e-8 * p * p
        return t + sum(0.01 + 1e-5 * (p + 1 + k) + 2e-3 for k in range(n - 1))

    first = alone(10, 5, 0.0)
    assert st.end[0] == pytest.approx(first, rel=1e-12)
    assert st.end[1] == pytest.approx(alone(20, 3, first), rel=1e-12)
    assert st.admit[1] == pytest.approx(first)


# --------------------------------------------------------------------------- reference


def reference_stepper(prefill, context, decode, gap, nxt, firsts, coef, max_running, kv_cap, max_prefill):
    """One iteration at a time, one token per running request per iteration."""
    prefill, context, left = list(prefill), list(context), list(decode)
    end = [math.nan] * len(prefill)
    arrivals = [(0.0, i, r) for i, r in enumerate(firsts)]
    heapq.heapify(arrivals)
    order = len(arrivals)
    waiting: deque[int] = deque()
    running: list[int] = []
    kv, gen = {}, {}
    t = 0.0
    preemptions = 0

    def finish(r):
        nonlocal order
        end[r] = t
        if nxt[r] >= 0:
            order += 1
            heapq.heappush(arrivals, (t + gap[r], order, nxt[r]))

    while True:
        while arrivals and arrivals[0][0] <= t:
            waiting.append(heapq.heappop(arrivals)[2])
        batch = []
        if waiting and len(running) < max_running:
            kv_free = kv_cap - sum(kv[r] for r in running)
            sp = need = 0
            for r in list(waiting)[: max_running - len(running)]:
                k = context[r] + 1
                if batch and (sp + prefill[r] > max_prefill or need + k > kv_free):
                    break
                if not batch and k > kv_free and running:
                    break
                batch.append(r)
                sp += prefill[r]
                need += k
        if batch:
            sp = sum(prefill[r] for r in batch)
            t += coef.prefill_a + coef.prefill_b * sp + coef.prefill_c * sum(prefill[r] ** 2 for r in batch)
            for r in batch:
                waiting.popleft()
                if left[r] == 1:
                    finish(r)
                else:
                    running.append(r)
                    kv[r], gen[r] = context[r] + 1, 1
            continue
        if running:
            total = sum(kv[r] for r in running)
            if total > kv_cap and len(running) > 1:
                r = running.pop()
                context[r] += gen[r]
                prefill[r] = context[r]
                left[r] -= gen[r]
                waiting.appendleft(r)
                preemptions += 1
                continue
            t += coef.decode_a + coef.decode_b * total + coef.decode_c * len(running)
            still = []
            for r in running:
                gen[r] += 1
                kv[r] += 1
                if gen[r] == left[r]:
                    finish(r)
                else:
                    still.append(r)
            running = still
            continue
        if not arrivals:
            return end, preemptions
        t = arrivals[0][0]


def _random_multiturn(rng, n_traj):
    prefill, context, decode, gap, nxt, firsts = [], [], [], [], [], []
    for _ in range(n_traj):
        turns = int(rng.integers(1, 4))
        ctx = int(rng.integers(5, 200))
        firsts.append(len(prefill))
        cached = 0
        for k in range(turns):
            out = int(rng.integers(1, 120))
            prefill.append(ctx - cached)
            context.append(ctx)
            decode.append(out)
            gap.append(float(rng.uniform(0, 0.5)) if k + 1 < turns else 0.0)
            nxt.append(len(prefill) if k + 1 < turns else -1)
            cached = ctx + out
            ctx = cached + int(rng.integers(10, 100))
    return prefill, context, decode, gap, nxt, firsts


@pytest.mark.parametrize(
    "seed,max_running,kv_cap,max_prefill",
    [
        (0, 1000, math.inf, 10**9),
        (1, 4, math.inf, 10**9),
        (2, 8, 900.0, 256),  # small KV cache: preemption by recompute
        (3, 3, 600.0, 64),
        (4, 16, 2500.0, 512),
    ],
)
def test_engine_matches_token_by_token_stepper(seed, max_running, kv_cap, max_prefill):
    rng = np.random.default_rng(seed)
    prefill, context, decode, gap, nxt, firsts = _random_multiturn(rng, 12)
    ref_end, ref_preempt = reference_stepper(
        prefill, context, decode, gap, nxt, firsts, COEF, max_running, kv_cap, max_prefill
    )
    st = _store(prefill, context, decode, gap, nxt)
    eng = _engine(st, max_running, kv_cap, max_prefill)
    eng.submit_many(firsts, 0.0)
    eng.run()
    assert np.allclose(st.end, ref_end, rtol=1e-9, atol=1e-12)
    assert eng.preemptions == ref_preempt
    if seed == 2:
        assert ref_preempt > 0  # the case exercises preemption
    # every token generated exactly once overall
    assert sum(st.generated) == sum(decode)


def test_tool_gap_leaves_the_replica_idle_between_turns():
    # one trajectory: turn 0 (10 tokens), a 5 s tool call, turn 1 (10 tokens)
    st = _store([100, 50], [100, 160], [10, 10], [5.0, 0.0], [1, -1])
    eng = _engine(st)
    eng.submit(0, 0.0)
    eng.run()
    assert st.arrive[1] == pytest.approx(st.end[0] + 5.0)
    assert len(eng.busy) == 1 and len(eng.idle_gaps) == 1
    gap_start, gap_end, rid = eng.idle_gaps[0]
    assert (gap_start, gap_end, rid) == (pytest.approx(st.end[0]), pytest.approx(st.end[0] + 5.0), 1)


def test_stop_mid_run_reports_progress():
    st = _store([10, 10], [10, 10], [1000, 40])
    rc = RolloutCluster(1, COEF, max_running=10, kv_capacity=math.inf, max_prefill_tokens=10**6)
    rc.store = st
    eng = rc.replicas[0]
    eng.store = st
    eng.submit_many([0, 1], 0.0)
    finished_at = []
    stop = rc.run_until(lambda done, t: bool(finished_at.append((done, t))) or 1 in done)
    assert stop == pytest.approx(st.end[1])
    # one more second of decoding for request 0, alone in the batch
    rc.advance_to(stop + 1.0)
    left_before = st.left[0]
    eng.unfinished()
    produced = st.generated[0]
    alpha = 0.01 + 1e-5 * (10 + 1 + 39) + 2e-3
    beta = 1e-5
    extra = iterations_until(1.0, alpha, beta, at_least=False)
    assert produced == 40 + extra  # 1 from prefill + 39 decoded with request 1 + extra alone
    assert st.left[0] == left_before - produced
    assert st.prefill[0] == st.context[0] == 10 + produced  # resumed by recompute
