"""Replay each published RL-system design on its paper's setting and print its published
speedup next to the replayed one, with the sensitivity band (a markdown table).

Every design has one declaration (`CASES`, a `PaperCase`): the paper's model, GPU type
and count (and its rollout/trainer split when disaggregated), rollout TP, prompts per
step, samples per prompt, maximum response length, the design's parameters and its
baseline, each with where it is stated (`cited`). What a paper does not state keeps the
shared default (`DEFAULTS`) and is listed as "not stated"; a value neither stated nor
the default (a stand-in model, a TP the weights need, a scaled-down cluster) is named
with its reason in `assumed`. The workload: steps × prompts × samples per prompt with
lognormal, group-correlated response lengths capped at the paper's maximum
(`core.workload.synthetic.packed_length_rows`, the project's own generator), the median
response the cap / 14 for every design. Design and baseline replay the same workload.

Speedup: end-to-end samples trained per second of the design over its baseline's, or
rollout throughput (tokens decoded per second of rollout) where the paper reports that.
The band (`core.simulator.sensitivity.speedup_band`) replays both again with each
uncalibrated parameter at the low and high end of its declared range: the engine's
roofline efficiencies and, for end-to-end rows, the training MFU, serial fraction and
colocation overhead (a rollout-throughput ratio does not depend on training).

Verdict: within ±25% of the published figure (the nearest end of a range; an "up to"
figure is its maximum), or the paper's mechanisms the replay does not model, with the
gain they would have to add (or the factor the replay overstates by).

    .venv/bin/python -m bench.papers [--steps 40] [--scale 1.0] [--only KIND]... [--no-band]

`--scale` multiplies prompts per step and GPUs together (so each replica's load stays
the paper's; at least two replicas), for a quick run (`--scale 0.05 --steps 2` is the
test's setting).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, SimResult, StepWorkload, simulate
from core.simulator.config import GPU_PRESETS
from core.simulator.policies import POLICIES, make_policy
from core.simulator.sensitivity import RANGES, ParamRange, speedup_band, with_overrides
from core.workload.synthetic import packed_length_rows

# what a paper does not state (every design alike, so none is tuned)
DEFAULTS: dict[str, Any] = {
    "model": "Qwen2.5-7B",
    "gpu": "H800",
    "gpus": 64,
    "rollout_gpus": None,  # disaggregated: half the GPUs roll out
    "tp": 4,
    "prompts": 512,
    "n": 8,
    "cap": 8192,
    "params": {},  # the design's registered defaults
    "minibatches": 1,
}
SETTING = tuple(DEFAULTS)
MEDIAN_PER_CAP = 1 / 14  # the median response, as a fraction of the cap (every design)
WITHIN = 0.25  # the verdict's tolerance around the published figure

VERL_ASYNC = "verl docs, Recipe: Fully Async Policy Trainer, 128-card 7B table (verl@b178a3c)"
VERL_STEP_OFF = "verl docs, Recipe: One Step Off Policy Async Trainer, Experimental Results (verl@b178a3c)"


@dataclass(frozen=True)
class PaperCase:
    design: str  # the registered policy kind
    paper: str
    published: str  # as the paper states it
    published_low: float  # the figure as speedup factors (low, high); equal for one figure
    published_high: float
    measured_at: str  # the setting the published figure was measured at
    metric: str  # "end-to-end" or "rollout"
    unmodelled: str  # the paper's mechanisms the replay leaves out
    baseline: str = "sync"
    up_to: bool = False  # the paper gives a maximum ("up to")
    model: str = DEFAULTS["model"]
    gpu: str = DEFAULTS["gpu"]
    gpus: int = DEFAULTS["gpus"]
    rollout_gpus: int | None = DEFAULTS["rollout_gpus"]
    tp: int = DEFAULTS["tp"]
    prompts: int = DEFAULTS["prompts"]
    n: int = DEFAULTS["n"]
    cap: int = DEFAULTS["cap"]
    params: dict = field(default_factory=dict)
    minibatches: int = DEFAULTS["minibatches"]
    cited: dict[str, str] = field(default_factory=dict)  # setting field: where the paper states it
    assumed: dict[str, str] = field(default_factory=dict)  # setting field: why neither stated nor default

    def not_stated(self) -> list[str]:
        """The setting fields replayed at the shared default (a colocated design has no
        rollout share)."""
        own = SETTING if POLICIES[self.design].disaggregated else tuple(f for f in SETTING if f != "rollout_gpus")
        return [f for f in own if f not in self.cited and f not in self.assumed]


CASES: tuple[PaperCase, ...] = (
    PaperCase(
        "tail_batching",
        "RollPacker (NSDI'26, arXiv 2509.21009)",
        "2.03-2.56x end-to-end over veRL",
        2.03,
        2.56,
        "Qwen2.5 7B/14B/32B on 16-128 H800; the per-model split of the range is not in what we could read",
        "end-to-end",
        "RollPacker's elastic rollout parallelism, reward scheduler and stream trainer, and over-sampling of "
        "responses within a prompt",
        model="Qwen2.5-7B",
        gpus=16,
        tp=1,
        prompts=32,
        n=8,
        cap=8192,
        params={"over_provision": 1.25},
        cited={
            "model": "paper: Qwen2.5 family, 7B the smallest (artifact README, Farrrrland/RollPacker)",
            "gpu": "abstract: H800",
            "gpus": "artifact README: the paper's minimal scale, 16 H800",
            "tp": "artifact Figure-11 config: vLLM tensor_parallel_size 1",
            "prompts": "artifact Figure-11 config: rollout_batch_size 32",
            "n": "artifact Figure-11 config: num_return_sequences_in_group 8",
            "cap": "artifact README / Figure-11 config: response_length 8192",
            "params": "artifact Figure-11 config: max_prompts_ratio 1.25",
        },
    ),
    PaperCase(
        "partial",
        "APRIL (arXiv 2509.18521, in slime)",
        "+22.5% mean, up to +44% rollout throughput",
        1.225,
        1.44,
        "mean over GRPO/DAPO/GSPO on Qwen3-4B and DeepSeek-R1-Distill-Qwen-1.5B (8 GPUs, colocated); the "
        "per-run figures are not in what we could read",
        "rollout",
        "APRIL's own response lengths (the shared lognormal shape, 99th percentile 8x the median, may have a "
        "heavier tail than its runs) and any cost of aborting and resuming beyond the re-prefill",
        model="Qwen3-4B",
        gpu="MI300X",
        gpus=8,
        tp=2,
        prompts=32,
        n=8,
        cap=16384,
        params={"over_provision": 2.0},
        cited={
            "model": "APRIL scripts/partial_rollout/qwen/*/run-qwen3-4B-*-partial.sh (RLsys-Foundation/APRIL)",
            "gpus": "same scripts: --actor-num-gpus-per-node 8 --colocate",
            "tp": "same scripts: --rollout-num-gpus-per-engine 2",
            "prompts": "same scripts: --rollout-batch-size 32",
            "n": "same scripts: --n-samples-per-prompt 8",
            "cap": "same scripts: --rollout-max-response-len 16384",
            "params": "same scripts: --over-sampling-batch-size 64 (2x), --partial-rollout",
        },
        assumed={"gpu": "MI300X: the scripts run on 8 AMD GPUs (ROCm) without naming the model"},
    ),
    PaperCase(
        "divided",
        "Seer (arXiv 2511.14617)",
        "+74-97% rollout throughput (up to 2.04x)",
        1.74,
        2.04,
        "Moonlight, Qwen2-VL-72B and Kimi-K2 on 32-256 H800, against veRL",
        "rollout",
        "Seer's migration of running requests through a global KV cache and adaptive grouped speculative decoding",
        model="Qwen2.5-72B",
        gpus=128,
        tp=8,
        prompts=600,
        n=16,
        cap=40960,
        cited={
            "gpu": "paper, evaluation: H800 nodes",
            "gpus": "paper, evaluation: 128 GPUs for Qwen2-VL-72B",
            "prompts": "paper, evaluation: 600 prompts per iteration",
            "n": "paper, evaluation: 16 responses per prompt",
            "cap": "paper, evaluation: max generation 40,960",
        },
        assumed={
            "model": "Qwen2.5-72B stands in for Qwen2-VL-72B (no vision encoder)",
            "tp": "TP8: a 72B replica's weights fit beside its KV cache (not stated)",
        },
    ),
    PaperCase(
        "length_ranked",
        "StreamRL (arXiv 2504.15930)",
        "up to 2.66x throughput over existing (verl) systems",
        2.66,
        2.66,
        "the paper's maximum, with heterogeneous, cross-datacenter hardware; its setting is not in what we could read",
        "end-to-end",
        "StreamRL's stream generation into mini-batches, its stage balancing and its heterogeneous and "
        "cross-datacenter deployment",
        up_to=True,
        cited={},
    ),
    PaperCase(
        "laminar",
        "Laminar (arXiv 2510.12633)",
        "up to 5.48x training throughput at 1,024 GPUs",
        5.48,
        5.48,
        "the paper's maximum, on a 1,024-GPU cluster; model, batch and cap are not in what we could read",
        "end-to-end",
        "the global weight synchronisation that limits the baseline at 1,024 GPUs (replayed at 128) and "
        "Laminar's relay-worker parameter service",
        up_to=True,
        gpus=128,
        assumed={"gpus": "1,024 GPUs in the paper, 128 replayed (8x fewer, to keep the bench short)"},
    ),
    PaperCase(
        "async",
        "verl fully async trainer (verl docs)",
        "2.35-2.67x over colocated sync",
        2.35,
        2.67,
        "colocated sync on 128 H20 vs fully async 64:64, total time at 400 and 100 steps",
        "end-to-end",
        "nothing named: the replay models verl's streaming of mini-batches, staleness and partial rollout",
        model="Qwen2.5-7B",
        gpu="H20",
        gpus=128,
        rollout_gpus=64,
        tp=4,
        prompts=512,
        n=16,
        cap=28672,
        params={
            "staleness_threshold": 0.5,
            "trigger_parameter_sync_step": 4,
            "require_batches": 4,
            "partial_rollout": True,
        },
        minibatches=16,
        cited={
            "model": f"{VERL_ASYNC}: Qwen2.5-Math-7B (Qwen2.5-7B's network)",
            "gpu": f"{VERL_ASYNC}: H20",
            "gpus": f"{VERL_ASYNC}: 128",
            "rollout_gpus": f"{VERL_ASYNC}: 64:64",
            "tp": "verl fully_async_policy/shell/dapo_7b_math_fsdp2_64_64.sh: gen_tp=4",
            "prompts": f"{VERL_ASYNC}: train_batch_size 512 (total_rollout_steps 512*400)",
            "n": f"{VERL_ASYNC}: rollout.n 16",
            "cap": f"{VERL_ASYNC}: max_response_length 28K",
            "params": f"{VERL_ASYNC}: staleness 0.5, trigger_parameter_sync_step 4, require_batches 4, partial",
            "minibatches": f"{VERL_ASYNC}: ppo_mini_batch_size 32 (512 / 32)",
        },
    ),
    PaperCase(
        "one_step_off",
        "verl one-step-off-policy (verl docs)",
        "+23-40% over colocated sync",
        1.23,
        1.40,
        "Qwen2.5-Math-7B on 16 H20, 4 rollout + 12 trainer GPUs: +23% with FSDP2 at 20,480 tokens, +40% with "
        "Megatron at 8,192",
        "end-to-end",
        "nothing named: the replay models the one-step overlap of rollout and training on split pools",
        model="Qwen2.5-7B",
        gpu="H20",
        gpus=16,
        rollout_gpus=4,
        tp=2,
        prompts=512,
        n=12,
        cap=8192,
        minibatches=16,
        cited={
            "model": f"{VERL_STEP_OFF}: Qwen2.5-Math-7B",
            "gpu": f"{VERL_STEP_OFF}: H20",
            "gpus": f"{VERL_STEP_OFF}: 2 nodes, 16 GPUs",
            "rollout_gpus": f"{VERL_STEP_OFF}: generation 4, training 12",
            "tp": "verl one_step_off_policy/shell/dapo_7b_math_megatron_4_12.sh: gen_tp=2",
            "prompts": "same script: train_prompt_bsz=512",
            "n": "same script: n_resp_per_prompt=12",
            "cap": f"{VERL_STEP_OFF}: Megatron 8,192 (FSDP2 20,480)",
            "minibatches": "same script: train_prompt_mini_bsz=32 (512 / 32)",
        },
    ),
)


def workload_for(case: PaperCase, steps: int, scale: float, seed: int = 0) -> list[StepWorkload]:
    """`steps` steps of the case's prompts × n, lengths drawn by the project's generator."""
    prompts = max(2, round(case.prompts * scale))
    median = case.cap * MEDIAN_PER_CAP
    out = []
    rows_by_step = packed_length_rows(
        steps, prompts, case.n, max_response_len=case.cap, median_response=median, seed=seed
    )
    for rows in rows_by_step:
        prompt = np.array([r["input"] for r in rows], np.int64)
        resp = np.array([r["output"] for r in rows], np.int64).ravel()
        group = np.repeat(np.arange(len(rows)), case.n)
        out.append(StepWorkload(rows[0]["step"], group, np.repeat(prompt, case.n), resp, max_response_len=case.cap))
    return out


def cluster_for(case: PaperCase, kind: str, scale: float) -> ClusterConfig:
    """The case's GPUs (scaled, at least two replica groups): colocated policies roll
    out on every GPU; disaggregated ones roll out on the paper's rollout share (half when
    not stated) and train on the rest."""
    tp = case.tp
    gpus = max(2 * tp, 2 * tp * round(case.gpus * min(1.0, scale) / (2 * tp)))
    gpu = GPU_PRESETS[case.gpu]
    if POLICIES[kind].disaggregated:
        share = (case.rollout_gpus or case.gpus // 2) / case.gpus
        rollout = min(gpus - 1, max(tp, tp * round(gpus * share / tp)))
        return ClusterConfig(
            gpu=gpu, n_gpus=gpus, rollout_replicas=rollout // tp, rollout_tp=tp, train_dp=gpus - rollout
        )
    return ClusterConfig(gpu=gpu, n_gpus=gpus, rollout_replicas=gpus // tp, rollout_tp=tp, train_dp=gpus)


def throughput(result: SimResult, metric: str) -> float:
    """Samples trained per second (end-to-end), or tokens decoded per rollout second (the
    engines' work in the rollout windows: an aborted sample's tokens count when made)."""
    if metric == "rollout":
        rollout_s = result.stage_totals()["rollout"]
        decoded = sum(s.rollout.get("decoded_tokens", 0) for s in result.steps)
        return decoded / rollout_s if rollout_s > 0 else math.nan
    return sum(s.n_samples for s in result.steps) / result.makespan if result.makespan > 0 else math.nan


def band_ranges(case: PaperCase) -> tuple[ParamRange, ...]:
    """The uncalibrated parameters the case's speedup can move with (a rollout-throughput
    ratio does not depend on the training's)."""
    return tuple(r for r in RANGES if case.metric != "rollout" or r.part == "engine")


