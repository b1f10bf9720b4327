"""Data efficiency of DAPO dynamic sampling: how much of the rollout trained the model.

verl's DAPO generates batches of prompt groups, keeps the groups whose rewards differ
(the filter), and fills each training batch from one or more generation batches, cut at
train_batch_size. `analyze_data_efficiency(data)` reads the `samples` columns step (the
generation step), group_idx, response_len, filter_mark (0 filtered out, 1 kept but not
used, 2 used for training; -1 unknown) and trainer_step (backend/formats/dapo.py).
Only samples with a mark (>= 0) count; validation samples are left out.

Result fields:

``generation``: one entry per generation step {step, trainer_step, groups_generated,
    groups_kept, groups_used, samples, samples_used, response_tokens_generated,
    response_tokens_used, rollout_len (the step's longest response), unused_time}.
``steps``: one entry per trainer step {trainer_step, generation_steps: [...],
    groups_generated, groups_kept, groups_used, samples_used, response_tokens_generated,
    response_tokens_used, used_token_share = used / generated response tokens}.
``summary``: {trainer_steps, generation_steps, groups_generated, groups_kept,
    groups_used, used_group_share, used_token_share (over the run), rollout_time (sum of
    rollout_len, token-time units), unused_rollout_time_share, time_estimate}.

Rollout GPU time spent on groups never used (``unused_rollout_time_share``) is an
estimate with the long-tail engine model (core/analysis/longtail.py): a generation
step's engines are busy until its longest sample, for a time proportional to
rollout_len; that time is attributed to the step's groups in proportion to their
response tokens, so unused_time = rollout_len x unused tokens / generated tokens, and
the share = sum of unused_time / sum of rollout_len over generation steps
(``time_estimate`` states this).
"""

from __future__ import annotations

import numpy as np

from core.analysis.grouping import composite_key, group_rows, training_mask
from core.analysis.stats import ratio
from core.analysis.tables import TraceData
from core.jsonable import json_safe

TIME_ESTIMATE = (
    "long-tail engine model: each generation step's rollout lasts until its longest sample "
    "(time ~ longest response); that time is attributed to groups by response tokens"
)
ADDITIVE = (
    "groups_generated",
    "groups_kept",
    "groups_used",
    "samples_used",
    "response_tokens_generated",
    "response_tokens_used",
)


def has_marks(data: TraceData) -> bool:
    s = data.samples
    return s is not None and s.filter_mark is not None and bool(len(s)) and bool((np.asarray(s.filter_mark) >= 0).any())


def analyze_data_efficiency(data: TraceData, include_validation: bool = False) -> dict:
    """Generated / kept / used per generation and trainer step (see module docstring)."""
    return finish_data_efficiency(per_step_data_efficiency(data, include_validation))


