"""The advice request and its run, pure: (request, workload) -> the advisor's ranking.

`AdviceRequest` is what an advice job runs, typed: built by
`backend.jobs.advice.advice_request` from a REST body or the CLI's flags, stored as
`to_json()` (the shape advice rows have always had, so older rows decode and identical
requests keep matching) and decoded by the worker with `from_json`. `advice_of` then
calibrates when the trace has measured timings (as a replay does), fits the residual
noise and sweeps the configurations that hold the model (`core.simulator.advisor`).

Result: `advise`'s ranking (one row per effective configuration, with its swept `params`,
the swept settings it `stands_for`, per-step mean / P10 / P90 step time — P10 and P90
null without a noise model — and its `gain` over the reference by cause), per-step
winners and step ranges (with their `verdict`, the cause of each winner's gain and the
range in words, `said`), `n_swept_settings`, `reference`, `why_best`, plus
`calibration` (None when not calibrated), `calibration_note` (why not, naming the measured
timings the trace has), `uncertainty` ("mc" or None) and `workload`.

In pieces, for a sweep spread over a fleet (workers/runners/advice.py): `calibrated`
once, `sweep_of` (the parts; planned again by each part from `Sweep.shared()` with
`sweep_from_shared`), `advisor.run_part` per part, `advice_result` over every part's rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.jsonable import json_safe
from core.simulator.advisor import default_grid, finish, plan, run_part, run_parts
from core.simulator.calibration import Calibration, calibrate
from core.simulator.config import ClusterConfig, EngineLimits, GpuSpec, ModelConfig, to_dict
from core.simulator.evaluation import noise_for
from core.simulator.feasibility import min_training_gpus
from core.simulator.measured import uncalibrated_note
from core.simulator.replay import fit_steps_for
from core.simulator.replay_mc import DEFAULT_RUNS
from core.simulator.request import Calibrate, calibrate_from_json, calibrate_to_json
from core.simulator.uncertainty import NoiseModel
from core.simulator.workload import StepWorkload


@dataclass(frozen=True)
class AdviceRequest:
    """A sweep over one GPU budget: the GPU, the model, what to sweep (policy kinds, DP
    balancing modes, running-sequence limits; None: as calibrated), the calibration and
    step range, and the Monte-Carlo settings."""

    trace_id: int
    gpu: GpuSpec
    n_gpus: int
    model: ModelConfig
    policies: tuple[str, ...]
    balancing: tuple[str, ...]
    concurrency: tuple[int | None, ...]
    calibrate: Calibrate = None
    steps: tuple[int, int] | None = None
    runs: int = 200
    policy_runs: int = DEFAULT_RUNS
    seed: int = 0

    def to_json(self) -> dict:
        """The job row's parameters (key order as stored before)."""
        return {
            "trace_id": self.trace_id,
            "gpu": to_dict(self.gpu),
            "n_gpus": self.n_gpus,
            "model": to_dict(self.model),
            "policies": list(self.policies),
            "balancing": list(self.balancing),
            "concurrency": list(self.concurrency),
            "calibrate": calibrate_to_json(self.calibrate),
            "steps": list(self.steps) if self.steps is not None else None,
            "runs": self.runs,
            "policy_runs": self.policy_runs,
            "seed": self.seed,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AdviceRequest:
        """A stored advice row (rows from before `policy_runs`: the default)."""
        return cls(
            trace_id=int(d["trace_id"]),
            gpu=GpuSpec(**d["gpu"]),
            n_gpus=int(d["n_gpus"]),
            model=ModelConfig(**d["model"]),
            policies=tuple(d["policies"]),
            balancing=tuple(d["balancing"]),
            concurrency=tuple(d["concurrency"]),
            calibrate=calibrate_from_json(d.get("calibrate")),
            steps=(int(d["steps"][0]), int(d["steps"][1])) if d.get("steps") else None,
            runs=int(d["runs"]),
            policy_runs=int(d.get("policy_runs", DEFAULT_RUNS)),
            seed=int(d["seed"]),
        )

    def grid(self) -> list[dict]:
        """The configurations to sweep: the default grid's that hold the model, of the
        asked policies; ValueError naming why when none is left."""
        grid = [
            c
            for c in default_grid(
                self.n_gpus, self.model, self.gpu, balancing=self.balancing, concurrency=self.concurrency
            )
            if c["policy"] in self.policies
        ]
        if grid:
            return grid
        least = min_training_gpus(self.model, self.gpu)
        if least > self.n_gpus:
            raise ValueError(
                f"n_gpus: no configuration of {self.n_gpus} × {self.gpu.name} holds {self.model.name} "
                f"(training needs at least {least} of these GPUs; see core/simulator/feasibility.py)"
            )
        raise ValueError("policies: no configuration fits the GPU budget")


@dataclass(frozen=True)
class Sweep:
    """An advice request planned on its steps: the calibration and noise model it
    replays with (None: roofline, no interval) and the advisor's `state` and `parts`
    (`core.simulator.advisor.plan`)."""

    calibration: Calibration | None
    noise: NoiseModel | None
    state: dict
    parts: list[tuple]

    @property
    def n_configurations(self) -> int:
        return sum(len(configs) for _, configs in self.parts)

    def run(self, lo: int = 0, hi: int | None = None) -> list[dict]:
        """The rows of parts [lo, hi), in order, replayed in this process (`run_part`)."""
        return [row for part in self.parts[lo:hi] for row in run_part(self.state, part)]

    def shared(self) -> dict:
        """What a part run elsewhere needs besides the steps and the request (JSON)."""
        return {
            "calibration": self.calibration.to_dict() if self.calibration is not None else None,
            "noise": self.noise.to_dict() if self.noise is not None else None,
        }


def calibrated(
    steps: list[StepWorkload], request: AdviceRequest, progress: Callable[[float, str], None] | None = None
) -> tuple[Calibration | None, NoiseModel | None]:
    """The engine calibration and residual noise the sweep replays with: fitted as asked,
    or when the trace has measured timings; (None, None) otherwise."""
    fit_ids = fit_steps_for(steps, request.calibrate)
    if fit_ids is None:
        return None, None
    if progress is not None:
        progress(0.05, f"calibrating on step(s) {', '.join(map(str, fit_ids))}")
    gpu, model = request.gpu, request.model
    cal = calibrate(steps, ClusterConfig(gpu=gpu, n_gpus=request.n_gpus), model, EngineLimits(), fit_steps=fit_ids)
    return cal, noise_for(steps, cal, model)


def sweep_of(
    steps: list[StepWorkload], request: AdviceRequest, calibration: Calibration | None, noise: NoiseModel | None
) -> Sweep:
    """The request's sweep in parts (deterministic: every worker planning it again from
    the same steps, calibration and noise gets the same parts)."""
    state, parts = plan(
        steps,
        request.gpu,
        request.n_gpus,
        request.model,
        calibration=calibration,
        noise=noise,
        grid=request.grid(),
        n_runs=request.runs,
        policy_runs=request.policy_runs,
        seed=request.seed,
    )
    return Sweep(calibration, noise, state, parts)


def sweep_from_shared(steps: list[StepWorkload], request: AdviceRequest, shared: Mapping[str, Any]) -> Sweep:
    """`sweep_of` with the calibration and noise model of `Sweep.shared()`."""
    cal = Calibration.from_dict(shared["calibration"]) if shared.get("calibration") else None
    noise = NoiseModel.from_dict(shared["noise"]) if shared.get("noise") else None
    return sweep_of(steps, request, cal, noise)


def advice_result(parts: list[list[dict]], steps: list[StepWorkload], request: AdviceRequest, sweep: Sweep) -> dict:
    """Every part's rows (a list per part or group of parts, in the parts' order) ranked
    (`finish`), with what the sweep ran on."""
    out = finish([row for rows in parts for row in rows], steps)
    cal = sweep.calibration
    out["calibration"] = cal.to_dict() if cal is not None else None
    out["calibration_note"] = None if cal is not None else uncalibrated_note(steps, request.calibrate)
    out["uncertainty"] = "mc" if sweep.noise is not None else None
    out["workload"] = {
        "steps": len(steps),
        "first_step": steps[0].step,
        "last_step": steps[-1].step,
        "samples": int(sum(w.n_samples for w in steps)),
    }
    return json_safe(out)


def advice_of(
    steps: list[StepWorkload],
    request: AdviceRequest,
    progress: Callable[[float, str], None] | None = None,
    workers: int = 1,
) -> dict:
    """Calibrate (as asked, or when measured), then rank the request's grid on `workers`
    local processes (see the module doc)."""
    report = progress or (lambda f, m: None)
    cal, noise = calibrated(steps, request, report)
    sweep = sweep_of(steps, request, cal, noise)
    report(0.3, f"sweeping {sweep.n_configurations} configurations")
    rows = run_parts(sweep.state, sweep.parts, workers, lambda f, m: report(0.3 + 0.68 * f, m))
    return advice_result([rows], steps, request, sweep)


__all__ = ["AdviceRequest", "Sweep", "advice_of", "advice_result", "calibrated", "sweep_from_shared", "sweep_of"]
