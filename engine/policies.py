"""Designs acted out on real engines, reading the simulator's policy registry: the same
kinds, the same declared parameters (`PolicySpec.resolve`), the same pure helpers where a
policy decides something (the length ranker, LPT dispatch, group dispatch). A policy
whose `PolicySpec.not_on_engine` is None has a run here (tests check both agree).

Each run takes an `EnginePool` (the driver interface: submit, abort, run_until, now) and
the replay's workload, and returns the steps' rollout windows and every request it sent.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.simulator.dispatch import assign_groups, longest_first
from core.simulator.policies import policy_spec
from core.simulator.policies.length_ranked import ranked_prediction
from core.simulator.requests import sample_tokens, step_request_arrays
from core.simulator.workload import StepWorkload
from engine.client import EnginePool, Request
from engine.multiturn import drive, trajectories
from engine.workload import prompt_ids

# request ids, unique in the process: runs may share a pool (its `done` is keyed by id)
_request_ids = itertools.count()


@dataclass
class Sent:
    """A request sent to an engine: whose sample it serves and the tokens it must decode."""

    id: str
    step_idx: int
    sample: int
    target: int


@dataclass
class StepWindow:
    step: int
    start: float
    end: float
    finished: list[str] = field(default_factory=list)  # requests that finished in the window


@dataclass
class EngineRun:
    steps: list[StepWindow] = field(default_factory=list)
    sent: dict[str, Sent] = field(default_factory=dict)


class _Launcher:
    """Sends requests and keeps what was sent (ids unique over the run)."""

    def __init__(self, pool: EnginePool, workload: list[StepWorkload], vocab: int) -> None:
        self.pool, self.workload, self.vocab = pool, workload, vocab
        self.run = EngineRun()
        self._prompts: dict[tuple[int, int], list[int]] = {}

    def prompt(self, step_idx: int, sample: int) -> list[int]:
        w = self.workload[step_idx]
        g = int(w.group[sample])
        key = (step_idx, g)
        if key not in self._prompts:
            self._prompts[key] = prompt_ids(w.step, g, int(w.prompt_len[sample]), self.vocab)
        return self._prompts[key]

    def send(self, engine: int, items: list[tuple[int, int, list[int], int]]) -> list[str]:
        """Send (step index, sample, already generated token ids, tokens left) items."""
        return self.send_prompts(
            engine, [(si, s, self.prompt(si, s) + generated, left, False) for si, s, generated, left in items]
        )

    def send_prompts(self, engine: int, items: list[tuple[int, int, list[int], int, bool]]) -> list[str]:
        """Send (step index, sample, prompt, tokens to decode, return its token ids) items."""
        reqs = []
        for step_idx, sample, prompt, left, return_ids in items:
            rid = str(next(_request_ids))
            self.run.sent[rid] = Sent(rid, step_idx, sample, left)
            reqs.append(Request(rid, prompt, left, return_ids))
        self.pool.submit(engine, reqs)
        return [r.id for r in reqs]

    def window(self, w: StepWorkload, start: float, end: float, ids: list[str]) -> None:
        done = self.pool.done
        finished = [i for i in ids if i in done and done[i].reason == "length" and done[i].t_end <= end + 1e-9]
        self.run.steps.append(StepWindow(w.step, start, end, finished))


def _wait_all(pool: EnginePool, ids: list[str]) -> float:
    pool.run_until(lambda: all(i in pool.done for i in ids))
    return max((pool.done[i].t_end for i in ids), default=pool.now())


def run_sync(pool: EnginePool, workload: list[StepWorkload], params: Any, vocab: int) -> EngineRun:
    """Each step's groups submitted together (dispatched over the engines as the
    simulator's `Policy.dispatch` default, round robin), the step ends with its last;
    multi-turn trajectories turn by turn (`engine.multiturn.drive`)."""
    la = _Launcher(pool, workload, vocab)
    k = len(pool.children)
    for i, w in enumerate(workload):
        if w.is_multiturn:  # turn by turn, each after its tool call (engine/multiturn.py)
            trajs = trajectories(i, w, k)
            t0 = pool.now()
            drive(la, w, trajs, t0)
            lasts = [t.last for t in trajs if t.last is not None]
            la.window(w, t0, max((pool.done[r].t_end for r in lasts), default=t0), lasts)
            continue
        starts = w.group_slices()
        prompt = np.add.reduceat(w.prompt_len, starts[:-1])
        total = np.add.reduceat(w.total_len, starts[:-1])
        replica = assign_groups("round_robin", k, prompt, total)[w.group]
        t0 = pool.now()
        ids = []
        for e in range(k):
            ids += la.send(e, [(i, int(s), [], int(w.response_len[s])) for s in np.flatnonzero(replica == e)])
        la.window(w, t0, _wait_all(pool, ids), ids)
    return la.run


def run_length_ranked(pool: EnginePool, workload: list[StepWorkload], params: Any, vocab: int) -> EngineRun:
    """StreamRL's dispatch: the ranker's predicted lengths (`ranked_prediction`), samples
    longest-predicted first, each to the least loaded engine (LPT), each engine admitting
    its samples longest-predicted first."""
    la = _Launcher(pool, workload, vocab)
    k = len(pool.children)
    for i, w in enumerate(workload):
        tokens = sample_tokens(step_request_arrays(w), w.n_samples)
        rng = np.random.default_rng([params.seed, w.step])
        predicted = ranked_prediction(tokens, params.ranker_quality, rng)
        order = np.argsort(-predicted, kind="stable")
        replica = longest_first(predicted[order], k)
        t0 = pool.now()
        ids = []
        for e in range(k):
            mine = order[replica == e]
            ids += la.send(e, [(i, int(s), [], int(w.response_len[s])) for s in mine])
        la.window(w, t0, _wait_all(pool, ids), ids)
    return la.run


@dataclass
class _Sample:
    step_idx: int
    sample: int
    target: int
    generated: list[int] = field(default_factory=list)
    done: bool = False
    live: str | None = None  # the request serving it now


def run_partial(pool: EnginePool, workload: list[StepWorkload], params: Any, vocab: int) -> EngineRun:
    """APRIL as the simulator's `partial` replays it: carried groups first, then fresh
    ones (cycling through the trace past its end), ceil(N · over_provision) in all; the
    rollout is aborted once N groups have finished; unfinished samples resume in the next
    step from their partial responses (prompt + partial response as the new prompt)."""
    la = _Launcher(pool, workload, vocab)
    order = [(i, g) for i, w in enumerate(workload) for g in range(w.n_groups)]
    fresh = 0
    carried: list[list[_Sample]] = []
    for w in workload:
        target = min(params.finished_groups or w.n_groups, max(1, len(order)))
        want = max(target, math.ceil(target * params.over_provision))
        groups = list(carried)
        for _ in range(max(0, want - len(carried))):
            si, g = order[fresh % len(order)]
            fresh += 1
            sl = workload[si].group_slices()
            groups.append([_Sample(si, s, int(workload[si].response_len[s])) for s in range(sl[g], sl[g + 1])])
        t0 = pool.now()
        live = _launch(la, groups)
        completed = _run_groups(pool, groups, live, target, t0)
        stop = completed[target - 1][1] if len(completed) >= target else max([t0] + [c for _, c in completed])
        _abort_rest(pool, groups, live)
        trained = {g for g, _ in completed[:target]}
        la.window(w, t0, stop, list(live))
        left = [grp for g, grp in enumerate(groups) if g not in trained]
        carried = left if params.partial_rollout else []
    return la.run


def _launch(la: _Launcher, groups: list[list[_Sample]]) -> dict[str, _Sample]:
    live: dict[str, _Sample] = {}
    for grp in groups:
        todo = [s for s in grp if not s.done]
        ids = la.send(0, [(s.step_idx, s.sample, s.generated, s.target - len(s.generated)) for s in todo])
        for rid, s in zip(ids, todo):
            s.live = rid
            live[rid] = s
    return live


def _run_groups(
    pool: EnginePool, groups: list[list[_Sample]], live: dict[str, _Sample], target: int, t0: float
) -> list[tuple[int, float]]:
    """Run until `target` groups have finished; (group, finish time) in finishing order
    (groups finished before the step, carried over whole, finish at its start)."""
    done = pool.done

    def finished() -> list[tuple[int, float]]:
        out = []
        for g, grp in enumerate(groups):
            ends = [t0 if s.live is None else done[s.live].t_end for s in grp if s.live is None or s.live in done]
            if len(ends) == len(grp):
                out.append((g, max(ends)))
        return sorted(out, key=lambda x: (x[1], x[0]))

    pool.run_until(lambda: sum(1 for grp in groups if all(s.live is None or s.live in done for s in grp)) >= target)
    for grp in groups:
        for s in grp:
            if s.live is not None and s.live in done and done[s.live].reason == "length":
                s.done = True
    return finished()


def _abort_rest(pool: EnginePool, groups: list[list[_Sample]], live: dict[str, _Sample]) -> None:
    """Abort what still runs; each aborted sample keeps its partial response."""
    for d in pool.abort([rid for rid in live if rid not in pool.done]):
        live[d.id].generated += d.token_ids
    for rid, s in live.items():
        d = pool.done[rid]
        if d.reason == "length":
            s.done = True
        s.live = None


@dataclass(frozen=True)
class EngineDesign:
    run: Callable[[EnginePool, list[StepWorkload], Any, int], EngineRun]
    engines: int  # engines it runs on by default (a dispatch design needs several)
    multiturn: bool = False  # it replays multi-turn trajectories (turn by turn)


# kind -> its run on engines (the kinds whose registry entry says they run on one)
ENGINE_RUNS: dict[str, EngineDesign] = {
    "sync": EngineDesign(run_sync, 1, multiturn=True),
    "partial": EngineDesign(run_partial, 1),
    "length_ranked": EngineDesign(run_length_ranked, 2),
}


def engine_policy(kind: str, params: dict) -> tuple[EngineDesign, Any]:
    """(its design on engines, its resolved parameters) of policy `kind`; ValueError
    saying why when it does not run on an engine."""
    spec = policy_spec(kind)
    if spec.not_on_engine is not None:
        raise ValueError(f"--policy {kind}: does not run on an engine: {spec.not_on_engine}")
    return ENGINE_RUNS[kind], spec.resolve(params, "--policy-param")