def per_step_data_efficiency(data: TraceData, include_validation: bool = False) -> dict:
    out: dict = {"kind": "data_efficiency", "generation": []}
    s = data.samples
    if s is None or s.filter_mark is None or len(s) == 0:
        return out
    mark = np.asarray(s.filter_mark, dtype=np.int64)
    keep = training_mask(s.validate, len(s), include_validation) & (mark >= 0)
    if not keep.any():
        return out
    step = np.asarray(s.step, dtype=np.int64)[keep]
    group = np.asarray(s.group_idx, dtype=np.int64)[keep]
    resp = np.asarray(s.response_len, dtype=np.int64)[keep]
    mark = mark[keep]
    trainer = (
        np.full(len(step), -1, dtype=np.int64)
        if s.trainer_step is None
        else np.asarray(s.trainer_step, dtype=np.int64)[keep]
    )
    # prompt groups: (step, group); a group's mark is the same for all its samples
    gk = group_rows(composite_key(step, group))
    g_step = gk.sort(step)[gk.starts]
    g_mark = gk.sort(mark)[gk.starts]
    by_step = group_rows(step)
    g_code = np.searchsorted(by_step.keys, g_step)
    n = len(by_step)

    row_code = np.searchsorted(by_step.keys, step)

    def per_step(weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(row_code, weights=weights, minlength=n)

    groups = np.bincount(g_code, minlength=n)
    kept = np.bincount(g_code, weights=(g_mark >= 1).astype(np.int64), minlength=n)
    used = np.bincount(g_code, weights=(g_mark == 2).astype(np.int64), minlength=n)
    samples = per_step()
    samples_used = per_step((mark == 2).astype(np.float64))
    tok = per_step(resp.astype(np.float64))
    tok_used = per_step(np.where(mark == 2, resp, 0).astype(np.float64))
    longest = np.maximum.reduceat(by_step.sort(resp), by_step.starts)
    trainer_of = by_step.sort(trainer)[by_step.starts]
    for i, st in enumerate(by_step.keys.tolist()):
        unused_share = 1.0 - tok_used[i] / tok[i] if tok[i] > 0 else 0.0
        out["generation"].append(
            {
                "step": st,
                "trainer_step": int(trainer_of[i]) if trainer_of[i] >= 0 else None,
                "groups_generated": int(groups[i]),
                "groups_kept": int(kept[i]),
                "groups_used": int(used[i]),
                "samples": int(samples[i]),
                "samples_used": int(samples_used[i]),
                "response_tokens_generated": int(tok[i]),
                "response_tokens_used": int(tok_used[i]),
                "rollout_len": int(longest[i]),
                "unused_time": float(longest[i]) * unused_share,
            }
        )
    return out


def finish_data_efficiency(partial: dict) -> dict:
    res = dict(partial)
    gen = sorted(res["generation"], key=lambda e: e["step"])
    res["generation"] = gen
    by_trainer: dict = {}
    for e in gen:
        t = by_trainer.setdefault(
            e["trainer_step"], {"trainer_step": e["trainer_step"], "generation_steps": [], **dict.fromkeys(ADDITIVE, 0)}
        )
        t["generation_steps"].append(e["step"])
        for k in ADDITIVE:
            t[k] += e[k]
    steps = sorted(by_trainer.values(), key=lambda t: (t["trainer_step"] is None, t["trainer_step"] or 0))
    for t in steps:
        t["used_token_share"] = ratio(t["response_tokens_used"], t["response_tokens_generated"])
    res["steps"] = steps
    total = {k: sum(e[k] for e in gen) for k in ADDITIVE}
    rollout = sum(e["rollout_len"] for e in gen)
    res["summary"] = {
        "trainer_steps": len(steps),
        "generation_steps": len(gen),
        **{k: total[k] for k in ("groups_generated", "groups_kept", "groups_used")},
        "used_group_share": ratio(total["groups_used"], total["groups_generated"]),
        "kept_group_share": ratio(total["groups_kept"], total["groups_generated"]),
        "response_tokens_generated": total["response_tokens_generated"],
        "response_tokens_used": total["response_tokens_used"],
        "used_token_share": ratio(total["response_tokens_used"], total["response_tokens_generated"]),
        "rollout_time": rollout,
        "unused_rollout_time_share": ratio(sum(e["unused_time"] for e in gen), rollout),
        "time_estimate": TIME_ESTIMATE,
    }
    return json_safe(res)


def reduce_data_efficiency(partials: list[dict]) -> dict:
    """Merge results over disjoint generation-step ranges (a trainer step's generation
    steps may fall into different ranges: its entry is rebuilt from all of them)."""
    if not partials:
        raise ValueError("nothing to reduce")
    return finish_data_efficiency(
        {"kind": "data_efficiency", "generation": [e for p in partials for e in p["generation"]]}
    )


def used_groups_only(data: TraceData) -> TraceData:
    """The trace restricted to samples of groups used for training (filter_mark == 2).
    ValueError when the trace has no DAPO marks."""
    if not has_marks(data):
        raise ValueError("groups='used' needs DAPO filter marks (dapo_filter_indices.jsonl); this trace has none")
    s = data.samples
    assert s is not None and s.filter_mark is not None  # has_marks
    chosen = s.take(np.asarray(s.filter_mark) == 2)
    return TraceData(
        samples=chosen,
        turns=data.turns,
        tool_calls=data.tool_calls,
        rank_timings=data.rank_timings,
        steps=data.steps,
        gpu_events=data.gpu_events,
        max_response_len=data.max_response_len,
        task_names=data.task_names,
        gpu_names=data.gpu_names,
        gpu_step_windows=data.gpu_step_windows,
    )


def select_groups(data: TraceData, groups: str) -> TraceData:
    """`groups` = "all" (the trace as is) or "used" (`used_groups_only`)."""
    if groups == "all":
        return data
    if groups == "used":
        return used_groups_only(data)
    raise ValueError(f"groups: expected 'all' or 'used', got {groups!r}")
