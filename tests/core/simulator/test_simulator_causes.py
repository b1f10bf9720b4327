"""Where every policy's GPU-seconds go (idle causes, overheads, work) and why one replay
is faster than another (`compare(a, b)["explain"]`)."""

from __future__ import annotations

import dataclasses

import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, compare, simulate
from core.simulator.causes import CAUSES, COMPONENTS, IDLE_CAUSES
from core.simulator.explain import explain_text
from core.simulator.policies import POLICIES, make_policy
from core.simulator.result import STAGES, Lane, SimResult
from core.workload.synthetic import packed_length_rows

MODEL = MODEL_PRESETS["Qwen2.5-7B"]
COLOCATED = ClusterConfig(n_gpus=16, rollout_replicas=4, rollout_tp=4, train_dp=16)
SPLIT = ClusterConfig(n_gpus=16, rollout_replicas=2, rollout_tp=4, train_dp=8)

# what may appear on each kind of lane (idle causes, busy stages)
LANE_IDLE = {
    "rollout": {"rollout_tail", "tool_wait", "rollout_waits_trainer", "staleness_wait", "weight_sync"},
    "train": {
        "trainer_waits_rollout",
        "reward_wait",
        "dp_imbalance",
        "stage_serialisation",
        "weight_sync",
        "staleness_wait",
    },
    "shared": {"rollout_tail", "tool_wait", "reward_wait", "dp_imbalance", "stage_serialisation", "unused"},
    "unused": {"unused"},
}
LANE_BUSY = {
    "rollout": {"rollout", "recompute"},
    "train": {"old_log_prob", "ref", "update_actor", "weight_sync"},
    "shared": {"rollout", "recompute", "old_log_prob", "ref", "update_actor", "weight_sync"},
    "unused": set(),
}


def long_tailed(steps=3, groups=64, n=8, seed=3, cap=16384):
    out = []
    for rows in packed_length_rows(steps, groups, n, seed=seed, max_response_len=cap):
        out.append(StepWorkload.from_groups(rows[0]["step"], [r["input"] for r in rows], [r["output"] for r in rows]))
    return out


@pytest.fixture(scope="module")
def replays():
    ws = long_tailed()
    out = {}
    for kind, spec in POLICIES.items():
        cluster = SPLIT if spec.disaggregated else COLOCATED
        out[kind] = simulate(ws, cluster, MODEL, EngineLimits(), make_policy({"kind": kind, "adv_s": 0.25}))
    return out


def test_every_gpu_second_has_one_cause_on_its_own_lane(replays):
    for kind, r in replays.items():
        total = sum(r.idle_gpu_s.values()) + r.busy_gpu_s
        assert total == pytest.approx(r.n_gpus * r.makespan, rel=1e-9), kind
        assert set(r.idle_gpu_s) <= set(IDLE_CAUSES), kind
        per_step = sum(sum(s.idle_gpu_s.values()) for s in r.steps)
        assert per_step == pytest.approx(sum(r.idle_gpu_s.values()), rel=1e-9), kind
        for lane in r.lanes:
            t = 0.0
            for a, b, state, label, _ in lane.intervals:
                assert a == pytest.approx(t, abs=1e-9) and b >= a, (kind, lane.name)
                allowed = LANE_IDLE if state == "idle" else LANE_BUSY
                assert label in allowed[lane.role], (kind, lane.name, state, label)
                t = b
            assert t == pytest.approx(r.makespan, rel=1e-12), (kind, lane.name)
        assert set(STAGES) >= {lb for lane in r.lanes for *_, st, lb, _ in lane.intervals if st == "busy"} - {
            "recompute"
        }


def test_each_cause_appears_where_it_should(replays):
    sync, off, partial, asy, lam = (replays[k] for k in ("sync", "one_step_off", "partial", "async", "laminar"))
    pools = {"trainer_waits_rollout", "rollout_waits_trainer", "staleness_wait", "weight_sync"}
    for r in (sync, partial):  # time-shared GPUs never wait for another pool
        assert not pools & set(r.idle_gpu_s)
    # the host stage between GPU stages (adv, 0.25 s a step) is the only serialisation
    assert sync.idle_gpu_s["stage_serialisation"] == pytest.approx(0.25 * 16 * len(sync.steps))
    assert off.idle_gpu_s["trainer_waits_rollout"] > 0 and "staleness_wait" not in off.idle_gpu_s
    assert asy.idle_gpu_s["trainer_waits_rollout"] > 0 and lam.idle_gpu_s["trainer_waits_rollout"] > 0
    # recompute: only where samples resumed (no preemption with the default KV cache)
    assert all(s.rollout["preemptions"] == 0 for s in sync.steps)
    busy = {k: {lb for lane in r.lanes for *_, st, lb, _ in lane.intervals if st == "busy"} for k, r in replays.items()}
    assert (
        "recompute" in busy["partial"] and "recompute" not in busy["sync"] and "recompute" not in busy["one_step_off"]
    )


