"""Multi-turn trajectories acted out on real engines turn by turn: a turn is one request;
when it finishes, the trajectory waits out its recorded tool latency, then sends its next
turn, whose prompt is the previous prompt, the tokens the engine just generated and the
tool's tokens (synthetic), so the engine's prefix cache serves the context as the
recorded engine's did. A trajectory stays on one engine (its cache).

The workload comes from `engine_workload` (engine/workload.py): per turn, prompt tokens,
completion tokens and the tool latency after it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from core.simulator.dispatch import assign_groups
from core.simulator.workload import StepWorkload
from engine.client import EnginePool
from engine.workload import prompt_ids, tool_ids


class Sender(Protocol):
    """What sends the turns (engine.policies' launcher, which records every request)."""

    pool: EnginePool
    vocab: int

    def send_prompts(self, engine: int, items: list[tuple[int, int, list[int], int, bool]]) -> list[str]: ...


@dataclass
class Trajectory:
    step_idx: int
    sample: int
    engine: int
    rows: np.ndarray  # its turns' rows in the step's turn arrays
    turn: int = 0  # the next turn to send
    context: list[int] = field(default_factory=list)  # the last prompt sent and its response
    due: float = 0.0  # when the next turn may be sent (the previous one's end + tool latency)
    last: str | None = None  # the request of its latest turn


def trajectories(step_idx: int, w: StepWorkload, engines: int) -> list[Trajectory]:
    """The step's trajectories, groups over the engines round robin (as `run_sync`)."""
    assert w.turn_sample is not None and w.turn_prompt_tokens is not None
    starts = w.group_slices()
    prompt = np.add.reduceat(w.prompt_len, starts[:-1])
    total = np.add.reduceat(w.total_len, starts[:-1])
    replica = assign_groups("round_robin", engines, prompt, total)[w.group]
    bounds = np.searchsorted(w.turn_sample, np.arange(w.n_samples + 1))
    return [
        Trajectory(step_idx, s, int(replica[s]), np.arange(bounds[s], bounds[s + 1]))
        for s in range(w.n_samples)
        if bounds[s + 1] > bounds[s]
    ]


def turn_prompt(w: StepWorkload, t: Trajectory, vocab: int) -> list[int]:
    """Turn `t.turn`'s prompt: its recorded length, continuing the trajectory's context."""
    assert w.turn_prompt_tokens is not None
    length = int(w.turn_prompt_tokens[t.rows[t.turn]])
    if t.turn == 0:
        return prompt_ids(w.step, int(w.group[t.sample]), length, vocab)
    if length <= len(t.context):
        return t.context[:length]
    return t.context + tool_ids(w.step, t.sample, t.turn, length - len(t.context), vocab)


def drive(launcher: Sender, w: StepWorkload, trajs: list[Trajectory], start: float) -> None:
    """Send every trajectory's turns in order, each once its tool call has returned;
    returns when the last turn of every trajectory has finished."""
    pool: EnginePool = launcher.pool
    assert w.turn_completion_tokens is not None and w.turn_tool_latency_s is not None
    for t in trajs:
        t.due = start
    waiting: list[Trajectory] = list(trajs)
    live: dict[str, Trajectory] = {}
    while waiting or live:
        now = pool.now()
        ready = [t for t in waiting if t.due <= now]
        waiting = [t for t in waiting if t.due > now]
        for engine in sorted({t.engine for t in ready}):
            mine = [t for t in ready if t.engine == engine]
            items = [
                (t.step_idx, t.sample, turn_prompt(w, t, launcher.vocab), int(w.turn_completion_tokens[t.rows[t.turn]]),
                 t.turn + 1 < t.rows.size)  # its token ids come back when another turn follows
                for t in mine
            ]  # fmt: skip
            for t, rid, (_, _, prompt, _, _) in zip(mine, launcher.send_prompts(engine, items), items):
                t.context, t.last = prompt, rid
                live[rid] = t
        next_due = min((t.due for t in waiting), default=None)
        if live:
            pool.run_until(lambda: any(rid in pool.done for rid in live), until=next_due)
        elif next_due is not None:
            time.sleep(max(0.0, next_due - pool.now()))
        for rid in [rid for rid in live if rid in pool.done]:
            t, d = live.pop(rid), pool.done[rid]
            t.context = t.context + d.token_ids
            t.due = d.t_end + float(w.turn_tool_latency_s[t.rows[t.turn]])
            t.turn += 1
            if t.turn < t.rows.size:
                waiting.append(t)
