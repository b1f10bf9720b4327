"""Training-side stages: cost model and DP-rank synchronisation.

FLOPs of one sequence of s tokens, forward + backward: ``6·N·s + 6·L·h·s²`` (dense
weights plus causal attention); a forward-only pass (old log-probs, reference model)
is a third of that. A DP rank (TP = `train_tp` GPUs) runs at
``train_tp · peak · train_mfu / ((1 + s · (train_dp − 1)) · o)`` FLOP/s (`train_rate`):
Amdahl's law with serial fraction s = `train_serial_fraction` (the share of one rank's
work that does not split over ranks: gradient all-reduce, optimizer step, per-step
overheads), so k ranks take ``T1 · (s + (1 − s) / k)`` rather than ``T1 / k``; and o =
`colocation_overhead` when the policy is colocated (rollout and training share the GPUs:
offload and reload of weights and optimizer, memory left to the engine), 1 otherwise.

The update pass splits the step's samples (in order) into `minibatches` mini-batches;
each mini-batch is partitioned over the `train_dp` ranks (balancing none: contiguous
chunks, as verl dispatches; kk: Karmarkar–Karp equal-size; lpt: longest first to least
loaded) and the ranks synchronise (gradient all-reduce) at its end, so a mini-batch
takes its slowest rank's time; `ppo_epochs` repeats it. Forward-only passes partition
the whole batch once and synchronise at the end.

`PassTime` fields: seconds (stage time), busy (per-rank compute seconds), idle
(per-rank seconds waiting at synchronisation points = the DP-imbalance idle).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from core.analysis.balancing import karmarkar_karp, lpt
from core.simulator.config import ClusterConfig, ModelConfig, Policy


def sequence_flops(total_len: np.ndarray, model: ModelConfig, *, forward_only: bool = False) -> np.ndarray:
    s = np.asarray(total_len, dtype=np.float64)
    f = 6.0 * model.params * s + 6.0 * model.layers * model.hidden * s * s
    return f / 3.0 if forward_only else f


@dataclass
class PassTime:
    seconds: float
    busy: np.ndarray
    idle: np.ndarray


def partition(costs: np.ndarray, k: int, mode: str) -> list[np.ndarray]:
    """Indices of `costs` per DP rank."""
    n = costs.size
    if k <= 1:
        return [np.arange(n)]
    if mode == "none":
        return np.array_split(np.arange(n), k)
    if mode == "kk":
        parts = karmarkar_karp(costs.tolist(), k, equal_size=True)
    elif mode == "lpt":
        parts = lpt(costs.tolist(), k)
    else:
        raise ValueError(f"policy.balancing: unknown mode {mode!r}")
    return [np.asarray(p, dtype=np.int64) for p in parts]


def _synced_time(costs: np.ndarray, k: int, mode: str, rate: float) -> tuple[float, np.ndarray]:
    if k <= 1 or mode == "none":  # contiguous chunks (`partition`): summed as slices, no index arrays
        per_rank = np.array([costs[a:b].sum() for a, b in _chunk_bounds(costs.size, max(1, k))]) / rate
    else:
        per_rank = np.array([costs[p].sum() for p in partition(costs, k, mode)]) / rate
    if per_rank.size < k:
        per_rank = np.r_[per_rank, np.zeros(k - per_rank.size)]
    return float(per_rank.max(initial=0.0)), per_rank


def _chunk_bounds(n: int, k: int) -> list[tuple[int, int]]:
    """[start, end) of `np.array_split(range(n), k)`'s chunks."""
    q, r = divmod(n, k)
    ends = list(accumulate([q + 1] * r + [q] * (k - r)))
    return list(zip([0] + ends[:-1], ends))


def train_rate(cluster: ClusterConfig, *, colocated: bool) -> float:
    """FLOP/s of one DP rank: its peak times `train_mfu`, slowed by Amdahl's serial
    fraction over `train_dp` ranks and, when colocated, by the colocation overhead."""
    amdahl = 1.0 + cluster.train_serial_fraction * (cluster.train_dp - 1)
    overhead = cluster.colocation_overhead if colocated else 1.0
    return cluster.train_tp * cluster.gpu.peak_flops * cluster.train_mfu / (amdahl * overhead)


def training_pass(
    total_len: np.ndarray,
    model: ModelConfig,
    cluster: ClusterConfig,
    policy: Policy,
    *,
    forward_only: bool,
    colocated: bool = False,
) -> PassTime:
    """Time of one pass over the step's samples on the training ranks (`colocated`: the
    ranks share their GPUs with rollout)."""
    k = cluster.train_dp
    rate = train_rate(cluster, colocated=colocated)
    costs = sequence_flops(total_len, model, forward_only=forward_only)
    busy = np.zeros(k)
    seconds = 0.0
    if forward_only:
        chunks = [costs]
        repeats = 1
    else:
        chunks = np.array_split(costs, max(1, min(policy.minibatches, costs.size))) if costs.size else []
        repeats = policy.ppo_epochs
    for chunk in chunks:
        t, per_rank = _synced_time(chunk, k, policy.balancing, rate)
        seconds += t * repeats
        busy += per_rank * repeats
    return PassTime(seconds=seconds, busy=busy, idle=seconds - busy)


def weight_sync_seconds(model: ModelConfig, cluster: ClusterConfig) -> float:
    """Moving the updated weights to the rollout engines."""
    return model.weight_bytes / cluster.weight_sync_bandwidth
