"""Read PolyTrace's fitted-parameter file and generate from it.

The file (``enhanced_task_distribution_parameters.json``, version 1.0) describes two
in-house workloads:

``math_task``
  ``input_distribution`` / ``output_distribution``: ``{"type": "lognorm", "parameters":
  [shape, loc, scale], "ks_statistic", "ks_p_value"}`` — scipy.stats.lognorm marginals
  of prompt and response length (tokens, linear scale);
  ``joint_distribution``: summary of a Gaussian mixture over (input, output): component
  count, overall mean vector and covariance, correlation, BIC;
  ``gmm_parameters``: ``weights`` (k), ``means`` (k × 2), ``covariances`` (k × 2 × 2)
  — the mixture itself, over linear token counts.
``tool_calling_task``
  ``call_count_distribution``: {calls per session: number of sessions};
  ``sequence_models``: per call count c, a Gaussian over ``feature_names`` =
  input_1..c, output_1..c, then derived totals/means/stds/max/min (``mean_vector``,
  ``covariance_matrix``; ``optimal_components`` records the size of a mixture that is
  not included, so generation uses this single Gaussian). input_i are the new tokens
  before call i (the prompt, then tool results), output_i the tokens generated for it.
``correlation_analysis``, ``quality_metrics``: correlations of sequence features with
  the call count, the math BIC and the covered call counts (informational).

Generation follows PolyTrace's reference generator: draw, round to integers, clip to
at least 1 token and at most `max_len` (32000 by default). `math_cdfs`/`tool_cdfs` give
the continuous CDFs the draws follow, for KS checks (see distributions.ks_discrete).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from core.workload.generate import GeneratedStep
from core.workload.gmm import GaussianMixture

DEFAULT_MAX_LEN = 32000


@dataclass
class SequenceModel:
    calls: int
    mean: np.ndarray  # (2c,) input_1..c, output_1..c
    cov: np.ndarray  # (2c, 2c)


@dataclass
class TaskParameters:
    """The parsed file. `math_*` may be None when the file has no math task, likewise
    `call_counts`/`sequences` for tool calling."""

    version: str
    math_input: tuple[float, float, float] | None
    math_output: tuple[float, float, float] | None
    math_gmm: GaussianMixture | None
    call_counts: dict[int, int]
    sequences: dict[int, SequenceModel]
    info: dict

    @property
    def tasks(self) -> list[str]:
        out = []
        if self.math_gmm is not None or self.math_output is not None:
            out.append("math")
        if self.sequences:
            out.append("tool_calling")
        return out


def _lognorm(d: dict | None, where: str) -> tuple[float, float, float] | None:
    if d is None:
        return None
    if d.get("type") != "lognorm":
        raise ValueError(f"{where}.type: only 'lognorm' is supported, got {d.get('type')!r}")
    p = d.get("parameters")
    if not isinstance(p, list) or len(p) != 3:
        raise ValueError(f"{where}.parameters: expected [shape, loc, scale]")
    shape, loc, scale = (float(x) for x in p)
    return shape, loc, scale


def load_parameters(d: dict) -> TaskParameters:
    """Parse and validate the file's JSON (raises ValueError naming the field)."""
    if not isinstance(d, dict):
        raise ValueError("parameters: expected a JSON object")
    math = d.get("math_task") or {}
    gmm = None
    if "gmm_parameters" in math:
        g = math["gmm_parameters"]
        try:
            w = np.asarray(g["weights"], float)
            mu = np.asarray(g["means"], float)
            cov = np.asarray(g["covariances"], float)
        except KeyError as exc:
            raise ValueError(f"math_task.gmm_parameters.{exc.args[0]}: required") from None
        if mu.shape != (w.size, 2) or cov.shape != (w.size, 2, 2):
            raise ValueError("math_task.gmm_parameters: means must be k×2 and covariances k×2×2")
        gmm = GaussianMixture(w / w.sum(), mu, cov)
    tool = d.get("tool_calling_task") or {}
    counts = {int(k): int(v) for k, v in (tool.get("call_count_distribution") or {}).items()}
    seqs = {}
    for k, m in (tool.get("sequence_models") or {}).items():
        c = int(m.get("call_count", k))
        names = m.get("feature_names", [])
        want = [f"input_{i}" for i in range(1, c + 1)] + [f"output_{i}" for i in range(1, c + 1)]
        if names[: 2 * c] != want:
            raise ValueError(f"tool_calling_task.sequence_models.{k}.feature_names: expected {want[:2]}... first")
        mean = np.asarray(m["mean_vector"], float)[: 2 * c]
        cov = np.asarray(m["covariance_matrix"], float)[: 2 * c, : 2 * c]
        seqs[c] = SequenceModel(c, mean, 0.5 * (cov + cov.T))
    return TaskParameters(
        version=str(d.get("version", "")),
        math_input=_lognorm(math.get("input_distribution"), "math_task.input_distribution"),
        math_output=_lognorm(math.get("output_distribution"), "math_task.output_distribution"),
        math_gmm=gmm,
        call_counts=counts,
        sequences=seqs,
        info={"extraction_info": d.get("extraction_info"), "quality_metrics": d.get("quality_metrics")},
    )


