"""Replay each published RL-system design on a workload generated to its paper's setting
and print its published speedup next to the replayed one (a markdown table).

For every design (`CASES`): steps × prompts × responses per prompt with lognormal,
group-correlated response lengths capped at the paper's maximum response length
(`core.workload.synthetic.packed_length_rows`, the project's own generator), the
paper's model size and GPU count, replayed under the design (its registered defaults
plus only the parameters the paper states) and under its baseline in the same run.
Where a paper's setting is not stated in what we could read, every design uses the
same shared defaults (`DEFAULT_*`), so no design is tuned. The median response is the
cap / 14 for every design (about 600 tokens at an 8,192 cap, as the generator's own
default). Settings are scaled down (GPUs, prompts, steps) to keep the whole bench
under 10 minutes on a 2-core machine; each row says what was scaled.

Speedup: end-to-end samples trained per second of the design over its baseline's, or
rollout throughput (generated tokens per second of rollout) where the paper reports that.

    .venv/bin/python -m bench.papers [--steps 40] [--scale 1.0] [--only KIND]...

`--scale` multiplies prompts per step and GPUs together (so each replica's load stays
the paper's; at least two replicas), for a quick run (`--scale 0.05 --steps 2` is the
test's setting).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field

import numpy as np

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, SimResult, StepWorkload, simulate
from core.simulator.config import GPU_PRESETS
from core.simulator.policies import POLICIES, make_policy
from core.workload.synthetic import packed_length_rows

DEFAULT_PROMPTS = 512  # per step, when the paper's batch is not stated
DEFAULT_N = 8  # responses per prompt
DEFAULT_CAP = 8192  # max response length
DEFAULT_GPUS = 64
MEDIAN_PER_CAP = 1 / 14  # the median response, as a fraction of the cap (every design)


@dataclass(frozen=True)
class PaperCase:
    design: str  # the registered policy kind
    paper: str
    published: str  # as the paper states it
    published_low: float  # the range as speedup factors (low, high)
    published_high: float  # an "up to" figure: low is 1.0
    metric: str  # "end-to-end" or "rollout"
    baseline: str = "sync"
    model: str = "Qwen2.5-7B"
    gpu: str = "H800"
    gpus: int = DEFAULT_GPUS  # as replayed (the paper's count or scaled down, see `scaled`)
    prompts: int = DEFAULT_PROMPTS
    n: int = DEFAULT_N
    cap: int = DEFAULT_CAP
    tp: int = 4
    params: dict = field(default_factory=dict)  # only what the paper states
    setting: str = ""  # the paper's setting, as stated
    scaled: str = ""  # what the replay scales down


CASES: tuple[PaperCase, ...] = (
    PaperCase(
        "tail_batching",
        "RollPacker (NSDI'26, arXiv 2509.21009)",
        "2.03-2.56x end-to-end over veRL",
        2.03,
        2.56,
        "end-to-end",
        gpus=128,
        setting="Qwen2.5 family (7B-32B), up to 128 H800; batch and cap not stated in the abstract: shared defaults",
    ),
    PaperCase(
        "partial",
        "APRIL (arXiv 2509.18521, in slime)",
        "+22.5% mean, up to +44% rollout throughput",
        1.225,
        1.44,
        "rollout",
        params={"over_provision": 2.0},
        setting="GRPO/DAPO/GSPO in slime, over-sampling about 2x the rollout batch; model, GPUs, batch: shared defaults",
    ),
    PaperCase(
        "divided",
        "Seer (arXiv 2511.14617)",
        "+74-97% rollout throughput (up to 2.04x)",
        1.74,
        2.04,
        "rollout",
        model="Qwen2.5-72B",
        gpus=128,
        prompts=600,
        n=16,
        cap=40960,
        tp=8,
        setting="Qwen2-VL-72B on 128 H800, 600 prompts x 16 per iteration, max generation 40,960 (72B text model stands in)",
    ),
    PaperCase(
        "length_ranked",
        "StreamRL (arXiv 2504.15930)",
        "up to 2.66x throughput over existing (verl) systems",
        1.0,
        2.66,
        "end-to-end",
        setting="disaggregated, Qwen2.5 7B-72B, output-length ranker; batch, cap, GPUs: shared defaults",
    ),
    PaperCase(
        "laminar",
        "Laminar (arXiv 2510.12633)",
        "up to 5.48x training throughput at 1,024 GPUs",
        1.0,
        5.48,
        "end-to-end",
        gpus=128,
        setting="up to 1,024 GPUs, math reasoning, against synchronous and asynchronous verl; batch, cap: shared defaults",
        scaled="1,024 GPUs -> 128",
    ),
    PaperCase(
        "async",
        "verl fully async trainer (verl docs)",
        "2.35-2.67x over colocated sync",
        2.35,
        2.67,
        "end-to-end",
        gpus=128,
        setting="Qwen2.5-7B on 128 GPUs, rollout and trainer pools split; batch, cap: shared defaults",
    ),
    PaperCase(
        "one_step_off",
        "verl one-step-off-policy (verl docs)",
        "+23-40% over colocated sync",
        1.23,
        1.40,
        "end-to-end",
        setting="rollout one step ahead on its own GPUs; model, GPUs, batch: shared defaults",
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
    out on every GPU, disaggregated ones split them in half (as bench.replay does)."""
    gpus = max(2 * case.tp, 2 * case.tp * round(case.gpus * min(1.0, scale) / (2 * case.tp)))
    gpu = GPU_PRESETS[case.gpu]
    if POLICIES[kind].disaggregated:
        half = gpus // 2
        return ClusterConfig(gpu=gpu, n_gpus=gpus, rollout_replicas=half // case.tp, rollout_tp=case.tp, train_dp=half)
    return ClusterConfig(gpu=gpu, n_gpus=gpus, rollout_replicas=gpus // case.tp, rollout_tp=case.tp, train_dp=gpus)


def throughput(result: SimResult, metric: str) -> float:
    """Samples trained per second (end-to-end), or tokens decoded per rollout second (the
    engines' work in the rollout windows: an aborted sample's tokens count when made)."""
    if metric == "rollout":
        rollout_s = result.stage_totals()["rollout"]
        decoded = sum(s.rollout.get("decoded_tokens", 0) for s in result.steps)
        return decoded / rollout_s if rollout_s > 0 else math.nan
    return sum(s.n_samples for s in result.steps) / result.makespan if result.makespan > 0 else math.nan


def replay(case: PaperCase, steps: int, scale: float) -> dict:
    work = workload_for(case, steps, scale)
    model = MODEL_PRESETS[case.model]
    out = {}
    for kind, params in ((case.baseline, {}), (case.design, case.params)):
        cluster = cluster_for(case, kind, scale)
        policy = make_policy({"kind": kind, "params": params})
        r = simulate(work, cluster, model, EngineLimits(), policy, workers=1)
        out[kind] = {"throughput": throughput(r, case.metric), "gpus": cluster.n_gpus}
    base = out[case.baseline]["throughput"]
    speedup = out[case.design]["throughput"] / base if base > 0 else math.nan
    return {"speedup": speedup, "gpus": out[case.design]["gpus"], "prompts": len(work[0].prompt_len) // case.n}


def verdict(case: PaperCase, speedup: float) -> str:
    """Where the replay falls against the published range (an "up to" figure: its top)."""
    if not math.isfinite(speedup):
        return "no result"
    lo, hi = case.published_low, case.published_high
    if lo == 1.0 and speedup >= 1.0:
        return (
            f"a gain, {speedup / hi:.2f} of the published maximum" if speedup <= hi else "above the published maximum"
        )
    if lo <= speedup <= hi:
        return "within the published range"
    if speedup < lo:
        return f"below it ({speedup / lo:.2f} of its low end)"
    return f"above it ({speedup / hi:.2f}x its top)"


def table(rows: list[tuple[PaperCase, dict]], steps: int) -> str:
    head = "| design | paper | paper setting | published | replayed | note |\n|---|---|---|---|---|---|\n"
    lines = []
    for case, res in rows:
        ran = f"replayed: {case.model}, {res['gpus']} {case.gpu}, {steps} steps x {res['prompts']} x {case.n}, cap {case.cap:,}"
        scaled = f"; scaled: {case.scaled}" if case.scaled else ""
        lines.append(
            f"| `{case.design}` vs `{case.baseline}` | {case.paper} | {case.setting} | {case.published} "
            f"| **{res['speedup']:.2f}x** ({case.metric}) | {verdict(case, res['speedup'])}; {ran}{scaled} |"
        )
    return head + "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--scale", type=float, default=1.0, help="prompts per step (and GPUs) times this")
    ap.add_argument("--only", action="append", choices=[c.design for c in CASES])
    args = ap.parse_args(argv)
    rows = []
    t0 = time.perf_counter()
    for case in CASES:
        if args.only and case.design not in args.only:
            continue
        t = time.perf_counter()
        rows.append((case, replay(case, args.steps, args.scale)))
        print(f"  {case.design}: {rows[-1][1]['speedup']:.2f}x in {time.perf_counter() - t:.0f} s", flush=True)
    out = table(rows, args.steps)
    print(out)
    print(f"\n{len(rows)} designs in {time.perf_counter() - t0:.0f} s")
    return out


if __name__ == "__main__":
    main()
