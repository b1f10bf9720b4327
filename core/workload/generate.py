"""Generate synthetic steps × groups × samples from a fitted `TaskLengthModel`.

Per step s (observed steps use their fitted parameters, later ones the linear trend):

1. prompts, one per group, from the joint mixture's prompt marginal;
2. responses given the group's prompt from the mixture's conditional, shifted by the
   step's log shift; the innovations of a group's samples share a group factor with
   the fitted intra-group correlation, and are stratified (normal quantiles of a random
   permutation) so a step's sample follows the distribution closely;
3. round(tail rate · n) samples from the far-tail lognormal and round(truncation
   rate · n) at the cap, at random positions;
4. with `match_step_means` (default), the body is rescaled so the step's mean equals
   the model's mean for that step (moment matching: it removes sampling noise from the
   per-step trend without changing the shape).

Multi-turn models also draw each trajectory's turns: the number of turns, tool calls
after every non-final turn with their response tokens and latency, and completion tokens
per turn (what is left of the sample's response length after the appended tool tokens,
split over the turns in proportion to lognormal draws).

`GeneratedStep` fields: step, prompt (per group), responses (list of arrays, one per
group), turns (multi-turn: per group, per sample, a dict with lists ``input`` (new
tokens before each turn: the prompt, then template + tool response tokens),
``output`` (completion tokens per turn) and ``tool_latency_s``), task.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from core.simulator.workload import StepWorkload
from core.workload.distributions import MarginalFit
from core.workload.fit import TaskLengthModel


@dataclass
class GeneratedStep:
    step: int
    prompt: np.ndarray
    responses: list[np.ndarray]
    turns: list[list[dict]] | None = None
    task: str = "default"

    @property
    def n_samples(self) -> int:
        return int(sum(r.size for r in self.responses))

    def to_step_workload(self) -> StepWorkload:
        """The step as the simulator replays it (multi-turn: prefix-cached turns)."""
        w = StepWorkload.from_groups(self.step, self.prompt, self.responses)
        if self.turns is None:
            return w
        sample, pt, ct, comp, tool = [], [], [], [], []
        k = 0
        for grp in self.turns:
            for traj in grp:
                ctx = 0
                for i, (inp, out) in enumerate(zip(traj["input"], traj["output"])):
                    sample.append(k)
                    cached = ctx
                    ctx += inp
                    pt.append(ctx)
                    ct.append(cached)
                    comp.append(out)
                    ctx += out
                    tool.append(traj["tool_latency_s"][i] if i < len(traj["tool_latency_s"]) else 0.0)
                k += 1
        w.turn_sample = np.asarray(sample, np.int64)
        w.turn_prompt_tokens = np.asarray(pt, np.int64)
        w.turn_cached_tokens = np.asarray(ct, np.int64)
        w.turn_completion_tokens = np.asarray(comp, np.int64)
        w.turn_tool_latency_s = np.asarray(tool, np.float64)
        return w


def _stratified_normals(n: int, rng: np.random.Generator) -> np.ndarray:
    """n standard-normal scores, one per quantile stratum, in random order."""
    u = (rng.permutation(n) + rng.random(n)) / n
    return ndtri(np.clip(u, 1e-12, 1 - 1e-12))


def _group_sizes(
    model: TaskLengthModel, n_groups: int, samples_per_group: int | None, rng: np.random.Generator
) -> np.ndarray:
    if samples_per_group is not None:
        return np.full(n_groups, int(samples_per_group), np.int64)
    sizes = np.array(sorted(model.group_sizes), np.int64)
    p = np.array([model.group_sizes[s] for s in sizes], float)
    return rng.choice(sizes, size=n_groups, p=p / p.sum())


def generate_steps(
    model: TaskLengthModel,
    n_steps: int,
    *,
    groups: int | None = None,
    samples_per_group: int | None = None,
    first_step: int | None = None,
    seed: int = 0,
    match_step_means: bool = True,
) -> list[GeneratedStep]:
    """`n_steps` steps starting at `first_step` (default: the first observed step)."""
    rng = np.random.default_rng(seed)
    start = int(model.trend.steps[0]) if first_step is None and model.trend.steps.size else int(first_step or 0)
    out = []
    for i in range(n_steps):
        s = start + i
        par = model.trend.at(s)
        ng = int(groups or par["groups"])
        sizes = _group_sizes(model, ng, samples_per_group, rng)
        prompt, resp = _draw_step(model, par, sizes, rng, match_step_means)
        bounds = np.cumsum(sizes)[:-1]
        responses = np.split(resp, bounds)
        turns = _draw_turns(model, prompt, responses, rng) if model.multiturn is not None else None
        out.append(GeneratedStep(s, prompt, responses, turns, model.task))
    return out


def _draw_step(
    model: TaskLengthModel, par: dict, sizes: np.ndarray, rng: np.random.Generator, match_mean: bool
) -> tuple[np.ndarray, np.ndarray]:
    ng, n = sizes.size, int(sizes.sum())
    g = model.joint
    log_prompt = g.marginal([0]).sample(ng, rng)[:, 0]
    prompt = np.maximum(np.round(np.exp(log_prompt)), 1).astype(np.int64)
    rho = model.intra_group_corr
    z = np.sqrt(rho) * np.repeat(_stratified_normals(ng, rng), sizes) + np.sqrt(1 - rho) * _stratified_normals(n, rng)
    ly = g.conditional_sample(np.repeat(log_prompt, sizes)[:, None], 1, rng, scores=z[:, None])[:, 0] + par["log_shift"]
    cap = model.max_response_len
    upper = min(model.tail_threshold or np.inf, cap or np.inf)
    hi = upper - 1 if np.isfinite(upper) else None
    body = np.clip(np.exp(ly), 1, hi)
    n_cap = int(round(par["truncation_rate"] * n)) if cap else 0
    n_tail = int(round(par["tail_rate"] * n)) if model.tail is not None else 0
    n_cap = min(n_cap, n)
    n_tail = min(n_tail, n - n_cap)
    special = rng.choice(n, n_cap + n_tail, replace=False)
    y = body.copy()
    is_body = np.ones(n, bool)
    is_body[special] = False
    if n_cap:
        y[special[:n_cap]] = cap
    if n_tail:
        assert model.tail is not None  # n_tail is 0 without a tail model
        lo = model.tail_threshold
        t = model.tail.sample(n_tail * 4 + 16, rng)
        t = t[(t >= lo) & (t < (cap or np.inf))]
        if t.size < n_tail:
            t = np.r_[t, np.full(n_tail - t.size, lo)]
        y[special[n_cap:]] = t[:n_tail]
    if match_mean and is_body.any():
        target = par["mean"] * n - y[~is_body].sum()
        cur = y[is_body].sum()
        if target > 0 and cur > 0:
            y[is_body] = np.clip(y[is_body] * float(np.clip(target / cur, 0.25, 4.0)), 1, hi)
    return prompt, np.maximum(np.round(y), 1).astype(np.int64)


def _draw_turns(
    model: TaskLengthModel, prompt: np.ndarray, responses: list[np.ndarray], rng: np.random.Generator
) -> list[list[dict]]:
    mt = model.multiturn
    assert mt is not None, "_draw_turns needs a multi-turn model"
    sizes = np.array([r.size for r in responses], np.int64)
    total = np.concatenate(responses) if responses else np.zeros(0, np.int64)
    n = total.size
    counts = np.array(sorted(mt.turns), np.int64)
    p = np.array([mt.turns[c] for c in counts], float)
    k = rng.choice(counts, size=n, p=p / p.sum())
    # tool calls after every non-final turn, their response tokens and latency
    n_tool_turns = int((k - 1).sum())
    calls = np.array(sorted(mt.calls_per_turn), np.int64) if mt.calls_per_turn else np.array([1])
    pc = np.array([mt.calls_per_turn[c] for c in calls], float) if mt.calls_per_turn else np.array([1.0])
    per_turn = rng.choice(calls, size=n_tool_turns, p=pc / pc.sum())
    n_calls = int(per_turn.sum())
    starts = np.r_[0, np.cumsum(per_turn)[:-1]] if n_tool_turns else np.zeros(0, np.int64)

    def per_turn_sum(fit: MarginalFit | None) -> np.ndarray:
        if fit is None or n_calls == 0:
            return np.zeros(n_tool_turns)
        v = fit.sample(n_calls, rng)
        out = np.add.reduceat(v, starts) if n_tool_turns else np.zeros(0)
        return np.where(per_turn > 0, out, 0.0)

    tool_tok = np.round(per_turn_sum(mt.tool_tokens) + mt.template_tokens).astype(np.int64)
    tool_lat = per_turn_sum(mt.tool_latency)
    share = mt.completion.sample(int(k.sum()), rng)
    out, i, t_pos, s_pos = [], 0, 0, 0
    for g, size in enumerate(sizes.tolist()):
        grp = []
        for _ in range(size):
            kk = int(k[i])
            tok = tool_tok[t_pos : t_pos + kk - 1]
            # the response length covers generated and appended tool tokens
            budget = max(kk, int(total[i]) - int(tok.sum()))
            sh = share[s_pos : s_pos + kk]
            comp = np.maximum(np.round(budget * sh / sh.sum()), 1).astype(np.int64)
            grp.append(
                {
                    "input": [int(prompt[g])] + tok.tolist(),
                    "output": comp.tolist(),
                    "tool_latency_s": tool_lat[t_pos : t_pos + kk - 1].tolist(),
                }
            )
            i += 1
            t_pos += kk - 1
            s_pos += kk
        out.append(grp)
    return out
