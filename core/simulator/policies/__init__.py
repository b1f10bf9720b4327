"""The scheduling policies, one module each, composing rollout, reward and training
stages. `POLICIES[kind]` is a `PolicySpec`: whether it is disaggregated, the config
fields it owns, a help line (the CLI and the presets endpoint read these) and its run."""

from __future__ import annotations

from core.simulator.policies import fully_async, one_step_off, partial, sync
from core.simulator.policies.base import Env
from core.simulator.policies.spec import PolicySpec

POLICIES: dict[str, PolicySpec] = {m.SPEC.kind: m.SPEC for m in (sync, one_step_off, partial, fully_async)}
POLICY_KINDS = tuple(POLICIES)


def policy_spec(kind: str) -> PolicySpec:
    """The registered policy `kind`; ValueError naming the field otherwise."""
    try:
        return POLICIES[kind]
    except KeyError:
        raise ValueError(f"policy.kind: must be one of {', '.join(POLICY_KINDS)}, got {kind!r}") from None


__all__ = ["Env", "POLICIES", "POLICY_KINDS", "PolicySpec", "policy_spec"]
