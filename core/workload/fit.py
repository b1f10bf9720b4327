"""Fit a per-task length model to a trace's columns (the workload generator's input).

`fit_workload(samples, turns=None, tool_calls=None)` returns one `TaskLengthModel` per
task (the ``task`` column; "default" when absent). A model holds:

- marginals: lognormal and gamma fits of prompt and response lengths, each with its KS
  statistic against the data (`report()` lists them all);
- joint: a Gaussian mixture over (log prompt, log response − step shift), the number of
  components chosen by BIC (EM in numpy), with the KS statistics of its two marginals;
- trend: per observed step the shift of mean log response length, the mean response
  length, the truncation rate (share at the cap) and the far-tail rate; plus linear
  trends (tokens per step, log-shift per step) used beyond the observed steps;
- far tail: responses above max(p99.5, exp(median + 4·sd) of log length) that are not
  truncated, as a lognormal — rare outliers a mixture would smear out;
- group structure: samples-per-group histogram, groups per step, and the intra-group
  correlation of log response length;
- multi-turn (when turns are given): turns per trajectory, tool calls per non-final
  turn, completion tokens per turn, tool response tokens and tool latency per call
  (lognormal, with KS), and the template tokens added per turn.

Everything is plain numbers: `to_dict()`/`from_dict()` round-trip through JSON, and the
model contains no sample of the original data beyond per-step aggregates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from core.workload.distributions import MarginalFit, fit_marginal, icc_log
from core.workload.gmm import GaussianMixture, fit_gmm

GMM_MAX_POINTS = 20_000


@dataclass
class StepTrend:
    steps: np.ndarray
    log_shift: np.ndarray
    mean: np.ndarray
    truncation_rate: np.ndarray
    tail_rate: np.ndarray
    groups: np.ndarray
    slope_mean: float = 0.0
    intercept_mean: float = 0.0
    slope_log: float = 0.0
    intercept_log: float = 0.0

    @classmethod
    def fit(
        cls,
        steps: npt.ArrayLike,
        log_shift: npt.ArrayLike,
        mean: npt.ArrayLike,
        trunc: npt.ArrayLike,
        tail: npt.ArrayLike,
        groups: npt.ArrayLike,
    ) -> StepTrend:
        t = cls(
            np.asarray(steps, np.int64),
            np.asarray(log_shift, float),
            np.asarray(mean, float),
            np.asarray(trunc, float),
            np.asarray(tail, float),
            np.asarray(groups, np.int64),
        )
        if t.steps.size >= 2:
            t.slope_mean, t.intercept_mean = (float(v) for v in np.polyfit(t.steps, t.mean, 1))
            t.slope_log, t.intercept_log = (float(v) for v in np.polyfit(t.steps, t.log_shift, 1))
        elif t.steps.size == 1:
            t.intercept_mean, t.intercept_log = float(t.mean[0]), float(t.log_shift[0])
        return t

    def at(self, step: int) -> dict:
        """Per-step parameters: the observed ones, else the linear trend (rates: mean)."""
        hit = np.flatnonzero(self.steps == step)
        if hit.size:
            i = hit[0]
            return {
                "log_shift": self.log_shift[i],
                "mean": self.mean[i],
                "truncation_rate": self.truncation_rate[i],
                "tail_rate": self.tail_rate[i],
                "groups": int(self.groups[i]),
            }
        return {
            "log_shift": self.intercept_log + self.slope_log * step,
            "mean": max(1.0, self.intercept_mean + self.slope_mean * step),
            "truncation_rate": float(self.truncation_rate.mean()) if self.steps.size else 0.0,
            "tail_rate": float(self.tail_rate.mean()) if self.steps.size else 0.0,
            "groups": int(np.median(self.groups)) if self.steps.size else 1,
        }

    def to_dict(self) -> dict:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict) -> StepTrend:
        def scalar(k: str) -> float:
            return float(d.get(k, 0.0))

        return cls(
            steps=np.asarray(d["steps"]),
            log_shift=np.asarray(d["log_shift"]),
            mean=np.asarray(d["mean"]),
            truncation_rate=np.asarray(d["truncation_rate"]),
            tail_rate=np.asarray(d["tail_rate"]),
            groups=np.asarray(d["groups"]),
            slope_mean=scalar("slope_mean"),
            intercept_mean=scalar("intercept_mean"),
            slope_log=scalar("slope_log"),
            intercept_log=scalar("intercept_log"),
        )


@dataclass
class MultiTurnModel:
    turns: dict[int, int]  # turns per trajectory -> count
    calls_per_turn: dict[int, int]  # tool calls after a non-final turn -> count
    completion: MarginalFit
    tool_tokens: MarginalFit | None
    tool_latency: MarginalFit | None
    template_tokens: float = 0.0

    def to_dict(self) -> dict:
        return {
            "turns": {str(k): v for k, v in self.turns.items()},
            "calls_per_turn": {str(k): v for k, v in self.calls_per_turn.items()},
            "completion": self.completion.to_dict(),
            "tool_tokens": self.tool_tokens.to_dict() if self.tool_tokens else None,
            "tool_latency": self.tool_latency.to_dict() if self.tool_latency else None,
            "template_tokens": self.template_tokens,
        }

    @classmethod
    def from_dict(cls, d: dict) -> MultiTurnModel:
        def opt(x: dict | None) -> MarginalFit | None:
            return MarginalFit.from_dict(x) if x else None

        return cls(
            {int(k): int(v) for k, v in d["turns"].items()},
            {int(k): int(v) for k, v in d["calls_per_turn"].items()},
            MarginalFit.from_dict(d["completion"]),
            opt(d.get("tool_tokens")),
            opt(d.get("tool_latency")),
            float(d.get("template_tokens", 0.0)),
        )


@dataclass
class TaskLengthModel:
    task: str
    n_samples: int
    max_response_len: int | None
    prompt_fits: dict[str, MarginalFit]
    response_fits: dict[str, MarginalFit]
    joint: GaussianMixture
    joint_ks: dict[str, float]
    body_log_mean: float
    tail_threshold: float | None
    tail: MarginalFit | None
    group_sizes: dict[int, int]
    intra_group_corr: float
    trend: StepTrend
    multiturn: MultiTurnModel | None = None
    extra: dict = field(default_factory=dict)

    def report(self) -> dict:
        """Fit quality: KS statistic of every fitted distribution, and the trend."""
        out = {
            "task": self.task,
            "n_samples": self.n_samples,
            "prompt": {k: f.ks for k, f in self.prompt_fits.items()},
            "response": {k: f.ks for k, f in self.response_fits.items()},
            "joint_gmm": {"components": self.joint.k, **{f"ks_{k}": v for k, v in self.joint_ks.items()}},
            "tail": {
                "threshold": self.tail_threshold,
                "ks": self.tail.ks if self.tail else None,
                "rate": float(self.trend.tail_rate.mean()) if self.trend.steps.size else 0.0,
            },
            # the share at the length cap; None (unknown, not 0) when no cap is known
            "truncation_rate": float(self.trend.truncation_rate.mean())
            if self.trend.steps.size and self.max_response_len
            else None,
            "max_response_len": self.max_response_len,
            "intra_group_corr": self.intra_group_corr,
            "trend": {"mean_tokens_per_step": self.trend.slope_mean, "log_shift_per_step": self.trend.slope_log},
        }
        if self.multiturn is not None:
            mt = self.multiturn
            out["multiturn"] = {
                "completion": mt.completion.ks,
                "tool_tokens": mt.tool_tokens.ks if mt.tool_tokens else None,
                "tool_latency": mt.tool_latency.ks if mt.tool_latency else None,
            }
        return out

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "n_samples": self.n_samples,
            "max_response_len": self.max_response_len,
            "prompt_fits": {k: f.to_dict() for k, f in self.prompt_fits.items()},
            "response_fits": {k: f.to_dict() for k, f in self.response_fits.items()},
            "joint": self.joint.to_dict(),
            "joint_ks": self.joint_ks,
            "body_log_mean": self.body_log_mean,
            "tail_threshold": self.tail_threshold,
            "tail": self.tail.to_dict() if self.tail else None,
            "group_sizes": {str(k): v for k, v in self.group_sizes.items()},
            "intra_group_corr": self.intra_group_corr,
            "trend": self.trend.to_dict(),
            "multiturn": self.multiturn.to_dict() if self.multiturn else None,
        }

    @classmethod
    def from_dict(cls, d: dict) -> TaskLengthModel:
        return cls(
            task=d["task"],
            n_samples=int(d["n_samples"]),
            max_response_len=d.get("max_response_len"),
            prompt_fits={k: MarginalFit.from_dict(v) for k, v in d["prompt_fits"].items()},
            response_fits={k: MarginalFit.from_dict(v) for k, v in d["response_fits"].items()},
            joint=GaussianMixture.from_dict(d["joint"]),
            joint_ks=dict(d["joint_ks"]),
            body_log_mean=float(d["body_log_mean"]),
            tail_threshold=d.get("tail_threshold"),
            tail=MarginalFit.from_dict(d["tail"]) if d.get("tail") else None,
            group_sizes={int(k): int(v) for k, v in d["group_sizes"].items()},
            intra_group_corr=float(d["intra_group_corr"]),
            trend=StepTrend.from_dict(d["trend"]),
            multiturn=MultiTurnModel.from_dict(d["multiturn"]) if d.get("multiturn") else None,
        )


def detect_cap(response: np.ndarray) -> int | None:
    """The response cap when the maximum occurs more than once (truncated samples)."""
    if response.size == 0:
        return None
    top = int(response.max())
    return top if int((response == top).sum()) >= 2 else None


def _choose_gmm(X: np.ndarray, max_components: int, seed: int) -> GaussianMixture:
    rng = np.random.default_rng(seed)
    if X.shape[0] > GMM_MAX_POINTS:
        X = X[rng.choice(X.shape[0], GMM_MAX_POINTS, replace=False)]
    best: tuple[float, GaussianMixture] | None = None
    for k in range(1, min(max_components, X.shape[0]) + 1):
        g = fit_gmm(X, k, seed=seed, max_iter=200, tol=1e-6, reg=1e-3)
        bic = g.bic(X)
        if best is None or bic < best[0]:
            best = (bic, g)
    if best is None:
        raise ValueError(f"_choose_gmm: no mixture to fit ({X.shape[0]} points, max_components={max_components})")
    return best[1]


def _ks_vs_cdf(values: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    from scipy import stats

    v = values if values.size <= 200_000 else np.sort(values)[np.linspace(0, values.size - 1, 200_000).astype(np.int64)]
    # scipy-stubs type a cdf as float -> float; kstest calls it once on the whole array
    return float(stats.kstest(v, cdf).statistic)  # type: ignore[arg-type]


def fit_task(
    step: np.ndarray,
    group: np.ndarray,
    prompt: np.ndarray,
    response: np.ndarray,
    *,
    task: str = "default",
    max_response_len: int | None = None,
    max_components: int = 6,
    seed: int = 0,
) -> TaskLengthModel:
    """Fit one task's model from per-sample arrays (samples of a group contiguous)."""
    step = np.asarray(step, np.int64)
    group = np.asarray(group, np.int64)
    prompt = np.maximum(np.asarray(prompt, np.float64), 1)
    response = np.maximum(np.asarray(response, np.float64), 1)
    if response.size < 8:
        raise ValueError(f"task {task!r}: need at least 8 samples to fit, got {response.size}")
    cap = max_response_len if max_response_len is not None else detect_cap(response)
    capped = response >= cap if cap else np.zeros(response.size, bool)
    logr = np.log(response)
    thr = float(max(np.quantile(response, 0.995), np.exp(np.median(logr) + 4 * logr.std())))
    tail = (response >= thr) & ~capped
    body = ~tail & ~capped
    if body.sum() < 8:
        body = ~capped if (~capped).sum() >= 8 else np.ones(response.size, bool)
        tail[:] = False
    body_mean = float(logr[body].mean())
    # per-step trend
    steps = np.unique(step)
    shift = np.zeros(steps.size)
    means, trunc, tails, groups = (np.zeros(steps.size) for _ in range(4))
    step_shift = np.zeros(response.size)
    for i, s in enumerate(steps):
        m = step == s
        b = m & body
        shift[i] = logr[b].mean() - body_mean if b.any() else 0.0
        step_shift[m] = shift[i]
        means[i] = response[m].mean()
        trunc[i] = capped[m].mean()
        tails[i] = tail[m].mean()
        groups[i] = np.unique(group[m]).size
    trend = StepTrend.fit(steps, shift, means, trunc, tails, groups)
    # joint mixture over (log prompt, log response - step shift)
    X = np.c_[np.log(prompt[body]), logr[body] - step_shift[body]]
    joint = _choose_gmm(X, max_components, seed)
    joint_ks = {
        "prompt": _ks_vs_cdf(X[:, 0], lambda v: joint.marginal_cdf(v, 0)),
        "response": _ks_vs_cdf(X[:, 1], lambda v: joint.marginal_cdf(v, 1)),
    }
    tail_fit = fit_marginal(response[tail], "lognorm") if tail.sum() >= 2 else None
    # group structure
    key = step * (group.max() + 1) + group
    bounds = np.flatnonzero(np.diff(key)) + 1
    sizes = np.diff(np.r_[0, bounds, key.size])
    size_hist = {int(k): int(v) for k, v in zip(*np.unique(sizes, return_counts=True))}
    clipped = np.minimum(response, thr)
    icc = icc_log(np.split(clipped, bounds))
    return TaskLengthModel(
        task=task,
        n_samples=int(response.size),
        max_response_len=int(cap) if cap else None,
        prompt_fits={k: fit_marginal(prompt, k) for k in ("lognorm", "gamma")},
        response_fits={k: fit_marginal(response, k) for k in ("lognorm", "gamma")},
        joint=joint,
        joint_ks=joint_ks,
        body_log_mean=body_mean,
        tail_threshold=thr if tail_fit else None,
        tail=tail_fit,
        group_sizes=size_hist,
        intra_group_corr=icc,
        trend=trend,
    )


