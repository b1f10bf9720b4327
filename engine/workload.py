"""A trace's steps as the engine replays them: whole prompt groups up to a request budget
per step, lengths optionally scaled down for small machines, each sample one request of
its recorded prompt length (synthetic token ids, shared by the group's samples so the
prefix cache serves them as the recorded engine did) decoding exactly its recorded
response length; a multi-turn trajectory one request per turn. The simulator predicts
the very same workload."""

from __future__ import annotations

import dataclasses

import numpy as np

from core.simulator.workload import StepWorkload


def engine_workload(
    workload: list[StepWorkload],
    *,
    max_requests: int | None = None,
    length_scale: float = 1.0,
    max_len: int | None = None,
    block_size: int = 1,
) -> list[StepWorkload]:
    """Copies of `workload`'s steps as the engine replays them: the first whole groups of
    each step up to `max_requests` samples (at least one group), prompt and response
    lengths times `length_scale` (at least 1 token each), prompt + response within
    `max_len`. Multi-turn steps keep their turns (`_turns`), with the prompt tokens the
    engine's prefix cache (blocks of `block_size` tokens) can serve as their cached ones."""
    if length_scale <= 0:
        raise ValueError(f"--length-scale: must be > 0, got {length_scale}")
    out = []
    for w in workload:
        n = w.n_samples
        if max_requests is not None and n > max_requests:
            starts = w.group_slices()
            fits = starts[starts <= max_requests]
            n = int(fits[-1]) if fits.size > 1 else int(starts[1])
        if w.is_multiturn:
            out.append(_turns(w, n, length_scale, max_len, block_size))
            continue
        prompt = _scaled(w.prompt_len[:n], length_scale)
        response = _scaled(w.response_len[:n], length_scale)
        if max_len is not None:
            prompt = np.minimum(prompt, max_len // 2)
            response = np.minimum(response, max_len - prompt)
        out.append(
            dataclasses.replace(
                StepWorkload(step=w.step, group=w.group[:n].copy(), prompt_len=prompt, response_len=response),
                max_response_len=int(response.max()) if n else None,
            )
        )
    return out


def _scaled(lengths: np.ndarray, scale: float) -> np.ndarray:
    return np.maximum(1, np.rint(lengths * scale)).astype(np.int64)


def _turns(w: StepWorkload, n: int, scale: float, max_len: int | None, block: int) -> StepWorkload:
    """The first `n` samples' trajectories, turn by turn: each turn's prompt and completion
    scaled, the recorded tool latency after it (seconds, unscaled: the engine waits it out).
    A turn's prompt continues the previous turn's prompt and response (then the tool's
    tokens), so the prefix cache serves that context; a trajectory's first prompt is its
    group's (`prompt_ids`), served to the group's later samples. vLLM caches whole blocks
    and computes at least a prompt's last token: cached = (min(that, prompt − 1) // block) x block."""
    sub = w.subset_groups(np.arange(int(w.group[n - 1]) + 1 if n else 0))
    assert sub.turn_sample is not None and sub.turn_prompt_tokens is not None and sub.turn_completion_tokens is not None
    sample = sub.turn_sample
    prompt = _scaled(sub.turn_prompt_tokens, scale)
    completion = _scaled(sub.turn_completion_tokens, scale)
    if max_len is not None:
        prompt = np.minimum(prompt, max_len // 2)
        completion = np.minimum(completion, max_len - prompt)
    first = np.r_[True, sample[1:] != sample[:-1]] if sample.size else np.zeros(0, bool)
    served = np.r_[0, (prompt + completion)[:-1]]  # the previous turn's context
    group_first = np.r_[True, sub.group[1:] != sub.group[:-1]]
    leader = np.maximum.accumulate(np.where(group_first, np.arange(sub.n_samples), 0))  # the group's first sample
    opening = np.zeros(sub.n_samples, np.int64)
    opening[sample[first]] = prompt[first]
    shared = np.where(group_first[sample], 0, opening[leader[sample]])  # the group's first prompt
    reach = np.minimum(np.where(first, shared, served), prompt - 1)
    cached = (np.maximum(reach, 0) // max(1, block)) * max(1, block)
    latency = sub.turn_tool_latency_s
    gap = np.zeros(sample.size) if latency is None else np.nan_to_num(latency, nan=0.0)
    gap[np.r_[first[1:], True]] = 0.0  # a trajectory ends with its last turn: nothing follows to wait for
    response = _scaled(sub.response_len, scale)
    return StepWorkload(
        step=w.step,
        group=sub.group,
        prompt_len=opening,
        response_len=response,
        turn_sample=sample,
        turn_prompt_tokens=prompt,
        turn_cached_tokens=cached,
        turn_completion_tokens=completion,
        turn_tool_latency_s=gap,
        max_response_len=int(response.max()) if response.size else None,
    )


def prompt_ids(step: int, group: int, length: int, vocab: int) -> list[int]:
    """The synthetic prompt of a group: `length` token ids drawn from (step, group)."""
    rng = np.random.default_rng([step, group])
    return rng.integers(1, vocab, size=length).tolist()


def tool_ids(step: int, sample: int, turn: int, length: int, vocab: int) -> list[int]:
    """The synthetic tokens a tool call appended after turn `turn` of a trajectory."""
    rng = np.random.default_rng([step, sample, turn, 1])
    return rng.integers(1, vocab, size=length).tolist()
