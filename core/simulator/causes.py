"""Where a replay's GPU-seconds go: one vocabulary for the timeline, the results and the
explanation of a comparison.

Every GPU-second of a replay is busy or idle. Idle seconds carry a cause
(`IDLE_CAUSES`); busy seconds carry the stage that ran, and two busy stages are overhead
rather than progress: `weight_sync` (moving weights) and `recompute` (re-prefilling
tokens a carried or preempted sample had already computed). `CAUSES` describes every
component a comparison splits GPU time into — the idle causes, the overheads, and the
useful work (generation, training passes) — with what a user can act on.
"""

from __future__ import annotations

from dataclasses import dataclass

IDLE_CAUSES = (
    "rollout_tail",
    "tool_wait",
    "reward_wait",
    "dp_imbalance",
    "trainer_waits_rollout",
    "rollout_waits_trainer",
    "staleness_wait",
    "weight_sync",
    "stage_serialisation",
    "unused",
)

# busy stages grouped into the components of an explanation (the rest is overhead)
WORK_STAGES = {"generation": ("rollout",), "training": ("old_log_prob", "ref", "update_actor")}
OVERHEAD_STAGES = ("weight_sync", "recompute")


@dataclass(frozen=True)
class Cause:
    kind: str  # idle | overhead | work
    phrase: str  # as a sentence names it
    definition: str
    lever: str  # what shortens it


CAUSES: dict[str, Cause] = {
    "rollout_tail": Cause(
        "idle",
        "the rollout tail",
        "rollout GPUs whose replica has finished its samples and waits for the slowest one, or runs a "
        "half-empty batch with nothing left to admit (seconds x free share of the peak batch)",
        "partial rollout, over-provisioning or an asynchronous policy",
    ),
    "tool_wait": Cause(
        "idle",
        "waiting for tool calls",
        "a replica with nothing to run while its trajectories' tool calls are out",
        "faster tools, or more trajectories per replica",
    ),
    "reward_wait": Cause(
        "idle",
        "waiting for rewards",
        "training GPUs idle while rewards are computed on the host",
        "more reward workers, or rewards computed while rollout continues",
    ),
    "dp_imbalance": Cause(
        "idle",
        "DP-rank imbalance in training",
        "training ranks waiting for the slowest rank at a mini-batch synchronisation",
        "length-balanced DP partitioning (balancing kk or lpt)",
    ),
    "trainer_waits_rollout": Cause(
        "idle",
        "the trainer pool waiting for rollouts",
        "disaggregated training GPUs with no batch to train because rollouts have not delivered it "
        "(a pool-split loss: the rollout pool is too slow for the trainer)",
        "move GPUs from training to rollout, or let the trainer use staler samples",
    ),
    "rollout_waits_trainer": Cause(
        "idle",
        "the rollout pool waiting for the trainer",
        "disaggregated rollout GPUs waiting for the trainer where the policy's schedule fixes the "
        "dependency (one_step_off: rollout k+1 needs update k-1's weights) or nothing is left to "
        "generate (the end of a run): a pool-split loss",
        "move GPUs from rollout to training",
    ),
    "staleness_wait": Cause(
        "idle",
        "waiting at the staleness bound",
        "GPUs held back by a configurable staleness bound: rollout replicas not allowed to start more "
        "samples until newer weights exist, or a trainer waiting for samples about to exceed the bound",
        "raise the staleness bound, or rebalance the pools",
    ),
    "weight_sync": Cause(
        "overhead",
        "weight synchronisation",
        "moving updated weights to the rollout engines: busy on the GPUs that send them, idle on "
        "engines paused for it (including a trainer waiting for in-flight samples to drain first)",
        "partial rollout (interrupt instead of drain), fewer syncs, or a faster interconnect",
    ),
    "stage_serialisation": Cause(
        "idle",
        "host-side stages between GPU stages",
        "every GPU waiting for a host-side stage such as advantage computation",
        "overlap the host stage with GPU work",
    ),
    "unused": Cause(
        "idle",
        "GPUs no stage uses",
        "GPUs of the budget outside every pool this layout uses",
        "a layout that uses the whole budget",
    ),
    "recompute": Cause(
        "overhead",
        "recomputing carried or preempted samples",
        "busy rollout GPU-seconds re-prefilling tokens a sample had already computed: resumed partial "
        "samples (prompt + partial response) and requests preempted for KV-cache room (their whole "
        "context): b'*p + c'*p^2 per re-prefilled request of p tokens",
        "fewer interruptions, or more KV cache per replica",
    ),
    "generation": Cause("work", "generation", "busy rollout GPU-seconds producing tokens", "faster engines"),
    "training": Cause(
        "work",
        "training passes",
        "busy training GPU-seconds of forward passes (old log-probs, reference) and the update",
        "fewer passes (e.g. log-probs from the rollout), higher MFU",
    ),
}

COMPONENTS = (*IDLE_CAUSES, "recompute", "generation", "training")