def test_sync_and_one_step_off_keep_their_figures():
    """The same makespans and idle totals as before the causes were split (one_step_off's
    old stage_serialisation, 1353.433 GPU-s, is now the pools waiting for each other).
    Pinned on the training model they were recorded with: perfect DP scaling, no
    colocation overhead (the defaults now slow training: docs/simulator.md)."""
    ws = long_tailed()
    ideal = {"train_serial_fraction": 0.0, "colocation_overhead": 1.0}
    colocated, split = dataclasses.replace(COLOCATED, **ideal), dataclasses.replace(SPLIT, **ideal)
    sync = simulate(ws, colocated, MODEL, EngineLimits(), Policy("sync", adv_s=0.5))
    off = simulate(ws, split, MODEL, EngineLimits(), Policy("one_step_off"))
    assert sync.makespan == pytest.approx(235.90443899709646, rel=1e-12)
    assert sync.idle_gpu_s == pytest.approx(
        {"dp_imbalance": 294.912437, "rollout_tail": 2716.16968, "stage_serialisation": 24.0}
    )
    assert off.makespan == pytest.approx(215.143661159675, rel=1e-12)
    assert sum(off.idle_gpu_s.values()) == pytest.approx(2867.1422779263685, rel=1e-12)
    waits = off.idle_gpu_s["trainer_waits_rollout"] + off.idle_gpu_s["rollout_waits_trainer"]
    assert waits + off.idle_gpu_s.get("weight_sync", 0.0) == pytest.approx(1353.433134, rel=1e-8)


def test_preempted_requests_are_recomputed():
    ws = long_tailed(steps=1, groups=16)
    tight = EngineLimits(kv_cache_tokens=10_000)
    r = simulate(ws, COLOCATED, MODEL, tight, Policy("sync"))
    assert r.steps[0].rollout["preemptions"] > 0
    assert any(label == "recompute" for lane in r.lanes for *_, label, _ in lane.intervals)


def test_async_waits_at_its_bound_and_drains_without_partial_rollout():
    ws = long_tailed()
    on_policy = simulate(ws, SPLIT, MODEL, EngineLimits(), Policy("async", params={"staleness_threshold": 0}))
    assert on_policy.idle_gpu_s["staleness_wait"] > 0
    drain = simulate(ws, SPLIT, MODEL, EngineLimits(), Policy("async", params={"partial_rollout": False}))
    train_idle = {
        lb for lane in drain.lanes if lane.role == "train" for *_, st, lb, _ in lane.intervals if st == "idle"
    }
    assert "weight_sync" in train_idle  # the trainer waits for the samples in flight


# --------------------------------------------------------------------------- explain


def fake(kind: str, makespan: float, lanes: list[Lane]) -> SimResult:
    idle: dict[str, float] = {}
    busy = 0.0
    for lane in lanes:
        for a, b, state, label, _ in lane.intervals:
            if state == "idle":
                idle[label] = idle.get(label, 0.0) + (b - a) * len(lane.gpus)
            else:
                busy += (b - a) * len(lane.gpus)
    n = sum(len(lane.gpus) for lane in lanes)
    return SimResult([], makespan, lanes, n, {"policy": {"kind": kind}}, idle, busy)


A = fake(
    "sync",
    10.0,
    [
        Lane(
            "replica 0 / dp 0",
            [0, 1],
            [[0, 4, "busy", "rollout", 0], [4, 8, "idle", "rollout_tail", 0], [8, 10, "busy", "update_actor", 0]],
        )
    ],
)
B = fake(
    "async",
    6.0,
    [
        Lane(
            "rollout replica 0",
            [0],
            [[0, 4, "busy", "rollout", 0], [4, 6, "idle", "rollout_waits_trainer", 0]],
            "rollout",
        ),
        Lane(
            "train dp 0", [1], [[0, 4, "idle", "trainer_waits_rollout", 0], [4, 6, "busy", "update_actor", 0]], "train"
        ),
    ],
)