def fit_multiturn(turns: dict, tool_calls: dict | None) -> MultiTurnModel:
    """Turn and tool-call structure from ``turns``/``tool_calls`` columns."""
    step = np.asarray(turns["step"], np.int64)
    grp = np.asarray(turns["group_idx"], np.int64)
    smp = np.asarray(turns["sample_idx"], np.int64)
    tn = np.asarray(turns["turn"], np.int64)
    order = np.lexsort((tn, smp, grp, step))
    key = ((step << 42) | (grp << 21) | smp)[order]
    comp = np.asarray(turns["completion_tokens"], np.float64)[order]
    prompt_tok = np.asarray(turns["prompt_tokens"], np.float64)[order]
    starts = np.r_[0, np.flatnonzero(np.diff(key)) + 1]
    per_traj = np.diff(np.r_[starts, key.size])
    turns_hist = {int(k): int(v) for k, v in zip(*np.unique(per_traj, return_counts=True))}
    last = np.zeros(key.size, bool)
    last[np.r_[starts[1:], key.size] - 1] = True
    calls_hist: dict[int, int] = {1: int((~last).sum())} if (~last).any() else {}
    tool_tok = tool_lat = None
    template = 0.0
    if tool_calls is not None and len(tool_calls.get("step", [])):
        ckey = (
            (np.asarray(tool_calls["step"], np.int64) << 42)
            | (np.asarray(tool_calls["group_idx"], np.int64) << 21)
            | np.asarray(tool_calls["sample_idx"], np.int64)
        )
        cturn = np.asarray(tool_calls["turn"], np.int64)
        k2 = ckey * 64 + np.minimum(cturn, 63)
        t2 = key * 64 + np.minimum(tn[order], 63)
        k2s = np.sort(k2)
        counts = np.searchsorted(k2s, t2[~last], side="right") - np.searchsorted(k2s, t2[~last], side="left")
        calls_hist = {int(k): int(v) for k, v in zip(*np.unique(counts, return_counts=True))}
        resp_tok = np.asarray(tool_calls.get("response_tokens", np.zeros(ckey.size)), np.float64)
        if (resp_tok > 0).sum() >= 2:
            tool_tok = fit_marginal(resp_tok[resp_tok > 0], "lognorm")
        lat = np.asarray(tool_calls["latency_s"], np.float64)
        lat = lat[np.isfinite(lat) & (lat > 0)]
        if lat.size >= 2:
            tool_lat = fit_marginal(lat, "lognorm")
        # template tokens per turn: prompt growth not explained by completion + tool text
        tool_per_turn = np.zeros(key.size)
        pos = np.searchsorted(t2, k2)
        hit = (pos < t2.size) & (t2[np.minimum(pos, t2.size - 1)] == k2)
        np.add.at(tool_per_turn, pos[hit], resp_tok[hit])
        nxt = ~last
        growth = (
            prompt_tok[1:][nxt[:-1]] - prompt_tok[:-1][nxt[:-1]] - comp[:-1][nxt[:-1]] - tool_per_turn[:-1][nxt[:-1]]
        )
        template = float(max(0.0, np.median(growth))) if growth.size else 0.0
    return MultiTurnModel(
        turns_hist, calls_hist, fit_marginal(np.maximum(comp, 1), "lognorm"), tool_tok, tool_lat, template
    )


