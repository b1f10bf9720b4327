"""Whether a cluster layout can hold the model: training and rollout memory per GPU.

A replay times a layout; it does not know whether the model fits. This module refuses
layouts that cannot run at all and warns about GPUs a layout leaves idle. Assumptions
(deliberately lenient: a refused layout is impossible, an accepted one may still need
care):

- training: full-parameter RL with Adam in mixed precision and no CPU offload —
  bf16 weights (2 bytes per parameter) and gradients (2), fp32 master weights and two
  Adam moments (4 + 4 + 4): `TRAIN_BYTES_PER_PARAM` = 16 bytes per parameter, sharded
  evenly over every training GPU (FSDP / ZeRO-3 over DP, times TP), within
  `TRAIN_MEMORY_FRACTION` of each GPU: the rest is kept for activations (checkpointed),
  the CUDA context and communication buffers, which are not counted one by one.
- rollout: each replica holds the weights (the model's dtype) split over its TP GPUs
  plus a KV cache of at least `MIN_KV_TOKENS` tokens, within the engine's
  `gpu_memory_fraction` of their memory.
- colocated policies time-share the GPUs (the engine's memory is released while
  training), so each stage must fit on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.simulator.config import ClusterConfig, EngineLimits, GpuSpec, ModelConfig

TRAIN_BYTES_PER_PARAM = 16  # bf16 weights + bf16 grads + fp32 master, Adam m and v
TRAIN_MEMORY_FRACTION = 0.9  # as vLLM's default gpu_memory_utilization: room for activations and buffers
MIN_KV_TOKENS = 4096  # the smallest useful KV cache of a rollout replica
GB = 1e9


class InfeasibleLayout(ValueError):
    """A layout (or a GPU budget) that cannot hold the model; the message starts with the
    field, as every request check's does."""


@dataclass(frozen=True)
class Shortfall:
    """A stage of a layout that does not fit: the bytes it needs and has per GPU."""

    stage: str  # "training" | "rollout"
    needed_per_gpu: float
    available_per_gpu: float
    detail: str

    def message(self, model: ModelConfig, gpu: GpuSpec) -> str:
        return (
            f"{self.stage} {model.name} on {self.detail} needs {self.needed_per_gpu / GB:.1f} GB per GPU, "
            f"but each {gpu.name} offers {self.available_per_gpu / GB:.1f} GB"
        )


def training_bytes(model: ModelConfig) -> float:
    """Weights, gradients and Adam states of full-parameter training (see the module doc)."""
    return TRAIN_BYTES_PER_PARAM * model.params


def training_shortfall(model: ModelConfig, gpu: GpuSpec, train_dp: int, train_tp: int) -> Shortfall | None:
    """None when DP × TP GPUs hold the sharded training state, else what is missing."""
    shards = max(1, train_dp * train_tp)
    need = training_bytes(model) / shards
    have = TRAIN_MEMORY_FRACTION * gpu.memory_bytes
    if need <= have:
        return None
    detail = (
        f"DP{train_dp} × TP{train_tp} (bf16 weights and gradients, fp32 Adam states: "
        f"{TRAIN_BYTES_PER_PARAM} bytes per parameter sharded over {shards} GPU{'s' if shards > 1 else ''}, in {TRAIN_MEMORY_FRACTION:.0%} of each GPU's memory)"
    )
    return Shortfall("training", need, have, detail)


def min_training_gpus(model: ModelConfig, gpu: GpuSpec) -> int:
    """The fewest GPUs whose memory holds the sharded training state."""
    return max(1, -int(-training_bytes(model) // (TRAIN_MEMORY_FRACTION * gpu.memory_bytes)))


def rollout_shortfall(model: ModelConfig, gpu: GpuSpec, tp: int, limits: EngineLimits) -> Shortfall | None:
    """None when a TP-`tp` replica holds the weights and a minimal KV cache, else what is missing."""
    need = (model.weight_bytes + MIN_KV_TOKENS * model.kv_bytes_per_token) / tp
    have = limits.gpu_memory_fraction * gpu.memory_bytes
    if need <= have:
        return None
    detail = (
        f"TP{tp} (the weights split over {tp} GPU{'s' if tp > 1 else ''} plus a KV cache of {MIN_KV_TOKENS} tokens, "
        f"in gpu_memory_fraction {limits.gpu_memory_fraction:g} of each GPU)"
    )
    return Shortfall("rollout", need, have, detail)


def layout_shortfall(cluster: ClusterConfig, model: ModelConfig, limits: EngineLimits) -> Shortfall | None:
    """The first stage of `cluster`'s layout that cannot hold the model (rollout, then training)."""
    return rollout_shortfall(model, cluster.gpu, cluster.rollout_tp, limits) or training_shortfall(
        model, cluster.gpu, cluster.train_dp, cluster.train_tp
    )


def idle_rollout_gpus(cluster: ClusterConfig, disaggregated: bool) -> int:
    """GPUs of a colocated budget the rollout leaves idle (n_gpus not a multiple of TP);
    disaggregated layouts count theirs in `defaults.unused_gpus`."""
    if disaggregated:
        return 0
    return max(0, min(cluster.n_gpus, cluster.train_gpus) - cluster.rollout_gpus)


def layout_warnings(cluster: ClusterConfig, disaggregated: bool) -> list[str]:
    """What a feasible layout wastes, in words (the never-used GPUs are warned by simulate)."""
    idle = idle_rollout_gpus(cluster, disaggregated)
    if not idle:
        return []
    return [
        f"rollout uses {cluster.rollout_gpus} of the {cluster.n_gpus} GPUs ({cluster.rollout_replicas} × "
        f"TP{cluster.rollout_tp}): {idle} GPU{'s' if idle > 1 else ''} idle during every rollout; "
        f"a budget that is a multiple of TP{cluster.rollout_tp} uses them all"
    ]


__all__ = [
    "InfeasibleLayout",
    "MIN_KV_TOKENS",
    "TRAIN_BYTES_PER_PARAM",
    "Shortfall",
    "idle_rollout_gpus",
    "layout_shortfall",
    "layout_warnings",
    "min_training_gpus",
    "rollout_shortfall",
    "training_bytes",
    "training_shortfall",
]
