"""What every registered policy keeps, whatever it models (iterates the registry: a
policy is covered by registering it), on the PolyTrace fixtures and on synthetic
single- and multi-turn workloads, each with the policy's default parameters on a
16-GPU budget laid out as the CLI does (`defaults.layout_for`).

- Every sample trained exactly once or carried: the sequences of every update pass
  (recorded where policies call `training_pass`), as a multiset of lengths, are the
  trace's, each at most as often as the trace has it, and every trace sample is
  trained — except, for a policy whose spec says unfinished samples outlive a step
  (`carries_over`), those still carried when the replay ends, at most `CARRY_STEPS`
  steps' worth. A policy that draws prompts past the trace's end as stand-ins for
  further prompts (`stand_ins`) may train a trace sample a second time, as its stand-in.
- Stage times and windows are non-negative; steps end in order; busy and idle
  GPU-seconds add up to n_gpus x makespan.
- The makespan is at least a critical-path lower bound: the larger of (a) the update
  passes the trainer ran, one after another (their recorded seconds summed), and (b)
  the longest trained sample decoded alone, every iteration with only itself running
  on an otherwise empty replica (the iteration time grows with the batch and its
  cached tokens, so alone is fastest), its prefill left out (a shared prompt may come
  from a cache) and, for a multi-turn trajectory, with the tool latencies between its
  turns. Lengths identify a trained sample only up to ties: (b) takes, of the trace's
  samples with a trained length, the one with the least such time. A policy that
  decodes speculatively in the tail (a positive `spec_tail_seqs` parameter) decodes
  alone at the engine limits' cost / accept of that time.
- A non-degenerate default differs from sync: on a long-tailed workload the default
  makespan differs from sync's unless the spec says the defaults make the policy sync
  (`PolicySpec.equivalent_to`), in which case it equals it.
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import orjson
import pytest

from core.simulator import GPU_PRESETS, MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, simulate
from core.simulator import training as training_module
from core.simulator.defaults import layout_for
from core.simulator.policies import POLICIES
from core.simulator.predictor import EngineCoefficients, decode_series
from core.simulator.workload import workload_from_columns
from core.workload.polytrace_rows import multiturn_rows_to_columns, packed_rows_to_columns, reward_rows_to_columns
from core.workload.synthetic import packed_length_rows

CARRY_STEPS = 2
N_GPUS = 16
FIXTURES = {  # folder: model preset
    "verl_dapo_qwen2_5_32b": "Qwen2.5-32B",
    "search_r1_qwen2_5_7b": "Qwen2.5-7B",
    "rllm_deepcoder_14b_16k": "DeepCoder-14B",
    "verl_video_qwen2_5_vl_7b": "Qwen2.5-VL-7B",
}


def long_tailed(steps=6, groups=48, n=8, seed=5) -> list[StepWorkload]:
    return [
        StepWorkload.from_groups(rows[0]["step"], [r["input"] for r in rows], [r["output"] for r in rows])
        for rows in packed_length_rows(steps, groups, n, seed=seed, max_response_len=16384)
    ]


def multi_turn(steps=4, n=96, seed=2) -> list[StepWorkload]:
    """n trajectories per step (groups of 4), 1-4 turns, tool latency between turns."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        turns = rng.integers(1, 5, n)
        sample = np.repeat(np.arange(n), turns)
        completion = np.maximum(1, rng.lognormal(5.5, 1.0, sample.size)).astype(np.int64)
        tool = np.where(np.r_[sample[1:] == sample[:-1], False], rng.exponential(2.0, sample.size), 0.0)
        prompt0 = rng.integers(100, 400, n)
        prompt, cached = np.empty(sample.size, np.int64), np.zeros(sample.size, np.int64)
        first = np.searchsorted(sample, np.arange(n))
        for i in range(n):
            ctx = prev = int(prompt0[i])
            for j in range(first[i], first[i] + turns[i]):
                prompt[j], cached[j] = ctx, (0 if j == first[i] else prev)
                prev = ctx + int(completion[j])
                ctx = prev + 50  # the tool's response
        out.append(
            StepWorkload(
                step=step,
                group=np.arange(n) // 4,
                prompt_len=prompt0,
                response_len=np.bincount(sample, completion, minlength=n).astype(np.int64),
                turn_sample=sample,
                turn_prompt_tokens=prompt,
                turn_cached_tokens=cached,
                turn_completion_tokens=completion,
                turn_tool_latency_s=tool,
            )
        )
    return out