def replay(case: PaperCase, steps: int, scale: float, band: bool = True) -> dict:
    """Design over baseline on the case's workload: the speedup and, with `band`, its
    `speedup_band` over `band_ranges` (replays changing only training reuse the rollouts)."""
    work = workload_for(case, steps, scale)
    model = MODEL_PRESETS[case.model]
    sides = []
    for kind, params in ((case.baseline, {}), (case.design, case.params)):
        policy = make_policy({"kind": kind, "params": params, "minibatches": case.minibatches})
        sides.append((cluster_for(case, kind, scale), policy))
    caches: tuple[dict, dict] = ({}, {})
    engine = {r.name for r in RANGES if r.part == "engine"}

    def pair(overrides: dict[str, float]) -> float | None:
        cached = not engine & set(overrides)  # the engine unchanged: the rollouts are too
        base, design = (
            throughput(
                simulate(
                    work,
                    with_overrides(c, overrides),
                    model,
                    EngineLimits(),
                    p,
                    workers=1,
                    rollout_cache=cache if cached else None,
                ),
                case.metric,
            )
            for (c, p), cache in zip(sides, caches, strict=True)
        )
        return design / base if base > 0 and math.isfinite(design / base) else None

    point = pair({})
    out: dict[str, Any] = {
        "speedup": math.nan if point is None else point,
        "gpus": sides[1][0].n_gpus,
        "prompts": len(work[0].prompt_len) // case.n,
        "band": None,
    }
    if band and point is not None:
        out["band"] = speedup_band(point, pair, band_ranges(case))["band"]
    return out


