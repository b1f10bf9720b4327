"""The fields of the replay, advice and workload request bodies, each with its one check.

Pure (no database). A check returns the value as the job stores it, or raises a
`ValueError` starting with the field it names (``"uncertainty.runs: must be an integer
in 10..20000, got 3"``). The job code (`simulation_params`, `advice_params`,
`workload_params`, shared by the REST API and the CLI) applies them, and the REST
schema (`backend.api.schemas_replay`) validates each field with the same check and shows
it with the bounds declared here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from backend.store.ids import INT4_MAX
from core.simulator.evaluation import DEFAULT_WINDOW
from core.simulator.forecast import DEFAULT_WORKLOADS

# Generated workloads larger than this are refused (the files and the ingest would be huge).
MAX_GENERATED_SAMPLES = 20_000_000


def check_int(value: Any, where: str, lo: int = 0, hi: int = INT4_MAX) -> int:
    """An integer (an integral float too) in lo..hi (steps, counts and seeds are int32)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: must be an integer, got {value!r:.80}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ValueError(f"{where}: must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{where}: must be an integer in {lo}..{hi}, got {value!r}")
    return int(value)


def check_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: must be true or false, got {value!r:.80}")
    return value


@dataclass(frozen=True)
class Count:
    """An integer field in lo..hi (null allowed when `nullable`)."""

    lo: int = 0
    hi: int = INT4_MAX
    nullable: bool = False

    def check(self, value: Any, where: str) -> Any:
        if value is None and self.nullable:
            return None
        return check_int(value, where, self.lo, self.hi)


@dataclass(frozen=True)
class Text:
    """A text field stored in a column of at most `most` characters (never NUL)."""

    most: int

    def check(self, value: Any, where: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(f"{where}: must be a string, got {value!r:.80}")
        if len(value) > self.most or "\0" in value:
            raise ValueError(
                f"{where}: must be at most {self.most} characters without NUL, got {len(value)} characters"
            )
        return value


STEP = Count(0)
SEED = Count(0)
# a synthetic replay source: (default, bounds) of its counts
SOURCE_COUNTS = {
    "steps": (1, Count(1)),
    "groups": (64, Count(1)),
    "samples_per_group": (8, Count(1)),
    "seed": (0, SEED),
}
UNCERTAINTY_RUNS = Count(10, 20_000, nullable=True)
ROLLING_WINDOW = (DEFAULT_WINDOW, Count(1, nullable=True))
FORECAST_WORKLOADS = (DEFAULT_WORKLOADS, Count(1, 64))
# the workload job's counts and texts (steps: at least 1 to generate from a parameter file)
WORKLOAD_COUNTS = {
    "steps": Count(0),
    "groups": Count(1, nullable=True),
    "samples_per_group": Count(1, nullable=True),
    "seed": SEED,
    "dp_size": Count(1),
}
WORKLOAD_DEFAULTS = {"seed": 0, "dp_size": 1}  # steps: 0 (fit only) with a trace, else 1
WORKLOAD_TEXTS = {"name": Text(300), "task": Text(200)}  # the trace name / task label columns
WORKLOAD_FORMATS = ("packed", "compact", "multiturn")
# The largest GPU budget a replay or an advice may ask for: the replay builds every
# rollout replica and training rank of it (a budget of 2**31 GPUs would never finish).
MAX_GPUS = 4096
# the advisor's budget, Monte-Carlo runs, seed and engine concurrency
ADVICE_COUNTS = {
    "n_gpus": Count(1, MAX_GPUS),
    "runs": Count(10, 5000),
    "policy_runs": Count(2, 200),
    "seed": SEED,
}
CONCURRENCY = Count(1, nullable=True)


def check_budget(n_gpus: int, where: str) -> int:
    """A checked cluster's GPU budget within what a request may ask for."""
    if n_gpus > MAX_GPUS:
        raise ValueError(f"{where}: must be <= {MAX_GPUS}, got {n_gpus}")
    return n_gpus


def check_fields(body: Any, known) -> None:
    """A JSON object with only `known` fields (ValueError names the first other one)."""
    if not isinstance(body, dict):
        raise ValueError("body: expected a JSON object")
    unknown = [k for k in body if k not in known]
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown field (known: {', '.join(known)})")


def _canonical(name: Any, presets: dict) -> Any:
    if not isinstance(name, str):
        return name
    lowered = {k.lower(): k for k in presets}
    return lowered.get(name.strip().lower(), name)


def resolve_names(section: Any, presets: dict, key: str = "preset") -> Any:
    """A preset name (or a dict's `key` entry) matched case-insensitively."""
    if isinstance(section, str):
        return _canonical(section, presets)
    if isinstance(section, dict) and key in section:
        return {**section, key: _canonical(section[key], presets)}
    return section


def one_source(body: Any, given: str, alternative: str, what: tuple[str, str]) -> None:
    """Exactly one of `given` (e.g. trace_id) and `alternative` (workload) is set."""
    if isinstance(body, dict) and (body.get(given) is None) == (body.get(alternative) is None):
        raise ValueError(f"{given}: give either {given} ({what[0]}) or {alternative} ({what[1]})")


def calibrate_option(value: Any) -> dict | bool | None:
    """None (when measured), False (never), True or {"fit_steps": [...]}."""
    if value is None or value is False:
        return value
    if value is True:
        return {"fit_steps": []}
    if not isinstance(value, dict):
        raise ValueError(f'calibrate: expected true, false or {{"fit_steps": [...]}}, got {value!r}')
    _only(value, ("fit_steps",), "calibrate")
    steps = value.get("fit_steps") or []
    if not isinstance(steps, list):
        raise ValueError(f"calibrate.fit_steps: expected a list of steps, got {steps!r}")
    return {"fit_steps": [STEP.check(s, f"calibrate.fit_steps[{i}]") for i, s in enumerate(steps)]}


def _only(value: dict, known: tuple[str, ...], where: str) -> None:
    unknown = [k for k in value if k not in known]
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(known)})")