def fixture(folder) -> list[StepWorkload]:
    def rows(pattern):
        return [orjson.loads(line) for f in sorted(folder.glob(pattern)) for line in f.read_bytes().splitlines()]

    if folder.name.startswith("search_r1"):
        cols = multiturn_rows_to_columns(rows("multiturn_workload_step_*.jsonl"))
        return workload_from_columns(cols["samples"], cols["turns"], cols["tool_calls"])
    rewards = rows("reward_timings_step_*.jsonl")
    timings = reward_rows_to_columns(rewards) if rewards else None
    return workload_from_columns(packed_rows_to_columns(rows("packed_lengths_step_*.jsonl")), rank_timings=timings)


class UpdateRecorder:
    """Every update pass a replay runs: its sequence lengths and seconds."""

    def __init__(self, monkeypatch) -> None:
        self.lengths: list[np.ndarray] = []
        self.seconds: list[float] = []
        real = training_module.training_pass

        def recording(total_len, model, cluster, policy, *, forward_only, **kw):
            out = real(total_len, model, cluster, policy, forward_only=forward_only, **kw)
            if not forward_only:
                self.lengths.append(np.array(total_len, copy=True))
                self.seconds.append(out.seconds)
            return out

        for mod in list(sys.modules.values()):  # every module that imported it by name
            if (
                getattr(mod, "__name__", "").startswith("core.simulator")
                and getattr(mod, "training_pass", None) is real
            ):
                monkeypatch.setattr(mod, "training_pass", recording)

    def trained(self) -> Counter:
        return Counter(np.concatenate(self.lengths).tolist()) if self.lengths else Counter()


def alone_seconds(w: StepWorkload, c: EngineCoefficients) -> np.ndarray:
    """Per sample: its decode iterations with nothing else running, plus the tool
    latencies between its turns (prefill left out)."""

    def decode_alone(context, tokens):
        m = np.maximum(tokens - 1, 0)
        alpha = c.decode_a + c.decode_b * (context + 1) + c.decode_c
        return decode_series(m, alpha, c.decode_b)

    if not w.is_multiturn:
        return decode_alone(w.prompt_len, w.response_len)
    assert w.turn_prompt_tokens is not None and w.turn_completion_tokens is not None
    assert w.turn_tool_latency_s is not None and w.turn_sample is not None
    per_turn = decode_alone(w.turn_prompt_tokens, w.turn_completion_tokens)
    last = np.r_[w.turn_sample[1:] != w.turn_sample[:-1], True]
    per_turn = per_turn + np.where(last, 0.0, w.turn_tool_latency_s)
    return np.bincount(w.turn_sample, per_turn, minlength=w.n_samples)


def replay(steps, model_name, kind, params=None):
    model = MODEL_PRESETS[model_name]
    spec = POLICIES[kind]
    layout = layout_for(spec.disaggregated, N_GPUS, model, GPU_PRESETS["H100"])
    cluster = ClusterConfig(n_gpus=N_GPUS, **layout)
    return simulate(steps, cluster, model, EngineLimits(), Policy(kind=kind, params=params or {}), workers=1)


