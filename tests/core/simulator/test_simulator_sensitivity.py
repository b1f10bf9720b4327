"""The what-if speedup's band over the uncalibrated model parameters
(core/simulator/sensitivity.py), as the replay result and the request carry it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from backend.jobs.simulations import simulation_request
from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, simulate
from core.simulator.replay import replay, result_dict
from core.simulator.request import ReplayRequest
from core.simulator.sensitivity import RANGES, ParamRange, speedup_band, uncalibrated, with_overrides

MODEL = MODEL_PRESETS["Qwen2.5-7B"]
COLOCATED = ClusterConfig(n_gpus=8, rollout_replicas=2, rollout_tp=4, train_dp=8)
SPLIT = ClusterConfig(n_gpus=8, rollout_replicas=1, rollout_tp=4, train_dp=4)


def _steps(n_steps: int = 2) -> list[StepWorkload]:
    rng = np.random.default_rng(0)
    return [
        StepWorkload.from_groups(s, rng.integers(50, 300, 16), [rng.integers(10, 2000, 4) for _ in range(16)])
        for s in range(n_steps)
    ]


def _pair(steps: list[StepWorkload]):
    """B (one_step_off, disaggregated) over A (sync, colocated) with `overrides` on both."""

    def pair(overrides: dict[str, float]) -> float:
        a = simulate(steps, with_overrides(COLOCATED, overrides), MODEL, EngineLimits(), Policy("sync"))
        b = simulate(steps, with_overrides(SPLIT, overrides), MODEL, EngineLimits(), Policy("one_step_off"))
        return a.makespan / b.makespan

    return pair


def test_band_contains_the_point_and_widens_with_the_range():
    steps = _steps()
    pair = _pair(steps)
    point = pair({})
    narrow = speedup_band(point, pair, [ParamRange("colocation_overhead", 1.24, 1.9, "never", "")])
    wide = speedup_band(point, pair, [ParamRange("colocation_overhead", 1.0, 3.0, "never", "")])
    for band in (narrow, wide):
        lo, hi = band["band"]
        assert lo <= point <= hi and band["speedup"] == point and band["replays"] == 2
    # only the colocated side pays the overhead: B's speedup grows with it
    row = wide["parameters"][0]
    assert row["speedup_low"] < point < row["speedup_high"]
    assert wide["band"][0] < narrow["band"][0] and wide["band"][1] > narrow["band"][1]


def test_a_replay_asked_for_it_reports_the_band_beside_the_speedup():
    steps = _steps()
    body = {"trace_id": 1, "compare_policy": "one_step_off", "uncertainty": False}
    plain = result_dict(replay(steps, simulation_request(body)))["compare"]
    assert "speedup_band" not in plain["total"] and "sensitivity" not in plain
    request = simulation_request({**body, "sensitivity": True})
    assert request.sensitivity and request.to_json()["sensitivity"] is True
    out = result_dict(replay(steps, request))["compare"]
    total, band = out["total"], out["sensitivity"]
    assert total["speedup"] == pytest.approx(plain["total"]["speedup"])
    lo, hi = total["speedup_band"]
    assert lo <= total["speedup"] <= hi and lo < hi
    # uncalibrated (no measured timings): every declared parameter, low and high each
    assert [r["parameter"] for r in band["parameters"]] == [r.name for r in RANGES]
    assert band["replays"] == 2 * len(RANGES)
    seen = [s for r in band["parameters"] for s in (r["speedup_low"], r["speedup_high"])]
    assert [lo, hi] == pytest.approx([min([*seen, total["speedup"]]), max([*seen, total["speedup"]])])


def test_a_calibrated_mfu_closes_its_range_and_leaves_the_roofline_engine_open():
    """Measured update times but no rollout timings: the MFU is fitted, the engine stays
    the roofline, so its efficiencies stay in the band and their replays move it."""
    steps = _steps()
    for w in steps:
        w.timings["t_update_actor"] = 5.0
    body = {"trace_id": 1, "compare_policy": "one_step_off", "uncertainty": False, "sensitivity": True}
    out = result_dict(replay(steps, simulation_request({**body, "calibrate": {"fit_steps": [0]}})))
    assert out["calibration"]["method"] == "roofline" and out["calibration"]["train_mfu"] is not None
    rows = {r["parameter"]: r for r in out["compare"]["sensitivity"]["parameters"]}
    assert "train_mfu" not in rows and {"bandwidth_efficiency", "rollout_mfu"} <= set(rows)
    bw = rows["bandwidth_efficiency"]
    assert bw["speedup_low"] != pytest.approx(bw["speedup_high"], rel=1e-6)


def test_calibration_closes_what_it_fits():
    names = lambda rs: [r.name for r in rs]  # noqa: E731
    assert names(uncalibrated(engine_calibrated=False, mfu_calibrated=False)) == names(RANGES)
    both = uncalibrated(engine_calibrated=True, mfu_calibrated=True)
    assert names(both) == ["train_serial_fraction", "colocation_overhead"]
    assert "train_mfu" in names(uncalibrated(engine_calibrated=True, mfu_calibrated=False))


def test_the_request_keeps_its_stored_shape_unless_asked():
    request = simulation_request({"trace_id": 1, "compare_policy": "one_step_off"})
    stored = request.to_json()
    assert "sensitivity" not in stored and ReplayRequest.from_json(stored).sensitivity is False
    asked = dataclasses.replace(request, sensitivity=True)
    assert ReplayRequest.from_json(asked.to_json()) == asked


def test_every_range_is_a_valid_cluster_setting_around_its_default():
    base = ClusterConfig()
    for r in RANGES:
        assert r.low < r.high
        assert r.low <= getattr(base, r.name) <= r.high, r.name
        for v in (r.low, r.high):
            assert getattr(ClusterConfig.from_dict({r.name: v}), r.name) == v
