"""Calibration: fit on some steps, predict the others from their workload alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
import pytest

from core.simulator import (
    MODEL_PRESETS,
    Calibration,
    ClusterConfig,
    EngineLimits,
    Policy,
    StepWorkload,
    accuracy_report,
    calibrate,
    roofline_coefficients,
    workload_from_columns,
)
from core.simulator.policies.base import Env, rollout_batch
from core.simulator.training import training_pass
from core.workload.polytrace_rows import multiturn_rows_to_columns
from core.workload.synthetic import packed_length_rows

MODEL = MODEL_PRESETS["Qwen2.5-7B"]


@pytest.fixture(scope="module")
def search_r1(shared_fixtures):
    folder = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b"
    rows = []
    for s in (0, 1):
        rows += [
            orjson.loads(line) for line in (folder / f"multiturn_workload_step_{s}.jsonl").read_bytes().splitlines()
        ]
    cols = multiturn_rows_to_columns(rows)
    return workload_from_columns(cols["samples"], cols["turns"], cols["tool_calls"])


@pytest.fixture(scope="module")
def search_r1_calibration(search_r1):
    cluster = ClusterConfig(n_gpus=8, rollout_replicas=1, rollout_tp=1, train_dp=8)
    return calibrate(search_r1, cluster, MODEL, EngineLimits(), fit_steps=[0])


def test_search_r1_step1_predicted_from_step0(search_r1, search_r1_calibration):
    cal = search_r1_calibration
    assert cal.fit_steps == [0] and cal.method == "turn_latency"
    rep = accuracy_report(search_r1, cal, MODEL)
    (row,) = rep["steps"]
    assert row["step"] == 1
    roll = row["rollout_s"]
    # measured: the slowest trajectory's summed turn + tool latencies
    assert roll["measured"] == pytest.approx(float(np.max(search_r1[1].sample_latency_s)))
    assert roll["naive"] == pytest.approx(float(np.max(search_r1[0].sample_latency_s)))
    assert roll["accuracy"] >= 0.95
    assert roll["accuracy"] > roll["naive_accuracy"]
    for k in ("p50_traj_s", "p90_traj_s"):
        assert 0.9 < row[k]["accuracy"] <= 1.0 and row[k]["naive_accuracy"] is not None
    # the configured 256-sequence limit fits far worse than an engine taking every trajectory
    costs = {c["max_running_seqs"]: c["cost"] for c in cal.candidates}
    assert costs[2048] < costs[256] / 10 and cal.limits.max_running_seqs == 2048
    # a stored calibration predicts the same
    again = Calibration.from_dict(orjson.loads(orjson.dumps(cal.to_dict())))
    assert accuracy_report(search_r1, again, MODEL)["steps"][0]["rollout_s"]["predicted"] == roll["predicted"]


def test_prediction_never_reads_the_predicted_steps_measurements(search_r1, search_r1_calibration):
    cal = search_r1_calibration
    before = accuracy_report(search_r1, cal, MODEL)["steps"][0]["rollout_s"]["predicted"]
    tampered = list(search_r1)
    w1 = dataclasses.replace(search_r1[1])
    w1.turn_engine_latency_s = search_r1[1].turn_engine_latency_s * 10.0
    w1.sample_latency_s = search_r1[1].sample_latency_s * 10.0
    tampered[1] = w1
    after = accuracy_report(tampered, cal, MODEL)["steps"][0]["rollout_s"]
    assert after["predicted"] == before
    assert after["measured"] == pytest.approx(10 * float(np.max(search_r1[1].sample_latency_s)))


def _steps(n_steps=3, groups=24):
    return [
        StepWorkload.from_groups(rows[0]["step"], [r["input"] for r in rows], [r["output"] for r in rows])
        for rows in packed_length_rows(n_steps, groups, 4, seed=7)
    ]


def test_t_gen_only_fits_one_scale_factor():
    ws = _steps()
    cluster = ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8)
    limits = EngineLimits()
    base = roofline_coefficients(cluster, MODEL)
    env = Env(cluster, MODEL, limits, Policy(), base, limits.kv_capacity(cluster, MODEL))
    for w in ws:  # the "real" engine is 2.5x slower than the roofline
        w.timings["t_gen"] = 2.5 * rollout_batch(env, w).duration
    cal = calibrate(ws, cluster, MODEL, limits, fit_steps=[0])
    assert cal.method == "t_gen_scale"
    assert cal.coefficients.decode_a == pytest.approx(2.5 * base.decode_a)
    rep = accuracy_report(ws, cal, MODEL)
    assert [r["step"] for r in rep["steps"]] == [1, 2]
    assert all(r["rollout_s"]["accuracy"] == pytest.approx(1.0) for r in rep["steps"])


def test_training_mfu_recovered_from_update_time():
    ws = _steps(n_steps=2)
    cluster = ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8, train_mfu=0.25)
    for w in ws:
        # recorded colocated, as `calibrate` assumes unless told otherwise
        w.timings["t_update_actor"] = training_pass(
            w.total_len, MODEL, cluster, Policy(), forward_only=False, colocated=True
        ).seconds
    cal = calibrate(ws, dataclasses.replace(cluster, train_mfu=0.6), MODEL, fit_steps=[0, 1])
    assert cal.train_mfu == pytest.approx(0.25)
    assert cal.cluster.train_mfu == pytest.approx(0.25) and cal.method == "roofline"
    # read as a disaggregated trainer: the overhead is put down to a lower MFU
    apart = calibrate(ws, cluster, MODEL, fit_steps=[0, 1], colocated=False)
    assert apart.train_mfu == pytest.approx(0.25 / cluster.colocation_overhead)


def test_unknown_fit_step_is_named():
    with pytest.raises(ValueError, match="^fit_steps"):
        calibrate(_steps(n_steps=1), ClusterConfig(), MODEL, fit_steps=[9])