def check_invariants(steps: list[StepWorkload], model_name: str, kind: str, monkeypatch) -> None:
    rec = UpdateRecorder(monkeypatch)
    r = replay(steps, model_name, kind)
    spec = POLICIES[kind]
    where = f"{kind}: "
    # every sample trained exactly once or carried
    trace = Counter(np.concatenate([w.total_len for w in steps]).tolist())
    trained = rec.trained()
    twice = trained - trace
    if spec.stand_ins:
        twice -= trace  # a trace sample trained again as its stand-in
    assert not twice, where + f"trained more often than the trace has them: {sorted(twice.items())[:5]}"
    carried = sum((trace - trained).values())
    limit = CARRY_STEPS * max(w.n_samples for w in steps) if spec.carries_over else 0
    assert carried <= limit, where + f"{carried} samples never trained"
    assert sum(s.n_samples for s in r.steps) == sum(trained.values()), where + "steps report what they train"
    # stage times, step order, GPU-seconds
    for s in r.steps:
        assert all(v >= 0 for v in s.stages.values()), where + f"step {s.step}: {s.stages}"
        assert all(b >= a for a, b in s.windows.values()), where + f"step {s.step}: {s.windows}"
        assert s.end >= s.start and s.step_time >= -1e-9, where + f"step {s.step}"
    ends = [s.end for s in r.steps]
    assert ends == sorted(ends) and r.makespan == pytest.approx(ends[-1])
    assert r.busy_gpu_s + sum(r.idle_gpu_s.values()) == pytest.approx(N_GPUS * r.makespan, rel=1e-9)
    # the critical-path lower bound
    coeffs = EngineCoefficients.from_dict(r.config["coefficients"])
    fastest: dict[int, float] = {}
    for w in steps:
        for length, t in zip(w.total_len.tolist(), alone_seconds(w, coeffs).tolist()):
            fastest[length] = min(t, fastest.get(length, np.inf))
    decode_bound = max((fastest[length] for length in trained), default=0.0)
    if getattr(spec.resolve({}), "spec_tail_seqs", 0) > 0:
        _, factor = EngineLimits().speculation()
        decode_bound *= min(1.0, factor)
    update_bound = sum(rec.seconds)
    assert r.makespan >= max(decode_bound, update_bound) * (1 - 1e-9), where + (
        f"makespan {r.makespan:.3f} s < bound {decode_bound:.3f} (decode) / {update_bound:.3f} (updates)"
    )


@pytest.mark.parametrize("kind", list(POLICIES))
@pytest.mark.parametrize("workload", ["long_tailed", "multi_turn"])
def test_invariants_on_synthetic_workloads(kind, workload, monkeypatch):
    steps = long_tailed() if workload == "long_tailed" else multi_turn()
    check_invariants(steps, "Qwen2.5-7B", kind, monkeypatch)


@pytest.mark.parametrize("kind", list(POLICIES))
@pytest.mark.parametrize("name", list(FIXTURES))
def test_invariants_on_polytrace_fixtures(kind, name, shared_fixtures, monkeypatch):
    steps = fixture(shared_fixtures / "polytrace" / name)
    assert steps, name
    check_invariants(steps, FIXTURES[name], kind, monkeypatch)


def _differs_from_sync(steps, model_name, kind):
    spec = POLICIES[kind]
    ours, sync = replay(steps, model_name, kind), replay(steps, model_name, "sync")
    if spec.equivalent_to(spec.resolve({})) == "sync":
        assert ours.makespan == pytest.approx(sync.makespan, rel=1e-12)
    else:
        assert abs(ours.makespan - sync.makespan) > 1e-6 * sync.makespan, kind


@pytest.mark.parametrize("kind", [k for k in POLICIES if k != "sync"])
def test_default_differs_from_sync_unless_declared_equivalent(kind):
    _differs_from_sync(long_tailed(), "Qwen2.5-7B", kind)


@pytest.mark.parametrize("kind", [k for k in POLICIES if k != "sync"])
def test_default_differs_from_sync_on_dapo(kind, shared_fixtures):
    _differs_from_sync(fixture(shared_fixtures / "polytrace" / "verl_dapo_qwen2_5_32b"), "Qwen2.5-32B", kind)