def gap(case: PaperCase, speedup: float) -> float:
    """How far the replay is from the published figure: 0 inside its range, else the
    relative distance to its nearest end (negative below)."""
    if speedup < case.published_low:
        return speedup / case.published_low - 1
    if speedup > case.published_high:
        return speedup / case.published_high - 1
    return 0.0


def _factor(lo: float, hi: float) -> str:
    return f"{lo:.2f}x" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}x"


def verdict(case: PaperCase, speedup: float, band: list[float] | None = None) -> str:
    """Within ±25% of the published figure, or the unmodelled mechanisms with the gain
    they would have to add (below) or the factor the replay overstates by (above)."""
    if not math.isfinite(speedup):
        return "no result"
    g = gap(case, speedup)
    if abs(g) <= WITHIN:
        where = "inside its range" if g == 0 else f"{g:+.0%} from its nearest end"
        return f"within ±25% of the published figure ({where})"
    if g < 0:
        need = _factor(case.published_low / speedup, case.published_high / speedup)
        out = f"below ({g:+.0%}): {case.unmodelled}, not modelled here: would need a {need} gain beyond the replay"
    else:
        over = _factor(speedup / case.published_high, speedup / case.published_low)
        out = f"above ({g:+.0%}): {case.unmodelled}, not modelled here: the replay overstates it {over}"
    if band is not None and any(abs(gap(case, b)) <= WITHIN for b in band):
        out += "; the band reaches ±25%"
    return out


