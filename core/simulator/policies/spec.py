"""What a policy declares to the registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class PolicySpec:
    kind: str
    # rollout and training on separate GPU pools side by side (else time-shared)
    disaggregated: bool
    # the `Policy` fields only this policy reads (the others are shared by all)
    fields: tuple[str, ...]
    help: str
    # run(env, workload, progress) -> (step results, timeline builder, makespan)
    run: Callable
    # each step rolled out as one batch on fresh replicas (`base.rollout_batch`): the
    # steps' rollouts are independent of each other and can be computed ahead
    batch_rollouts: bool = False