def fit_workload(
    samples: dict,
    turns: dict | None = None,
    tool_calls: dict | None = None,
    *,
    max_response_len: int | None = None,
    max_components: int = 6,
    seed: int = 0,
) -> dict[str, TaskLengthModel]:
    """One model per task from the bulk tables' columns (validation rows dropped)."""
    for n in ("step", "group_idx", "sample_idx", "prompt_len", "response_len"):
        if n not in samples:
            raise ValueError(f"samples.{n}: required column missing")
    step = np.asarray(samples["step"], np.int64)
    keep = np.ones(step.size, bool)
    if "validate" in samples:
        keep &= ~np.asarray(samples["validate"], bool)
    grp = np.asarray(samples["group_idx"], np.int64)
    smp = np.asarray(samples["sample_idx"], np.int64)
    order = np.lexsort((smp, grp, step))
    order = order[keep[order]]
    tasks = (
        np.asarray(samples["task"], dtype=object)[order]
        if "task" in samples
        else np.full(order.size, "default", dtype=object)
    )
    out = {}
    for task in sorted(set(tasks.tolist()), key=str):
        m = order[tasks == task]
        out[str(task)] = fit_task(
            step[m],
            grp[m],
            np.asarray(samples["prompt_len"])[m],
            np.asarray(samples["response_len"])[m],
            task=str(task),
            max_response_len=max_response_len,
            max_components=max_components,
            seed=seed,
        )
    if turns is not None and len(turns.get("step", [])) and len(out) == 1:
        next(iter(out.values())).multiturn = fit_multiturn(turns, tool_calls)
    return out