def setting_text(case: PaperCase, res: dict, steps: int) -> str:
    """The setting as replayed, and what the paper does not state."""
    layout = f"{res['gpus']} {case.gpu} (TP{case.tp}"
    if case.rollout_gpus:
        layout += f"; {case.rollout_gpus} of {case.gpus} roll out in the design"
    params = ", ".join(f"{k} {v}" for k, v in case.params.items()) or "registered defaults"
    text = (
        f"{case.model}, {layout}), {steps} steps x {res['prompts']} prompts x {case.n}, "
        f"cap {case.cap:,}, minibatches {case.minibatches}; {params}"
    )
    if case.assumed:
        text += "; assumed: " + "; ".join(case.assumed.values())
    missing = case.not_stated()
    return text + ("; not stated (shared default): " + ", ".join(missing) if missing else "")


def table(rows: list[tuple[PaperCase, dict]], steps: int) -> str:
    head = (
        "| design | paper | paper setting (as replayed) | published (measured at) | replayed [band] | verdict |\n"
        "|---|---|---|---|---|---|\n"
    )
    lines = []
    for case, res in rows:
        band = res["band"]
        shown = f"**{res['speedup']:.2f}x**" + (f" [{band[0]:.2f}-{band[1]:.2f}]" if band else "")
        lines.append(
            f"| `{case.design}` vs `{case.baseline}` | {case.paper} | {setting_text(case, res, steps)} "
            f"| {case.published} ({case.measured_at}) | {shown} ({case.metric}) "
            f"| {verdict(case, res['speedup'], band)} |"
        )
    return head + "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--scale", type=float, default=1.0, help="prompts per step (and GPUs) times this")
    ap.add_argument("--only", action="append", choices=[c.design for c in CASES])
    ap.add_argument("--no-band", action="store_true", help="skip the sensitivity band (one replay pair a row)")
    args = ap.parse_args(argv)
    rows = []
    t0 = time.perf_counter()
    for case in CASES:
        if args.only and case.design not in args.only:
            continue
        t = time.perf_counter()
        rows.append((case, replay(case, args.steps, args.scale, band=not args.no_band)))
        print(f"  {case.design}: {rows[-1][1]['speedup']:.2f}x in {time.perf_counter() - t:.0f} s", flush=True)
    out = table(rows, args.steps)
    print(out)
    print(f"\n{len(rows)} designs in {time.perf_counter() - t0:.0f} s")
    return out


if __name__ == "__main__":
    main()
