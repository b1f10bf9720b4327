"""What a replay returns, how two replays compare, and the Chrome-trace export.

`SimResult` fields:
  steps        list of `StepResult`
  makespan     seconds from the first step's start to the last step's end
  lanes        the per-GPU busy/idle timeline: `Lane(name, gpus, intervals)`; a physical
               GPU's timeline is the union of the lanes listing it. Intervals are
               aggregated per stage (never per token): [start, end, state, label, step]
               with state "busy" (label = stage: rollout, recompute, old_log_prob, ref,
               update_actor, weight_sync) or "idle" (label = cause: causes.IDLE_CAUSES,
               defined in causes.CAUSES)
  idle_gpu_s   GPU-seconds idle per cause over the run; busy_gpu_s likewise
  throughput_tokens_per_s_per_gpu  generated tokens of trained samples / makespan / n_gpus
  unused_gpus  GPUs of the budget that no stage uses with this layout (with a warning)
`StepResult` fields:
  step, start, end, step_time (end − previous step's end: what the step adds to the
  makespan), stages (seconds per stage), windows ([start, end] per stage), n_samples,
  generated_tokens, rollout (time_s, p50/p90/max trajectory completion, share of rollout
  time spent on the last 10% of trajectories, preemptions, decoded/prefilled tokens),
  idle_gpu_s per cause, busy_gpu_s; `trajectory_s` (per-sample completion time from the
  rollout start, NaN for samples not finished in this step) is kept in memory only.

`compare(a, b)` returns (JSON-safe):
  total      makespan_a_s, makespan_b_s, speedup (A / B), saved_s (A - B: negative when B is
             slower), delta_s (B - A: positive when B is slower), verdict ("faster" | "slower" |
             "same": what B is), summary (explain's sentence), throughput_a, throughput_b
  per_step   [{step, time_a_s, time_b_s, speedup, saved_s}]
  stages_s   {stage: {a, b, delta}}
  idle_gpu_s {cause: {a, b, delta}}
  explain    why (core/simulator/explain.py):
    definition   how the figures are defined
    a, b         {policy, label, n_gpus, makespan_s, gpu_s (n_gpus x makespan), idle_fraction,
                 split {disaggregated, rollout_gpus, train_gpus, shared_gpus, unused_gpus, text
                 e.g. "4 rollout + 4 train GPUs"}, top_cause {cause, phrase, gpu_s, share} or None
                 (the largest idle cause or overhead, share of gpu_s)}
    delta_s      makespan B - makespan A (signed)
    verdict      "faster" | "slower" | "same" (what B is)
    speedup      makespan A / makespan B
    budget_s     the part of delta_s due to different GPU budgets (0 on the same budget)
    components   [{cause, kind (idle | overhead | work), phrase, definition, lever, a_gpu_s,
                 b_gpu_s, delta_gpu_s, delta_s (contribution to makespan B - A, seconds),
                 share_a, share_b (of each side's GPU-seconds)}], ranked by |delta_s|; the
                 delta_s plus budget_s add up to delta_s of the whole
    summary      one sentence: "async is 650.4 s slower than sync (0.628x): async idles 50.9%
                 of its GPU time on a 4 rollout + 4 train GPU split, loses the most (21.9%) to
                 the trainer pool waiting for rollouts; sync idles ...; the largest difference
                 is ... (+412.0 s of makespan)."
  `explain_text(explain)` renders it for a terminal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from core.simulator.causes import CAUSES, IDLE_CAUSES
from core.simulator.explain import explain, explain_text

STAGES = ("rollout", "reward", "old_log_prob", "ref", "adv", "update_actor", "weight_sync")


@dataclass
class Lane:
    name: str
    gpus: list[int]
    intervals: list[list] = field(default_factory=list)
    role: str = "shared"  # rollout | train (disaggregated pools), shared (time-shared), unused

    def add(self, start: float, end: float, state: str, label: str, step: int) -> None:
        if end <= start:
            return
        last = self.intervals[-1] if self.intervals else None
        if (
            last is not None
            and last[2] == state
            and last[3] == label
            and last[4] == step
            and abs(last[1] - start) < 1e-9
        ):
            last[1] = end
        else:
            self.intervals.append([start, end, state, label, step])


@dataclass
class StepResult:
    step: int
    start: float
    end: float
    step_time: float
    stages: dict[str, float]
    windows: dict[str, list[float]]
    n_samples: int
    generated_tokens: int
    rollout: dict
    idle_gpu_s: dict[str, float] = field(default_factory=dict)
    busy_gpu_s: float = 0.0
    trajectory_s: np.ndarray | None = None

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "trajectory_s"}
        return _json_safe(d)


@dataclass
class SimResult:
    steps: list[StepResult]
    makespan: float
    lanes: list[Lane]
    n_gpus: int
    config: dict
    idle_gpu_s: dict[str, float] = field(default_factory=dict)
    busy_gpu_s: float = 0.0
    unused_gpus: int = 0  # GPUs of the budget no stage uses with this layout
    warnings: list[str] = field(default_factory=list)

    @property
    def generated_tokens(self) -> int:
        return int(sum(s.generated_tokens for s in self.steps))

    @property
    def throughput_tokens_per_s_per_gpu(self) -> float:
        return self.generated_tokens / self.makespan / self.n_gpus if self.makespan > 0 else 0.0

    def stage_totals(self) -> dict[str, float]:
        return {k: float(sum(s.stages.get(k, 0.0) for s in self.steps)) for k in STAGES}

    def to_dict(self, *, timeline: bool = True) -> dict:
        d = {
            "makespan_s": self.makespan,
            "n_gpus": self.n_gpus,
            "generated_tokens": self.generated_tokens,
            "throughput_tokens_per_s_per_gpu": self.throughput_tokens_per_s_per_gpu,
            "stage_totals_s": self.stage_totals(),
            "idle_gpu_s": dict(self.idle_gpu_s),
            "busy_gpu_s": self.busy_gpu_s,
            "idle_fraction": sum(self.idle_gpu_s.values()) / (self.n_gpus * self.makespan) if self.makespan else 0.0,
            "config": self.config,
            "unused_gpus": self.unused_gpus,
            "warnings": list(self.warnings),
            "steps": [s.to_dict() for s in self.steps],
        }
        if timeline:
            d["timeline"] = [
                {"name": l.name, "gpus": l.gpus, "role": l.role, "intervals": l.intervals} for l in self.lanes
            ]
        return _json_safe(d)


def _json_safe(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, np.ndarray):
        return _json_safe(x.tolist())
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if np.isfinite(x) else None
    return x


def compare(a: SimResult, b: SimResult) -> dict:
    """Policy B against policy A on the same trace: per-step and total speedup
    (A time / B time), where the time went (stage seconds and idle GPU-seconds, A, B and
    B − A) and why (`explain`); shape in the module docstring."""
    by_step_b = {s.step: s for s in b.steps}
    per_step = []
    for s in a.steps:
        o = by_step_b.get(s.step)
        if o is None:
            continue
        per_step.append(
            {
                "step": s.step,
                "time_a_s": s.step_time,
                "time_b_s": o.step_time,
                "speedup": s.step_time / o.step_time if o.step_time > 0 else None,
                "saved_s": s.step_time - o.step_time,
            }
        )
    sa, sb = a.stage_totals(), b.stage_totals()
    causes = sorted(set(a.idle_gpu_s) | set(b.idle_gpu_s))
    why = explain(a, b)
    out = {
        "total": {
            "makespan_a_s": a.makespan,
            "makespan_b_s": b.makespan,
            "speedup": a.makespan / b.makespan if b.makespan > 0 else None,
            "saved_s": a.makespan - b.makespan,
            "delta_s": why["delta_s"],
            "verdict": why["verdict"],
            "summary": why["summary"],
            "throughput_a": a.throughput_tokens_per_s_per_gpu,
            "throughput_b": b.throughput_tokens_per_s_per_gpu,
        },
        "per_step": per_step,
        "stages_s": {k: {"a": sa[k], "b": sb[k], "delta": sb[k] - sa[k]} for k in STAGES},
        "idle_gpu_s": {
            c: {
                "a": a.idle_gpu_s.get(c, 0.0),
                "b": b.idle_gpu_s.get(c, 0.0),
                "delta": b.idle_gpu_s.get(c, 0.0) - a.idle_gpu_s.get(c, 0.0),
            }
            for c in causes
        },
        "explain": why,
    }
    return _json_safe(out)


def chrome_trace(result: SimResult | SimpleNamespace) -> dict:
    """The simulated timeline as Chrome trace-event JSON (opens in Perfetto):
    one thread per lane, complete events ("ph": "X") in microseconds. Reads only `lanes`
    and `steps` (step, start, end, stages), so a namespace rebuilt from a stored result works."""
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "simulated cluster"}}
    ]
    for tid, lane in enumerate(result.lanes):
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": 0,
                "tid": tid,
                "args": {"name": f"{lane.name} (GPU {_gpu_span(lane.gpus)})"},
            }
        )
        for start, end, state, label, step in lane.intervals:
            events.append(
                {
                    "name": label if state == "busy" else f"idle: {label}",
                    "cat": state,
                    "ph": "X",
                    "pid": 0,
                    "tid": tid,
                    "ts": round(start * 1e6, 3),
                    "dur": round((end - start) * 1e6, 3),
                    "args": {"step": step},
                }
            )
    for s in result.steps:
        events.append(
            {
                "name": f"step {s.step}",
                "cat": "step",
                "ph": "X",
                "pid": 1,
                "tid": 0,
                "ts": round(s.start * 1e6, 3),
                "dur": round((s.end - s.start) * 1e6, 3),
                "args": {k: round(v, 6) for k, v in s.stages.items()},
            }
        )
    events.append({"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "steps"}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _gpu_span(gpus: list[int]) -> str:
    if not gpus:
        return "-"
    if gpus == list(range(gpus[0], gpus[-1] + 1)) and len(gpus) > 1:
        return f"{gpus[0]}-{gpus[-1]}"
    return ",".join(map(str, gpus))


def chrome_trace_from_result(d: dict) -> dict:
    """Chrome trace JSON rebuilt from a stored `sim_dict` (its timeline and steps)."""
    lanes = [
        Lane(l["name"], list(l["gpus"]), [list(iv) for iv in l["intervals"]], l.get("role", "shared"))
        for l in d.get("timeline") or []
    ]
    steps = [SimpleNamespace(step=s["step"], start=s["start"], end=s["end"], stages=s["stages"]) for s in d["steps"]]
    return chrome_trace(SimpleNamespace(lanes=lanes, steps=steps))


__all__ = [
    "CAUSES",
    "IDLE_CAUSES",
    "STAGES",
    "Lane",
    "SimResult",
    "StepResult",
    "chrome_trace",
    "chrome_trace_from_result",
    "compare",
    "explain_text",
]
