"""Divided rollout (Seer, arXiv 2511.14617), colocated and synchronous: the sync
schedule (rollout -> reward -> forward passes -> update -> weight sync) with Seer's
rollout.

- Divided rollout: a group's samples are separate requests in a cluster-level queue,
  each taken by whichever replica can admit it (`RolloutCluster(shared_queue=True)`),
  so a group spreads over replicas; each replica prefills the group's prompt once.
- Context-aware scheduling: each group's first sample is served first (Seer's
  speculative request, which probes the group's length); the group's other samples
  then go longest-estimated first, the estimate being the longest of the group's
  finished samples (groups with none finished yet come before every estimated one:
  their probe is still running, so they are at least that long).
- Work stealing: a replica with a free slot and nothing queued takes waiting requests
  (e.g. ones preempted when KV ran out) from the most loaded replica.

- Chunked requests over a global KV pool: a sample's generation is split into chunks
  of `chunk_tokens`; after each chunk the request goes back to the cluster and
  continues on the least loaded replica without prefill (`requests.chunk_requests`,
  `pooled.WorkPool.migrate`).
- Grouped speculative decoding, in the tail: a replica running at most
  `spec_tail_seqs` sequences decodes speculatively (`config.EngineLimits.speculation`).

Not modelled: how Seer drafts (a group's finished samples feed a suffix-tree drafter
and the draft length adapts): the speculation's gain is the engine limits'
`spec_accept` / `spec_cost`; a preempted request recomputes (no KV pool for it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.simulator.cluster import RolloutCluster
from core.simulator.policies.base import Env, RolloutOutcome, rollout_outcome
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.policies.sync import run_sync
from core.simulator.requests import sample_tokens, step_request_arrays
from core.simulator.workload import StepWorkload

PROBE, UNESTIMATED = -2e30, -1e30  # queue keys: probes, then groups without an estimate


@dataclass(frozen=True)
class DividedParams:
    context_aware: bool = param(
        True,
        "serve each group's first sample first, then the rest longest-estimated first (estimate: the "
        "longest finished sample of the group); false: first come, first served",
    )
    work_stealing: bool = param(
        True,
        "a replica with a free slot and nothing queued takes waiting requests from the most loaded one",
        grid=(False,),
    )
    chunk_tokens: int = param(
        8192,
        "generation split into chunks of this many tokens, each continued on the least loaded replica with its "
        "KV from a global pool (Seer's divided rollout); 0: a request runs where it was admitted. 8192 is ours",
        ge=0,
    )
    spec_tail_seqs: int = param(
        32,
        "speculative decoding (Seer's grouped drafts) while a replica runs at most this many sequences, at the "
        "engine limits' spec_accept and spec_cost; 0: none (unless the limits turn it on). 32 is ours",
        ge=0,
    )


class ContextAwareOrder:
    """A step's samples queued for context-aware scheduling: the groups' first samples
    in one run served first, each group's other samples in a run of their own keyed by
    minus the group's estimated length, re-keyed as its samples finish."""

    def __init__(self, rc: RolloutCluster, w: StepWorkload, first: np.ndarray, last: np.ndarray) -> None:
        self.rc = rc
        assert rc.pool is not None and rc.pool.queue is not None
        self.queue = rc.pool.queue
        starts = w.group_slices()
        self.group = w.group.tolist()
        self.tokens = sample_tokens(step_request_arrays(w), w.n_samples).tolist()
        self.estimate = [-1] * w.n_groups
        self.base = int(first[0]) if first.size else 0
        self.sample_of = [-1] * (int(last.max()) + 1 - self.base if last.size else 0)  # per request id - base
        for s, r in enumerate(last.tolist()):
            self.sample_of[r - self.base] = s
        runs = [(first[starts[:-1]], PROBE)] + [
            (first[a + 1 : b], UNESTIMATED) for a, b in zip(starts[:-1], starts[1:])
        ]
        self.rest = rc.enqueue_runs(runs, 0.0)[1:]

    def on_finish(self, done: list[int], t: float) -> bool:
        sample_of, base = self.sample_of, self.base
        for r in done:
            s = sample_of[r - base]
            if s < 0:
                continue
            g = self.group[s]
            if self.tokens[s] > self.estimate[g]:
                self.estimate[g] = self.tokens[s]
                self.rc.reorder(self.rest[g], -float(self.tokens[s]), t)
        return not self.queue  # nothing left to order


def divided_rollout(env: Env, w: StepWorkload, keep_store: bool) -> RolloutOutcome:
    prm: DividedParams = env.params
    rc = env.new_cluster(shared_queue=True, stealing=prm.work_stealing, spec_tail_seqs=prm.spec_tail_seqs)
    _, first, last = rc.add_step(w, np.arange(w.n_samples), chunk_tokens=prm.chunk_tokens)
    if prm.context_aware:
        rc.run_until(ContextAwareOrder(rc, w, first, last).on_finish)
    else:
        rc.enqueue(first, 0.0, 0.0)
    rc.run_all()
    return rollout_outcome(rc, last, keep_store)


SPEC = PolicySpec(
    kind="divided",
    not_on_engine="a shared queue with work stealing across engines is not acted out on a real engine yet (length_ranked is the dispatch design that is)",
    disaggregated=False,
    help="colocated, synchronous; a group's samples are spread over replicas from a shared queue, "
    "probe first then longest-estimated first, idle replicas steal waiting work (Seer)",
    run=run_sync,
    params=DividedParams,
    batch_rollouts=True,
    rollout=divided_rollout,
    paper="Seer: Online Context Learning for Fast Synchronous LLM Reinforcement Learning (arXiv 2511.14617)",
)
