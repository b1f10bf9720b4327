"""One training step's recorded workload, as the simulator replays it.

`StepWorkload` is columnar: one entry per sample (a rollout response) with its prompt
group, plus optional per-turn rows for multi-turn trajectories, per-rank reward times,
measured stage timings and measured trajectory latencies.

`workload_from_columns` builds the list of steps from the plain column dicts named in
backend/formats/base.py (``samples``, ``turns``, ``tool_calls``, ``rank_timings``,
``steps``), as read back from the database or straight from a reader. Missing values may
be NaN (floats) or -1 (ints), the sentinels used when reading columns back.

Fields of `StepWorkload` (arrays are numpy, one entry per sample unless noted):
  step                 the training step
  group                dense prompt-group index 0..n_groups-1, samples sorted by group
  prompt_len           prompt tokens
  response_len         response tokens (for multi-turn: the final response incl. tool text)
  dp_rank              recorded data-parallel rank, or None
  turn_*               multi-turn only, one row per generation request sorted by
                       (sample, turn): turn_sample (sample index), turn_prompt_tokens,
                       turn_cached_tokens, turn_completion_tokens, turn_tool_latency_s
                       (tool latency after that turn, summed over its calls),
                       turn_engine_latency_s (measured, NaN when unknown)
  reward_time_by_rank  measured reward seconds per rank (phase "reward"), or None
  timings              measured stage seconds: t_gen, t_reward, ..., t_step (present keys only)
  sample_latency_s     measured trajectory latency: summed turn latencies + tool latencies
  max_response_len     the response cap, when known
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from core.analysis.tables import STEP_TIMING_COLUMNS


@dataclass
class StepWorkload:
    step: int
    group: np.ndarray
    prompt_len: np.ndarray
    response_len: np.ndarray
    dp_rank: np.ndarray | None = None
    turn_sample: np.ndarray | None = None
    turn_prompt_tokens: np.ndarray | None = None
    turn_cached_tokens: np.ndarray | None = None
    turn_completion_tokens: np.ndarray | None = None
    turn_tool_latency_s: np.ndarray | None = None
    turn_engine_latency_s: np.ndarray | None = None
    reward_time_by_rank: np.ndarray | None = None
    timings: dict[str, float] = field(default_factory=dict)
    sample_latency_s: np.ndarray | None = None
    max_response_len: int | None = None

    @property
    def n_samples(self) -> int:
        return int(self.prompt_len.size)

    @property
    def n_groups(self) -> int:
        return int(self.group[-1]) + 1 if self.group.size else 0

    @property
    def is_multiturn(self) -> bool:
        return self.turn_sample is not None

    @property
    def total_len(self) -> np.ndarray:
        """Tokens per training sequence (prompt + response)."""
        return self.prompt_len + self.response_len

    @property
    def generated_tokens(self) -> int:
        """Tokens the rollout engine generates (completion tokens over all turns)."""
        if self.turn_sample is not None:  # is_multiturn
            assert self.turn_completion_tokens is not None, "multi-turn steps have turn_completion_tokens"
            return int(self.turn_completion_tokens.sum())
        return int(self.response_len.sum())

    @property
    def measured_rollout_s(self) -> float | None:
        """Measured rollout time: t_gen, else the slowest measured trajectory."""
        if "t_gen" in self.timings:
            return self.timings["t_gen"]
        if self.sample_latency_s is not None and np.isfinite(self.sample_latency_s).any():
            return float(np.nanmax(self.sample_latency_s))
        return None

    def group_slices(self) -> np.ndarray:
        """Start index of every group plus the end: samples of group g are [s[g], s[g+1])."""
        return np.searchsorted(self.group, np.arange(self.n_groups + 1))

    @classmethod
    def from_groups(
        cls, step: int, prompt_lens: npt.ArrayLike, response_lens: Sequence[np.ndarray | Sequence[int]], **extra: Any
    ) -> StepWorkload:
        """From a prompt length per group and a list of response lengths per group."""
        sizes = np.array([len(r) for r in response_lens], dtype=np.int64)
        group = np.repeat(np.arange(sizes.size), sizes)
        prompt = np.repeat(np.asarray(prompt_lens, dtype=np.int64), sizes)
        resp = (
            np.concatenate([np.asarray(r, dtype=np.int64) for r in response_lens])
            if sizes.size
            else np.zeros(0, np.int64)
        )
        return cls(step=int(step), group=group, prompt_len=prompt, response_len=resp, **extra)

    def subset_groups(self, groups: np.ndarray) -> StepWorkload:
        """A step with only the given groups (renumbered 0..k-1 in the given order)."""
        starts = self.group_slices()
        idx = (
            np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups])
            if len(groups)
            else np.zeros(0, np.int64)
        )
        sizes = starts[np.asarray(groups) + 1] - starts[np.asarray(groups)] if len(groups) else np.zeros(0, np.int64)
        out = StepWorkload(
            step=self.step,
            group=np.repeat(np.arange(len(groups)), sizes),
            prompt_len=self.prompt_len[idx],
            response_len=self.response_len[idx],
            dp_rank=None if self.dp_rank is None else self.dp_rank[idx],
            sample_latency_s=None if self.sample_latency_s is None else self.sample_latency_s[idx],
            max_response_len=self.max_response_len,
        )
        if self.is_multiturn:
            remap = np.full(self.n_samples, -1, dtype=np.int64)
            remap[idx] = np.arange(idx.size)
            new_sample = remap[self.turn_sample]
            keep = new_sample >= 0
            order = np.argsort(new_sample[keep], kind="stable")
            rows = np.flatnonzero(keep)[order]
            out.turn_sample = new_sample[rows]
            for name in (
                "turn_prompt_tokens",
                "turn_cached_tokens",
                "turn_completion_tokens",
                "turn_tool_latency_s",
                "turn_engine_latency_s",
            ):
                v = getattr(self, name)
                setattr(out, name, None if v is None else v[rows])
        return out


def _col(cols: dict, name: str, dtype: npt.DTypeLike | None = None) -> Any:
    # Any: None only for an absent optional column, which callers test; required
    # columns passed _require first
    v = cols.get(name)
    if v is None:
        return None
    return np.asarray(v, dtype=dtype) if dtype is not None else np.asarray(v)


def _require(cols: dict, table: str, names: tuple[str, ...]) -> None:
    for n in names:
        if n not in cols or cols[n] is None:
            raise ValueError(f"{table}.{n}: required column missing")
    lengths = {len(cols[n]) for n in names}
    if len(lengths) > 1:
        raise ValueError(f"{table}: columns have different lengths")


def workload_from_columns(
    samples: dict,
    turns: dict | None = None,
    tool_calls: dict | None = None,
    rank_timings: dict | None = None,
    steps: dict | None = None,
    *,
    include_validate: bool = False,
    max_response_len: int | None = None,
) -> list[StepWorkload]:
    """Steps (sorted) built from the bulk tables' columns.

    samples needs step, group_idx, sample_idx, prompt_len, response_len (optional
    dp_rank, validate, latency_s). turns (step, group_idx, sample_idx, turn,
    prompt_tokens, cached_tokens, completion_tokens, engine_latency_s) makes the step
    multi-turn (without cached_tokens, a turn is assumed to find the previous turn's
    context in the prefix cache); tool_calls (step, group_idx, sample_idx, turn,
    latency_s) adds tool latency after each turn. rank_timings rows with phase "reward" give per-rank reward
    time; steps carries t_* timings. Validation rows are dropped unless asked for.
    """
    _require(samples, "samples", ("step", "group_idx", "sample_idx", "prompt_len", "response_len"))
    step = _col(samples, "step", np.int64)
    grp = _col(samples, "group_idx", np.int64)
    sidx = _col(samples, "sample_idx", np.int64)
    keep = np.ones(step.size, dtype=bool)
    validate = _col(samples, "validate")
    if validate is not None and not include_validate:
        keep &= ~validate.astype(bool)
    order = np.lexsort((sidx, grp, step))
    order = order[keep[order]]
    step, grp, sidx = step[order], grp[order], sidx[order]
    prompt = _col(samples, "prompt_len", np.int64)[order]
    resp = _col(samples, "response_len", np.int64)[order]
    dp = _col(samples, "dp_rank", np.int64)
    dp = None if dp is None else dp[order]
    lat = _col(samples, "latency_s", np.float64)
    lat = None if lat is None else lat[order]

    # per-sample key for joining turns / tool calls: (step, group, sample) -> row
    key = _join_key(step, grp, sidx)
    turn_rows = _turn_rows(turns, tool_calls, key) if turns is not None and len(turns.get("step", [])) else None

    reward = _reward_by_step(rank_timings)
    timing = _timings_by_step(steps)

    out = []
    bounds = np.flatnonzero(np.diff(step)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, step.size]):
        if hi <= lo:
            continue
        s = int(step[lo])
        g = grp[lo:hi]
        dense = np.cumsum(np.r_[0, (g[1:] != g[:-1]).astype(np.int64)])
        sample_dp = None if dp is None or (dp[lo:hi] < 0).all() else dp[lo:hi]
        w = StepWorkload(
            step=s,
            group=dense,
            prompt_len=prompt[lo:hi],
            response_len=resp[lo:hi],
            dp_rank=sample_dp,
            reward_time_by_rank=reward.get(s),
            timings=timing.get(s, {}),
            max_response_len=max_response_len,
        )
        if lat is not None and np.isfinite(lat[lo:hi]).any():
            w.sample_latency_s = lat[lo:hi].copy()
        if turn_rows is not None:
            _attach_turns(w, turn_rows, lo, hi)
        out.append(w)
    return out


def _join_key(step: np.ndarray, grp: np.ndarray, sidx: np.ndarray) -> np.ndarray:
    return (step.astype(np.int64) << 42) | (grp.astype(np.int64) << 21) | sidx.astype(np.int64)


def _turn_rows(turns: dict, tool_calls: dict | None, sample_key: np.ndarray) -> dict:
    _require(turns, "turns", ("step", "group_idx", "sample_idx", "turn", "prompt_tokens", "completion_tokens"))
    tkey = _join_key(
        _col(turns, "step", np.int64), _col(turns, "group_idx", np.int64), _col(turns, "sample_idx", np.int64)
    )
    tnum = _col(turns, "turn", np.int64)
    row = np.searchsorted(sample_key, tkey)
    row_c = np.minimum(row, sample_key.size - 1)
    found = sample_key[row_c] == tkey
    order = np.lexsort((tnum, row))
    order = order[found[order]]
    prompt = _col(turns, "prompt_tokens", np.int64)
    completion = _col(turns, "completion_tokens", np.int64)
    cached = _col(turns, "cached_tokens", np.int64)
    if cached is None:
        cached = np.full(prompt.size, -1, np.int64)
    unknown = cached < 0  # absent, or NULL read back as -1
    if unknown.any():
        # assume the prefix cache kept the previous turn's context
        o = order
        same = np.r_[False, row[o][1:] == row[o][:-1]]
        prev_ctx = np.r_[0, (prompt[o] + completion[o])[:-1]]
        guess = np.zeros(prompt.size, np.int64)
        guess[o] = np.where(same, np.minimum(prev_ctx, prompt[o]), 0)
        cached = np.where(unknown, guess, cached)
    lat = _col(turns, "engine_latency_s", np.float64)
    tool = np.zeros(prompt.size)
    if tool_calls is not None and len(tool_calls.get("step", [])):
        _require(tool_calls, "tool_calls", ("step", "group_idx", "sample_idx", "turn", "latency_s"))
        ckey = _join_key(
            _col(tool_calls, "step", np.int64),
            _col(tool_calls, "group_idx", np.int64),
            _col(tool_calls, "sample_idx", np.int64),
        )
        cturn = _col(tool_calls, "turn", np.int64)
        clat = np.nan_to_num(_col(tool_calls, "latency_s", np.float64), nan=0.0)
        # match each call to its turn row by (sample key, turn)
        tk2 = tkey * 64 + np.minimum(tnum, 63)
        ck2 = ckey * 64 + np.minimum(cturn, 63)
        srt = np.argsort(tk2, kind="stable")
        pos = np.searchsorted(tk2[srt], ck2)
        posc = np.minimum(pos, srt.size - 1)
        hit = tk2[srt][posc] == ck2
        np.add.at(tool, srt[posc[hit]], clat[hit])
    return {
        "row": row[order],
        "prompt": prompt[order],
        "cached": cached[order],
        "completion": completion[order],
        "tool": tool[order],
        "latency": None if lat is None else lat[order],
    }


def _attach_turns(w: StepWorkload, t: dict, lo: int, hi: int) -> None:
    a, b = np.searchsorted(t["row"], [lo, hi])
    if b <= a:
        return
    sample = t["row"][a:b] - lo
    missing = np.setdiff1d(np.arange(hi - lo), sample)
    w.turn_sample = sample
    w.turn_prompt_tokens = t["prompt"][a:b]
    w.turn_cached_tokens = t["cached"][a:b]
    w.turn_completion_tokens = t["completion"][a:b]
    w.turn_tool_latency_s = t["tool"][a:b]
    w.turn_engine_latency_s = None if t["latency"] is None else t["latency"][a:b]
    if missing.size:  # samples without turn rows become one turn of their own lengths
        _add_single_turns(w, missing)
    if w.turn_engine_latency_s is not None and np.isfinite(w.turn_engine_latency_s).all():
        per = np.bincount(w.turn_sample, weights=w.turn_engine_latency_s + w.turn_tool_latency_s, minlength=w.n_samples)
        w.sample_latency_s = per


def _add_single_turns(w: StepWorkload, missing: np.ndarray) -> None:
    sample = np.r_[w.turn_sample, missing]
    order = np.argsort(sample, kind="stable")
    w.turn_sample = sample[order]
    w.turn_prompt_tokens = np.r_[w.turn_prompt_tokens, w.prompt_len[missing]][order]
    w.turn_cached_tokens = np.r_[w.turn_cached_tokens, np.zeros(missing.size, np.int64)][order]
    w.turn_completion_tokens = np.r_[w.turn_completion_tokens, w.response_len[missing]][order]
    w.turn_tool_latency_s = np.r_[w.turn_tool_latency_s, np.zeros(missing.size)][order]
    if w.turn_engine_latency_s is not None:
        w.turn_engine_latency_s = np.r_[w.turn_engine_latency_s, np.full(missing.size, np.nan)][order]


def _reward_by_step(rank_timings: dict | None) -> dict[int, np.ndarray]:
    if rank_timings is None or not len(rank_timings.get("step", [])):
        return {}
    _require(rank_timings, "rank_timings", ("step", "rank", "phase", "seconds"))
    step = _col(rank_timings, "step", np.int64)
    rank = _col(rank_timings, "rank", np.int64)
    sec = _col(rank_timings, "seconds", np.float64)
    phase = np.asarray(rank_timings["phase"], dtype=object)
    ok = (phase == "reward") & np.isfinite(sec)
    validate = _col(rank_timings, "validate")
    if validate is not None:
        ok &= ~validate.astype(bool)
    out: dict[int, np.ndarray] = {}
    for s in np.unique(step[ok]):
        m = ok & (step == s)
        o = np.argsort(rank[m], kind="stable")
        out[int(s)] = sec[m][o]
    return out


def _timings_by_step(steps: dict | None) -> dict[int, dict[str, float]]:
    if steps is None or not len(steps.get("step", [])):
        return {}
    step = _col(steps, "step", np.int64)
    out: dict[int, dict[str, float]] = {int(s): {} for s in step}
    for name in STEP_TIMING_COLUMNS:
        v = _col(steps, name, np.float64)
        if v is None:
            continue
        for s, x in zip(step, v):
            if np.isfinite(x):
                out[int(s)][name] = float(x)
    return out