def _finish(x: np.ndarray, max_len: int) -> np.ndarray:
    return np.clip(np.round(x), 1, max_len).astype(np.int64)


def sample_math(
    p: TaskParameters, n: int, rng: np.random.Generator, *, mode: str = "gmm", max_len: int = DEFAULT_MAX_LEN
) -> tuple[np.ndarray, np.ndarray]:
    """(input, output) lengths of n independent math samples.

    mode "gmm": the joint mixture (keeps the input/output correlation);
    mode "marginal": the two lognormal marginals, independently."""
    if mode == "gmm":
        if p.math_gmm is None:
            raise ValueError("math_task.gmm_parameters: missing from the file")
        xy = p.math_gmm.sample(n, rng)
        return _finish(xy[:, 0], max_len), _finish(xy[:, 1], max_len)
    if mode == "marginal":
        if p.math_input is None or p.math_output is None:
            raise ValueError("math_task.input_distribution: missing from the file")
        x = stats.lognorm(*p.math_input).rvs(size=n, random_state=rng)
        y = stats.lognorm(*p.math_output).rvs(size=n, random_state=rng)
        return _finish(x, max_len), _finish(y, max_len)
    raise ValueError(f"mode: must be 'gmm' or 'marginal', got {mode!r}")


def math_cdfs(
    p: TaskParameters, mode: str = "gmm"
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """(input CDF, output CDF) of the continuous distributions `sample_math` draws from."""
    if mode == "gmm":
        gmm = p.math_gmm
        if gmm is None:
            raise ValueError("math_task.gmm_parameters: missing from the file")
        return (lambda v: gmm.marginal_cdf(v, 0)), (lambda v: gmm.marginal_cdf(v, 1))
    if p.math_input is None or p.math_output is None:
        raise ValueError("math_task.input_distribution: missing from the file")
    return stats.lognorm(*p.math_input).cdf, stats.lognorm(*p.math_output).cdf


def sample_call_counts(p: TaskParameters, n: int, rng: np.random.Generator) -> np.ndarray:
    calls = np.array(sorted(c for c in p.call_counts if c in p.sequences), np.int64)
    if calls.size == 0:
        raise ValueError("tool_calling_task: no call count has a sequence model")
    w = np.array([p.call_counts[c] for c in calls], float)
    return rng.choice(calls, size=n, p=w / w.sum())


def sample_tool_sessions(
    p: TaskParameters, n: int, rng: np.random.Generator, *, calls: int | None = None, max_len: int = DEFAULT_MAX_LEN
) -> list[tuple[np.ndarray, np.ndarray]]:
    """n sessions: per session (inputs per call, outputs per call). The number of
    calls follows the file's histogram, or is fixed to `calls`."""
    if calls is not None:
        draws = sample_tool_matrix(p, calls, n, rng, max_len=max_len)
        return [(d[:calls], d[calls:]) for d in draws]
    counts = sample_call_counts(p, n, rng)
    out: list = [None] * n
    for c in np.unique(counts):
        idx = np.flatnonzero(counts == c)
        m = p.sequences[int(c)]
        draws = rng.multivariate_normal(m.mean, m.cov, size=idx.size, method="eigh")
        draws = _finish(draws, max_len)
        for j, i in enumerate(idx):
            out[i] = (draws[j, :c], draws[j, c:])
    return out


def sample_tool_matrix(
    p: TaskParameters, calls: int, n: int, rng: np.random.Generator, *, max_len: int = DEFAULT_MAX_LEN
) -> np.ndarray:
    """(n, 2·calls) draws of input_1..c, output_1..c for sessions with `calls` calls."""
    if calls not in p.sequences:
        raise ValueError(f"calls: no sequence model for {calls} calls")
    m = p.sequences[calls]
    return _finish(rng.multivariate_normal(m.mean, m.cov, size=n, method="eigh"), max_len)


def tool_cdfs(p: TaskParameters, calls: int) -> list[Callable[[np.ndarray], np.ndarray]]:
    """Normal CDFs of input_i and output_i for sessions with `calls` calls."""
    m = p.sequences[calls]
    sd = np.sqrt(np.maximum(np.diag(m.cov), 1e-12))
    return [stats.norm(m.mean[i], sd[i]).cdf for i in range(2 * calls)]


def generate_from_parameters(
    p: TaskParameters,
    task: str,
    n_steps: int,
    groups: int,
    samples_per_group: int,
    *,
    seed: int = 0,
    mode: str = "gmm",
    max_len: int = DEFAULT_MAX_LEN,
    tool_latency_s: float = 0.0,
) -> list[GeneratedStep]:
    """Steps of `groups` × `samples_per_group` from the file.

    math: a group's samples share one prompt; each response is drawn from the mixture's
    conditional given that prompt (mode "gmm"), or independently (mode "marginal").
    tool_calling: every sample is a session drawn independently; its turns are the
    calls (input_i new tokens, output_i generated), with `tool_latency_s` per call."""
    rng = np.random.default_rng(seed)
    out = []
    n = groups * samples_per_group
    for s in range(n_steps):
        if task == "math":
            if mode == "gmm":
                gmm = p.math_gmm
                if gmm is None:
                    raise ValueError("math_task.gmm_parameters: missing from the file")
                px = gmm.marginal([0]).sample(groups, rng)[:, 0]
                px = np.clip(px, 1, None)
                y = gmm.conditional_sample(np.repeat(px, samples_per_group)[:, None], 1, rng)[:, 0]
                prompt = _finish(px, max_len)
                resp = _finish(y, max_len)
            else:
                x, resp = sample_math(p, n, rng, mode="marginal", max_len=max_len)
                prompt = x[::samples_per_group]
            out.append(GeneratedStep(s, prompt, list(resp.reshape(groups, samples_per_group)), task="math"))
        elif task == "tool_calling":
            sessions = sample_tool_sessions(p, n, rng, max_len=max_len)
            prompt = np.array([sessions[g * samples_per_group][0][0] for g in range(groups)], np.int64)
            responses, turns = [], []
            for g in range(groups):
                grp = sessions[g * samples_per_group : (g + 1) * samples_per_group]
                # a group shares its prompt: the first input of its first session
                traj = [
                    {
                        "input": [int(prompt[g])] + ins[1:].tolist(),
                        "output": outs.tolist(),
                        "tool_latency_s": [tool_latency_s] * (len(outs) - 1),
                    }
                    for ins, outs in grp
                ]
                turns.append(traj)
                responses.append(np.array([sum(t["output"]) + sum(t["input"][1:]) for t in traj], np.int64))
            out.append(GeneratedStep(s, prompt, responses, turns, task="tool_calling"))
        else:
            raise ValueError(f"task: must be one of {', '.join(p.tasks)}, got {task!r}")
    return out