def test_explain_splits_the_difference_by_cause_by_hand():
    e = compare(A, B)["explain"]
    got = {r["cause"]: r["delta_s"] for r in e["components"]}
    # (GPU-s of B - GPU-s of A) / 2 GPUs
    assert got == pytest.approx(
        {
            "rollout_tail": -4.0,
            "generation": -2.0,
            "trainer_waits_rollout": 2.0,
            "training": -1.0,
            "rollout_waits_trainer": 1.0,
        }
    )
    assert sum(got.values()) + e["budget_s"] == pytest.approx(e["delta_s"]) == pytest.approx(-4.0)
    deltas = [abs(r["delta_s"]) for r in e["components"]]
    assert deltas == sorted(deltas, reverse=True) and e["components"][0]["cause"] == "rollout_tail"
    assert e["a"]["split"]["text"] == "2 GPUs time-shared by rollout and training"
    assert e["b"]["split"]["text"] == "1 rollout + 1 train GPUs"
    assert e["verdict"] == "faster" and e["speedup"] == pytest.approx(10 / 6)
    assert e["summary"] == (
        "async is 4.0 s faster than sync (1.667x): async idles 50.0% of its GPU time on 1 rollout + 1 train "
        "GPUs, loses the most (33.3%) to the trainer pool waiting for rollouts; sync idles 40.0% of its GPU "
        "time on 2 time-shared GPUs, loses the most (40.0%) to the rollout tail; the largest difference is "
        "the rollout tail (-4.0 s of makespan)."
    )
    for r in e["components"]:
        assert r["definition"] == CAUSES[r["cause"]].definition and r["lever"]


def test_a_slowdown_is_said_in_words_never_as_a_negative_saving():
    c = compare(B, A)
    e = c["explain"]
    assert c["total"]["saved_s"] == pytest.approx(-4.0) and c["total"]["delta_s"] == pytest.approx(4.0)
    assert c["total"]["verdict"] == e["verdict"] == "slower"
    assert e["summary"].startswith("sync is 4.0 s slower than async (0.600x)")
    assert "the largest difference is the rollout tail (+4.0 s of makespan)" in e["summary"]
    assert "sav" not in e["summary"] and "-4.0 s slower" not in e["summary"]
    same = compare(A, A)["explain"]
    assert same["verdict"] == "same" and same["summary"].startswith("sync (B) takes as long as sync (A) (1.000x)")


def test_explain_accounts_for_different_budgets():
    big = fake("sync", 5.0, [Lane("replica 0 / dp 0", [0, 1, 2, 3], [[0, 5, "busy", "rollout", 0]])])
    e = compare(A, big)["explain"]
    assert (
        sum(r["delta_s"] for r in e["components"]) + e["budget_s"] == pytest.approx(e["delta_s"]) == pytest.approx(-5.0)
    )
    assert e["budget_s"] == pytest.approx(-(4 - 2) * 5.0 / 2)


def test_explain_of_real_replays_adds_up_and_renders(replays):
    for r in replays.values():
        e = compare(replays["sync"], r)["explain"]
        assert sum(x["delta_s"] for x in e["components"]) + e["budget_s"] == pytest.approx(e["delta_s"], abs=1e-6)
        assert {x["cause"] for x in e["components"]} <= set(COMPONENTS)
        word = {"faster": "faster than", "slower": "slower than", "same": "takes as long as"}[e["verdict"]]
        assert word in e["summary"]
    e = compare(replays["sync"], replays["async"])["explain"]
    assert e["b"]["split"]["text"] == "8 rollout + 8 train GPUs"
    text = explain_text(e)
    assert text.splitlines()[0] == e["summary"] and "makespan +/-" in text
    assert CAUSES[e["components"][0]["cause"]].phrase[:42] in text


def test_compare_total_carries_the_words(replays):
    c = compare(replays["sync"], replays["one_step_off"])
    assert c["total"]["summary"] == c["explain"]["summary"]
    assert c["total"]["delta_s"] == pytest.approx(-c["total"]["saved_s"])


def test_the_dashboard_colours_every_idle_cause_in_order():
    """The dashboard (a REST client: it cannot import core) keeps its own list, by colour."""
    from dashboard.theme import SIM_IDLE_CAUSES

    assert SIM_IDLE_CAUSES == IDLE_CAUSES
