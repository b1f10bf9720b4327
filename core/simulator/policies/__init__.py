"""The scheduling policies, one module each, composing rollout, reward and training
stages. `POLICIES[kind]` is a `PolicySpec`: whether it is disaggregated, its help line,
its parameters (one declaration: the CLI, the REST schema, the presets endpoint, the
dashboard's forms and the advisor read it) and its run."""

from __future__ import annotations

import dataclasses

from core.simulator.config import Policy
from core.simulator.policies import (
    divided,
    laminar,
    length_ranked,
    one_step_off,
    partial,
    sync,
    tail_batching,
    verl_async,
)
from core.simulator.policies.base import Env
from core.simulator.policies.spec import ParamInfo, PolicySpec, param

POLICIES: dict[str, PolicySpec] = {
    m.SPEC.kind: m.SPEC
    for m in (sync, one_step_off, partial, verl_async, laminar, divided, length_ranked, tail_batching)
}


def policy_spec(kind: str) -> PolicySpec:
    """The registered policy `kind`; ValueError naming the field otherwise."""
    try:
        return POLICIES[kind]
    except KeyError:
        raise ValueError(f"policy.kind: must be one of {', '.join(POLICIES)}, got {kind!r}") from None


def make_policy(d: dict | str | Policy) -> Policy:
    """A `Policy` from its dict (or a kind), its parameters checked against its
    registry entry and resolved (every declared parameter present, defaults filled).
    ValueError names the field (``policy.params.over_provision: must be >= 1, ...``)."""
    policy = d if isinstance(d, Policy) else Policy.from_dict(d)
    spec = policy_spec(policy.kind)
    resolved = spec.resolve(policy.params)
    return dataclasses.replace(policy, params=dataclasses.asdict(resolved))


__all__ = ["Env", "POLICIES", "ParamInfo", "PolicySpec", "make_policy", "param", "policy_spec"]