def uncertainty_option(value: Any) -> dict | bool:
    """False (deterministic only), or {"runs": N or None (by a convergence check), "seed"}."""
    if value is False:
        return False
    if value is None or value is True:
        return {"runs": None, "seed": 0}
    if not isinstance(value, dict):
        raise ValueError(f'uncertainty: expected false or {{"runs": N, "seed": S}}, got {value!r}')
    _only(value, ("runs", "seed"), "uncertainty")
    return {
        "runs": UNCERTAINTY_RUNS.check(value.get("runs"), "uncertainty.runs"),
        "seed": SEED.check(value.get("seed", 0), "uncertainty.seed"),
    }


def rolling_origin_option(value: Any) -> dict | None:
    """None, or {"window": W or None (all earlier steps)}."""
    if value is None or value is False:
        return None
    default, window = ROLLING_WINDOW
    if value is True:
        return {"window": default}
    if not isinstance(value, dict):
        raise ValueError(f'rolling_origin: expected true or {{"window": W}}, got {value!r}')
    _only(value, ("window",), "rolling_origin")
    return {"window": window.check(value.get("window", default), "rolling_origin.window")}


def forecast_option(value: Any) -> dict | None:
    """None, or {"workloads": J}."""
    if value is None or value is False:
        return None
    default, workloads = FORECAST_WORKLOADS
    if value is True:
        return {"workloads": default}
    if not isinstance(value, dict):
        raise ValueError(f'forecast: expected true or {{"workloads": J}}, got {value!r}')
    _only(value, ("workloads",), "forecast")
    return {"workloads": workloads.check(value.get("workloads", default), "forecast.workloads")}


def sensitivity_option(value: Any) -> bool:
    """Whether to replay the speedup's band over the uncalibrated parameters (null: no)."""
    return False if value is None else check_bool(value, "sensitivity")


def step_range(value: Any) -> list[int] | None:
    """[first, end) or None (all steps)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"steps: expected [first, end) as two integers, got {value!r}")
    lo, hi = STEP.check(value[0], "steps[0]"), STEP.check(value[1], "steps[1]")
    if hi <= lo:
        raise ValueError(f"steps: the end ({hi}) must be greater than the first step ({lo})")
    return [lo, hi]


def workload_source(d: Any) -> dict:
    """A synthetic replay source: a PolyTrace parameter file and what to draw from it."""
    from core.workload.params_file import load_parameters

    if not isinstance(d, dict):
        raise ValueError("workload: expected an object with parameters, task, steps, groups, samples_per_group")
    _only(d, ("parameters", "task", *SOURCE_COUNTS), "workload")
    if "parameters" not in d:
        raise ValueError("workload.parameters: required (the PolyTrace parameter file's JSON)")
    try:
        parsed = load_parameters(d["parameters"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"workload.parameters: {exc}") from None
    task = d.get("task") or (parsed.tasks[0] if parsed.tasks else None)
    if task not in parsed.tasks:
        raise ValueError(
            f"workload.task: must be one of {', '.join(parsed.tasks) or '(none in the file)'}, got {task!r}"
        )
    out = {"parameters": d["parameters"], "task": task}
    for key, (default, count) in SOURCE_COUNTS.items():
        out[key] = count.check(d.get(key, default), f"workload.{key}")
    if out["steps"] * out["groups"] * out["samples_per_group"] > MAX_GENERATED_SAMPLES:
        raise ValueError(f"workload.steps: steps × groups × samples_per_group must be <= {MAX_GENERATED_SAMPLES:,}")
    return out


def choices_list(value: Any, allowed, where: str, default: list) -> list:
    """A non-empty list of values from `allowed` (duplicates dropped); `default` when None."""
    if value is None:
        return list(default)
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: expected a non-empty list")
    for i, v in enumerate(value):
        if not isinstance(v, str) or v not in allowed:
            raise ValueError(f"{where}[{i}]: must be one of {', '.join(map(str, allowed))}, got {v!r:.80}")
    return list(dict.fromkeys(value))


def concurrency_list(value: Any) -> list:
    """Running-sequence limits per replica (null: the calibrated or configured limits)."""
    if not isinstance(value, list) or not value:
        raise ValueError("concurrency: expected a non-empty list of running-sequence limits (null: calibrated)")
    return list(dict.fromkeys(CONCURRENCY.check(c, f"concurrency[{i}]") for i, c in enumerate(value)))
