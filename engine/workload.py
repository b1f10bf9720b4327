"""A trace's steps as the engine replays them: whole prompt groups up to a request budget
per step, lengths optionally scaled down for small machines, each sample one request of
its recorded prompt length (synthetic token ids, shared by the group's samples so the
prefix cache serves them as the recorded engine did) decoding exactly its recorded
response length. The simulator predicts the very same workload."""

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
) -> list[StepWorkload]:
    """Single-turn copies of `workload`'s steps: the first whole groups of each step up to
    `max_requests` samples (at least one group), prompt and response lengths times
    `length_scale` (at least 1 token each), prompt + response within `max_len`.
    ValueError for multi-turn steps (not replayed on an engine yet)."""
    if length_scale <= 0:
        raise ValueError(f"--length-scale: must be > 0, got {length_scale}")
    out = []
    for w in workload:
        if w.is_multiturn:
            raise ValueError(f"step {w.step}: multi-turn trajectories are not replayed on an engine yet")
        n = w.n_samples
        if max_requests is not None and n > max_requests:
            starts = w.group_slices()
            fits = starts[starts <= max_requests]
            n = int(fits[-1]) if fits.size > 1 else int(starts[1])
        prompt = np.maximum(1, np.rint(w.prompt_len[:n] * length_scale)).astype(np.int64)
        response = np.maximum(1, np.rint(w.response_len[:n] * length_scale)).astype(np.int64)
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


def prompt_ids(step: int, group: int, length: int, vocab: int) -> list[int]:
    """The synthetic prompt of a group: `length` token ids drawn from (step, group)."""
    rng = np.random.default_rng([step, group])
    return rng.integers(1, vocab, size=length).tolist()
