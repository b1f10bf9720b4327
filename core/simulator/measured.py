"""Which measured timings a trace's steps hold, in words, for a replay that was not
calibrated: calibration fits the engine to rollout timings only (per-turn engine
latencies, or the t_gen / t_update_actor stage timings), so a trace may have measured
timings — reward seconds per rank, say — and still not be calibrated on. The replay's
result, the CLI and the dashboard say the same sentence."""

from __future__ import annotations

import numpy as np

from core.simulator.workload import StepWorkload

# What calibration fits on (`rollout_timed`), in words.
CALIBRATION_NEEDS = "rollout timings (per-turn engine latencies, or the t_gen / t_update_actor stage timings)"


def measured_kinds(steps: list[StepWorkload]) -> list[str]:
    """The kinds of measured timing the steps hold, in words (empty: none)."""
    kinds: list[str] = []
    if any(w.turn_engine_latency_s is not None and np.isfinite(w.turn_engine_latency_s).any() for w in steps):
        kinds.append("per-turn engine latencies")
    stages = sorted({k for w in steps for k, v in w.timings.items() if v is not None and np.isfinite(v)})
    if stages:
        kinds.append("stage timings (" + ", ".join(stages) + ")")
    if any(w.reward_time_by_rank is not None and np.size(w.reward_time_by_rank) for w in steps):
        kinds.append("reward time per rank")
    if any(w.sample_latency_s is not None and np.isfinite(w.sample_latency_s).any() for w in steps):
        kinds.append("per-sample latencies")
    return kinds


def rollout_timed(w: StepWorkload) -> bool:
    """The step has timings calibration fits on."""
    lat = w.turn_engine_latency_s
    return bool((lat is not None and np.isfinite(lat).any()) or "t_gen" in w.timings or "t_update_actor" in w.timings)


def uncalibrated_note(steps: list[StepWorkload], calibrate_param: object) -> str:
    """Why a replay of `steps` ran uncalibrated (roofline coefficients)."""
    if calibrate_param is False:
        return "not calibrated: calibration was turned off"
    kinds = measured_kinds(steps)
    if not kinds:
        return f"not calibrated: the trace has no measured timings (calibration fits on {CALIBRATION_NEEDS})"
    has = f"not calibrated: the trace's measured timings are {', '.join(kinds)}"
    if steps and any(rollout_timed(w) for w in steps):
        return f"{has}; the first replayed step ({steps[0].step}), calibrated on by default, lacks {CALIBRATION_NEEDS}"
    return f"{has}; it lacks what calibration fits on, {CALIBRATION_NEEDS}"
