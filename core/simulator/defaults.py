"""The one set of what-if defaults, shared by the API, the CLI and the dashboard.

Served by ``GET /api/v1/simulations/presets`` (``defaults``), read by the CLI's
``simulate`` options and by the dashboard's form. A request gives a GPU budget
(`n_gpus`) and may leave the layout (rollout replicas × TP, training DP) out: it is
then derived per policy from that budget, so every policy of a comparison runs on the
same GPUs and none leaves GPUs unused unless told to:

- colocated policies (sync, partial) time-share the whole cluster: rollout on
  n_gpus / TP replicas, training on all n_gpus ranks;
- disaggregated ones (one_step_off, async) split it: half for rollout (whole
  replicas), the rest for training.

Rollout TP defaults to the smallest power of two whose GPUs hold the weights in at most
`WEIGHT_SHARE` of their memory (the rest is KV cache): TP1 for a 7B model on 80 GB.
"""

from __future__ import annotations

from core.simulator.config import GPU_PRESETS, MODEL_PRESETS, ClusterConfig, GpuSpec, ModelConfig

DEFAULT_GPU = "H100"
DEFAULT_MODEL = "Qwen2.5-7B"
DEFAULT_N_GPUS = 8
DEFAULT_POLICY = "sync"
DEFAULT_COMPARE = "one_step_off"
DEFAULT_TRAIN_TP = 1
WEIGHT_SHARE = 0.5
LAYOUT_FIELDS = ("rollout_replicas", "rollout_tp", "train_dp")


def default_rollout_tp(model: ModelConfig, gpu: GpuSpec, max_gpus: int) -> int:
    """Smallest power-of-two TP whose memory holds the weights in WEIGHT_SHARE of it
    (capped by `max_gpus`, at least 1)."""
    tp = 1
    while model.weight_bytes > WEIGHT_SHARE * gpu.memory_bytes * tp and tp * 2 <= max(1, max_gpus):
        tp *= 2
    return tp


def layout_for(
    disaggregated: bool,
    n_gpus: int,
    model: ModelConfig,
    gpu: GpuSpec,
    *,
    rollout_replicas: int | None = None,
    rollout_tp: int | None = None,
    train_dp: int | None = None,
    train_tp: int = DEFAULT_TRAIN_TP,
) -> dict:
    """{rollout_replicas, rollout_tp, train_dp}: given fields kept, the others derived
    from the budget (see the module doc)."""
    n = max(1, int(n_gpus))
    if not disaggregated:
        tp = rollout_tp or default_rollout_tp(model, gpu, n)
        return {
            "rollout_replicas": rollout_replicas or max(1, n // tp),
            "rollout_tp": tp,
            "train_dp": train_dp or max(1, n // max(1, train_tp)),
        }
    if train_dp is not None and rollout_replicas is None:
        budget = max(1, n - train_dp * train_tp)
    elif rollout_replicas is not None and rollout_tp is not None:
        budget = rollout_replicas * rollout_tp
    else:
        budget = max(1, n // 2)
    tp = rollout_tp or default_rollout_tp(model, gpu, budget)
    replicas = rollout_replicas or max(1, budget // tp)
    rest = n - replicas * tp
    return {
        "rollout_replicas": replicas,
        "rollout_tp": tp,
        "train_dp": train_dp or max(1, rest // max(1, train_tp)),
    }


def unused_gpus(cluster: ClusterConfig, disaggregated: bool) -> int:
    """GPUs of the budget no stage ever uses with this layout."""
    if disaggregated:
        return max(0, cluster.n_gpus - cluster.rollout_gpus - cluster.train_gpus)
    return max(0, cluster.n_gpus - max(cluster.rollout_gpus, cluster.train_gpus))


def unused_warning(cluster: ClusterConfig, disaggregated: bool) -> str | None:
    n = unused_gpus(cluster, disaggregated)
    if not n:
        return None
    how = (
        f"rollout {cluster.rollout_gpus} + training {cluster.train_gpus}"
        if disaggregated
        else f"rollout {cluster.rollout_gpus}, training {cluster.train_gpus}"
    )
    return f"{n} of {cluster.n_gpus} GPUs are never used ({how}); leave the layout out to use the whole budget"


def defaults_dict() -> dict:
    """What `GET /simulations/presets` serves as `defaults` (besides the config fields)."""
    model, gpu = MODEL_PRESETS[DEFAULT_MODEL], GPU_PRESETS[DEFAULT_GPU]
    return {
        "gpu": DEFAULT_GPU,
        "model": DEFAULT_MODEL,
        "n_gpus": DEFAULT_N_GPUS,
        "policy_kind": DEFAULT_POLICY,
        "compare_policy": DEFAULT_COMPARE,
        "train_tp": DEFAULT_TRAIN_TP,
        "layout": "derived per policy from n_gpus when rollout_replicas, rollout_tp, train_dp are left out",
        "layouts": {
            "colocated": layout_for(False, DEFAULT_N_GPUS, model, gpu),
            "disaggregated": layout_for(True, DEFAULT_N_GPUS, model, gpu),
        },
    }
