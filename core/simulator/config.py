"""What the simulator is asked to replay on: cluster, model, engine limits and policy.

Plain dataclasses with presets for common GPUs and models; everything is overridable.
Each class has `from_dict(d)` that validates JSON input and raises `ValueError` naming
the offending field (e.g. ``cluster.rollout_tp: must be an integer >= 1, got 0``), so the
REST API can pass request bodies straight through. `config_from_dict` builds all four
from one dict ``{"cluster": ..., "model": ..., "limits": ..., "policy": ...}``.

Units: FLOP/s, bytes/s, bytes, tokens, seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T", bound="DataclassInstance")

# --------------------------------------------------------------------------- presets


@dataclass(frozen=True)
class GpuSpec:
    """One GPU: dense BF16 peak FLOP/s, HBM bandwidth (bytes/s) and memory (bytes)."""

    name: str
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: float


GPU_PRESETS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("H100", 989e12, 3.35e12, 80e9),
        GpuSpec("H800", 989e12, 3.35e12, 80e9),
        GpuSpec("H200", 989e12, 4.8e12, 141e9),
        GpuSpec("H20", 148e12, 4.0e12, 96e9),
        GpuSpec("A100", 312e12, 2.039e12, 80e9),
        GpuSpec("A100-40GB", 312e12, 1.555e12, 40e9),
        GpuSpec("A800", 312e12, 2.039e12, 80e9),
        GpuSpec("L40S", 362e12, 0.864e12, 48e9),
        GpuSpec("B200", 2250e12, 8.0e12, 192e9),
        GpuSpec("MI300X", 1307e12, 5.3e12, 192e9),
    )
}


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer: total parameters, layers, hidden size, KV heads and
    head dimension (for the KV-cache size), bytes per weight/KV element."""

    name: str = "custom"
    params: float = 7.62e9
    layers: int = 28
    hidden: int = 3584
    kv_heads: int = 4
    head_dim: int = 128
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V for every layer: 2 · layers · kv_heads · head_dim · dtype bytes."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @classmethod
    def from_dict(cls, d: dict | str) -> ModelConfig:
        """A preset name, or a dict with an optional ``preset`` plus field overrides."""
        if isinstance(d, str):
            return _preset(MODEL_PRESETS, d, "model")
        d = _require_dict(d, "model")
        base = _preset(MODEL_PRESETS, d["preset"], "model.preset") if "preset" in d else cls()
        rest = {k: v for k, v in d.items() if k != "preset"}
        return _build(cls, rest, "model", base)


MODEL_PRESETS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        ModelConfig("Qwen2.5-1.5B", 1.54e9, 28, 1536, 2, 128),
        ModelConfig("Qwen2.5-3B", 3.09e9, 36, 2048, 2, 128),
        ModelConfig("Qwen2.5-7B", 7.62e9, 28, 3584, 4, 128),
        ModelConfig("Qwen2.5-14B", 14.7e9, 48, 5120, 8, 128),
        ModelConfig("Qwen2.5-32B", 32.8e9, 64, 5120, 8, 128),
        ModelConfig("Qwen2.5-72B", 72.7e9, 80, 8192, 8, 128),
        ModelConfig("Qwen2.5-VL-7B", 8.29e9, 28, 3584, 4, 128),
        ModelConfig("DeepCoder-14B", 14.7e9, 48, 5120, 8, 128),
        ModelConfig("Qwen3-4B", 4.02e9, 36, 2560, 8, 128),
        ModelConfig("Qwen3-8B", 8.19e9, 36, 4096, 8, 128),
        ModelConfig("Llama-3.1-8B", 8.03e9, 32, 4096, 8, 128),
    )
}


# --------------------------------------------------------------------------- cluster

# From verl's fully async trainer table (Qwen2.5-Math-7B, H20; docs/simulator.md shows
# the arithmetic): the serial fraction from the trainer-alone updates; the overhead is the
# median of its three trainer-alone vs colocated pairs (16/32, 32/64, 64/128 GPUs: 1.40,
# 1.24, 1.31 at that fraction), as the table has stood since verl PR #4307.
TRAIN_SERIAL_FRACTION = 0.018
COLOCATION_OVERHEAD = 1.31


@dataclass(frozen=True)
class ClusterConfig:
    """GPUs and how they are split between rollout replicas and training.

    Colocated policies (``sync``, ``partial``) time-share all `n_gpus` between rollout
    (`rollout_replicas` × `rollout_tp`) and training (`train_dp` × `train_tp`); the
    disaggregated ones (``one_step_off``, ``async``) need both pools side by side.
    Efficiencies turn peak numbers into achieved ones: `train_mfu` for training and
    reference passes, `rollout_mfu` and `bandwidth_efficiency` for the engine's roofline
    coefficients (used unless calibrated coefficients are given). Training slows further
    with its size and when it shares the GPUs with rollout (`core.simulator.training`):
    `train_serial_fraction` is Amdahl's serial fraction of a DP rank's work (time on
    `train_dp` ranks = ideal · (1 + s · (train_dp − 1))) and `colocation_overhead` the
    factor on every training pass of a colocated policy (offload and reload, memory
    shared with the engine); defaults from verl's published timings (docs/simulator.md).
    """

    gpu: GpuSpec = GPU_PRESETS["H100"]
    n_gpus: int = 8
    rollout_replicas: int = 2
    rollout_tp: int = 4
    train_dp: int = 8
    train_tp: int = 1
    train_mfu: float = 0.35
    rollout_mfu: float = 0.5
    bandwidth_efficiency: float = 0.7
    weight_sync_bandwidth: float = 100e9
    train_serial_fraction: float = field(
        default=TRAIN_SERIAL_FRACTION,
        metadata={"help": "Amdahl serial fraction of training: time on k DP ranks = ideal x (1 + s (k - 1))"},
    )
    colocation_overhead: float = field(
        default=COLOCATION_OVERHEAD,
        metadata={"help": "Factor on training passes when rollout and training share the GPUs (colocated policies)"},
    )

    @property
    def rollout_gpus(self) -> int:
        return self.rollout_replicas * self.rollout_tp

    @property
    def train_gpus(self) -> int:
        return self.train_dp * self.train_tp

    def check_fits(self, disaggregated: bool) -> None:
        """Raise ValueError when the pools do not fit in `n_gpus`."""
        if disaggregated:
            if self.rollout_gpus + self.train_gpus > self.n_gpus:
                raise ValueError(
                    f"cluster.n_gpus: disaggregated policies need rollout ({self.rollout_gpus}) + "
                    f"training ({self.train_gpus}) GPUs <= n_gpus ({self.n_gpus})"
                )
            return
        if self.rollout_gpus > self.n_gpus:
            raise ValueError(
                f"cluster.rollout_replicas: rollout_replicas × rollout_tp = {self.rollout_gpus} "
                f"> n_gpus = {self.n_gpus}"
            )
        if self.train_gpus > self.n_gpus:
            raise ValueError(f"cluster.train_dp: train_dp × train_tp = {self.train_gpus} > n_gpus = {self.n_gpus}")

    @classmethod
    def from_dict(cls, d: dict) -> ClusterConfig:
        """Fields as keys; ``gpu`` is a preset name or a dict (optional ``preset`` plus
        ``peak_flops``, ``mem_bandwidth``, ``memory_bytes`` overrides)."""
        d = dict(_require_dict(d, "cluster"))
        gpu = GPU_PRESETS["H100"]
        if "gpu" in d:
            gpu = gpu_from(d.pop("gpu"))
        out = _build(cls, d, "cluster", cls(gpu=gpu))
        return out


def gpu_from(v: Any, where: str = "cluster.gpu") -> GpuSpec:
    """A GPU from a preset name or an object (optional ``preset`` plus ``peak_flops``,
    ``mem_bandwidth``, ``memory_bytes`` overrides); ValueError names `where`."""
    if isinstance(v, GpuSpec):
        return v
    if isinstance(v, str):
        return _preset(GPU_PRESETS, v, where)
    v = _require_dict(v, where)
    base = _preset(GPU_PRESETS, v["preset"], f"{where}.preset") if "preset" in v else None
    rest = {k: x for k, x in v.items() if k != "preset"}
    if base is None:
        missing = [f for f in ("peak_flops", "mem_bandwidth", "memory_bytes") if f not in rest]
        if missing:
            raise ValueError(f"{where}.{missing[0]}: required when no preset is given")
        base = GpuSpec(str(rest.get("name", "custom")), 1.0, 1.0, 1.0)
    return _build(GpuSpec, rest, where, base)


# --------------------------------------------------------------------------- engine


@dataclass(frozen=True)
class EngineLimits:
    """Continuous-batching limits of one rollout replica.

    `kv_cache_tokens` is the KV capacity per replica in tokens; when None it is derived
    from `gpu_memory_fraction` of the replica's memory minus the weights. A prefill
    iteration admits waiting requests until `max_prefill_tokens` uncached tokens.

    Speculative decoding of the tail (off by default): while a replica runs at most
    `spec_tail_seqs` sequences, each decode iteration yields `spec_accept` tokens per
    sequence on average at `spec_cost` times the plain iteration's time (draft and
    verify). The defaults of the two are ours (a 2x faster tail token): TLT (arXiv
    2511.16665) reports 1.7-2.1x end-to-end from speculating in the rollout tail, Seer
    (arXiv 2511.14617) +74-97% rollout throughput with grouped speculation as one of its
    three techniques; neither gives an acceptance length and cost we could read.
    A policy may turn it on for its own rollouts (`divided`, as Seer does).
    """

    max_running_seqs: int = 256
    kv_cache_tokens: int | None = None
    gpu_memory_fraction: float = 0.9
    max_prefill_tokens: int = 16384
    spec_tail_seqs: int = field(
        default=0,
        metadata={"help": "speculative decoding while a replica runs at most this many sequences (0: off)"},
    )
    spec_accept: float = field(
        default=2.5,
        metadata={"help": "speculative decoding: tokens per sequence per draft-and-verify iteration (ours)"},
    )
    spec_cost: float = field(
        default=1.25,
        metadata={
            "help": "speculative decoding: a draft-and-verify iteration's time over a plain decode iteration's (ours)"
        },
    )

    def speculation(self, tail_seqs: int = 0) -> tuple[int, float]:
        """The engines' speculation: (tail sequences, decode time factor per token);
        `tail_seqs` a policy's own threshold, the larger of it and `spec_tail_seqs` holds."""
        return max(self.spec_tail_seqs, tail_seqs), self.spec_cost / self.spec_accept

    def kv_capacity(self, cluster: ClusterConfig, model: ModelConfig) -> float:
        """KV-cache tokens available on one replica (`inf` never; at least 1)."""
        if self.kv_cache_tokens is not None:
            return float(self.kv_cache_tokens)
        free = self.gpu_memory_fraction * cluster.gpu.memory_bytes * cluster.rollout_tp
        free -= model.weight_bytes
        return max(1.0, math.floor(free / model.kv_bytes_per_token))

    @classmethod
    def from_dict(cls, d: dict) -> EngineLimits:
        return _build(cls, _require_dict(d, "limits"), "limits", cls())


# --------------------------------------------------------------------------- policy

BALANCING_MODES = ("none", "kk", "lpt")
DISPATCH_MODES = ("round_robin", "least_loaded", "longest_first")
# Policy fields that take one of a fixed set of values.
_CHOICES = {"balancing": BALANCING_MODES, "dispatch": DISPATCH_MODES}


@dataclass(frozen=True)
class Policy:
    """How rollout and training are scheduled, and the training knobs.

    kind: a key of `core.simulator.policies.POLICIES` (checked there); `params` are that
      policy's own parameters (declared in its registry entry, resolved and checked by
      `core.simulator.policies.make_policy`); the fields below are shared by every policy.
    balancing: DP balancing of training samples per mini-batch (none | kk | lpt).
    dispatch: groups to rollout replicas (round_robin | least_loaded | longest_first;
      least_loaded uses what a router knows at dispatch time — prompt tokens — and
      longest_first is the oracle that knows response lengths: LPT on total tokens).
    Reward: recorded per-rank reward time when the trace has it, else
      `reward_fixed_s + reward_per_sample_s · samples / reward_workers`.
    """

    kind: str = "sync"
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    balancing: str = "none"
    dispatch: str = "round_robin"
    minibatches: int = 1
    ppo_epochs: int = 1
    old_log_prob_pass: bool = True
    ref_pass: bool = True
    reward_fixed_s: float = 0.0
    reward_per_sample_s: float = 0.0
    reward_workers: int = 1
    use_recorded_reward: bool = True
    adv_s: float = 0.0

    def __post_init__(self) -> None:
        for key, choices in _CHOICES.items():
            _check_choice(getattr(self, key), choices, f"policy.{key}")

    @classmethod
    def from_dict(cls, d: dict | str) -> Policy:
        """The shared fields checked; `params` must be an object (its keys and values are
        the policy's own, checked by `make_policy`)."""
        if isinstance(d, str):
            d = {"kind": d}
        d = dict(_require_dict(d, "policy"))
        params = _require_dict(d.pop("params", {}), "policy.params")
        return dataclasses.replace(_build(cls, d, "policy", cls()), params=dict(params))


def config_from_dict(d: dict) -> tuple[ClusterConfig, ModelConfig, EngineLimits, Policy]:
    """All four configs from ``{"cluster", "model", "limits", "policy"}`` (each optional)."""
    d = _require_dict(d, "config")
    unknown = set(d) - {"cluster", "model", "limits", "policy"}
    if unknown:
        raise ValueError(f"{sorted(unknown)[0]}: unknown section (cluster, model, limits, policy)")
    return (
        ClusterConfig.from_dict(d.get("cluster", {})),
        ModelConfig.from_dict(d.get("model", "Qwen2.5-7B")),
        EngineLimits.from_dict(d.get("limits", {})),
        Policy.from_dict(d.get("policy", {})),
    )


# --------------------------------------------------------------------------- validation

# Fields that must be >= 1 (integers) or > 0 (floats); the rest must be >= 0.
_POSITIVE = {
    "n_gpus",
    "rollout_replicas",
    "rollout_tp",
    "train_dp",
    "train_tp",
    "layers",
    "hidden",
    "kv_heads",
    "head_dim",
    "dtype_bytes",
    "max_running_seqs",
    "kv_cache_tokens",
    "max_prefill_tokens",
    "minibatches",
    "ppo_epochs",
    "reward_workers",
    "params",
    "peak_flops",
    "mem_bandwidth",
    "memory_bytes",
    "train_mfu",
    "rollout_mfu",
    "bandwidth_efficiency",
    "weight_sync_bandwidth",
    "gpu_memory_fraction",
    "spec_cost",
}
_FRACTIONS = {"train_mfu", "rollout_mfu", "bandwidth_efficiency", "gpu_memory_fraction", "train_serial_fraction"}
# Factors >= 1: ones that only ever slow something down, tokens per speculative iteration.
_FACTORS = {"colocation_overhead", "spec_accept"}


def _require_dict(d: Any, where: str) -> dict:
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
    return d


def _preset(presets: dict[str, _T], name: Any, where: str) -> _T:
    if not isinstance(name, str) or name not in presets:
        raise ValueError(f"{where}: unknown preset {name!r} (known: {', '.join(presets)})")
    return presets[name]


def _check_choice(value: Any, choices: tuple, where: str) -> None:
    if value not in choices:
        raise ValueError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")


def _build(cls: type, d: dict, where: str, base: _T) -> _T:
    """`base` with the fields of `d` replaced, each type- and range-checked."""
    fields = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for key, value in d.items():
        if key not in fields:
            raise ValueError(f"{where}.{key}: unknown field (known: {', '.join(fields)})")
        values[key] = check_field(cls, key, value, f"{where}.{key}")
    try:
        return dataclasses.replace(base, **values)
    except ValueError as exc:  # __post_init__ checks name their field already
        raise ValueError(str(exc)) from None


@dataclass(frozen=True)
class FieldRule:
    """How `from_dict` checks one plain field of a config class, described with the
    attributes of a policy parameter's `ParamInfo`, so the REST schema and the forms are
    built alike from both."""

    name: str
    type: str  # integer | number | boolean | string
    nullable: bool
    default: Any
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple[str, ...] | None = None
    help: str = ""

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["choices"] = list(self.choices) if self.choices is not None else None
        return out


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


@functools.cache
def field_rules(cls: type) -> tuple[FieldRule, ...]:
    """The rules of the plain fields of config class `cls`, in declaration order (a field
    holding another config, the cluster's `gpu`, or a mapping, a policy's `params`, is
    not plain). Types come from the annotations, bounds from the sets below."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind, nullable = _json_type(hints[f.name])
        if kind is None:
            continue
        ge: float | None = None
        gt: float | None = None
        le: float | None = None
        if kind == "integer":
            ge, le = (1 if f.name in _POSITIVE else 0), CONFIG_INT_MAX
        elif kind == "number":
            gt, ge = (0.0, None) if f.name in _POSITIVE else (None, 1.0 if f.name in _FACTORS else 0.0)
            le = 1.0 if f.name in _FRACTIONS else CONFIG_FLOAT_MAX
        default = None if f.default is dataclasses.MISSING else f.default
        out.append(
            FieldRule(f.name, kind, nullable, default, ge, gt, le, _CHOICES.get(f.name), f.metadata.get("help", ""))
        )
    return tuple(out)


def _json_type(tp: Any) -> tuple[str | None, bool]:
    """(integer | number | boolean | string, or None for anything else; nullable)."""
    nullable = False
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            return None, False
        tp, nullable = args[0], True
    return _JSON_TYPES.get(tp), nullable


def check_field(cls: type, name: str, value: Any, where: str) -> Any:
    """`value` for field `name` of config class `cls`, checked as `from_dict` checks it
    (ValueError names `where`): the one check of every config field."""
    if cls is ClusterConfig and name == "gpu":
        return gpu_from(value, where)
    rule = next((r for r in field_rules(cls) if r.name == name), None)
    if rule is None:
        raise ValueError(f"{where}: not a plain field of {cls.__name__}")
    return _coerce(value, rule, where)


def _coerce(value: Any, rule: FieldRule, where: str) -> Any:  # noqa: C901 -- one branch per config field type the request may carry
    if rule.type == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: must be true or false, got {value!r}")
        return value
    if rule.type == "string":
        if not isinstance(value, str):
            raise ValueError(f"{where}: must be a string, got {value!r}")
        if rule.choices is not None:
            _check_choice(value, rule.choices, where)
        return value
    if value is None:
        if rule.nullable:
            return None
        raise ValueError(f"{where}: must not be null")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: must be finite, got {value!r}")
    if rule.type == "integer":
        if value != int(value):
            raise ValueError(f"{where}: must be an integer, got {value!r}")
        value = int(value)
        if value > CONFIG_INT_MAX:
            raise ValueError(f"{where}: must be <= {CONFIG_INT_MAX}, got {value!r}")
    elif abs(value) > CONFIG_FLOAT_MAX:
        raise ValueError(f"{where}: must be at most {CONFIG_FLOAT_MAX:g} in magnitude, got {value!r}")
    else:
        value = float(value)
    if rule.gt is not None and value <= rule.gt:
        raise ValueError(f"{where}: must be a number > {rule.gt:g}, got {value!r}")
    if rule.ge is not None and value < rule.ge:
        what = f"an integer >= {rule.ge:g}" if rule.type == "integer" and rule.ge > 0 else f">= {rule.ge:g}"
        raise ValueError(f"{where}: must be {what}, got {value!r}")
    if rule.le is not None and value > rule.le:
        raise ValueError(f"{where}: must be <= {rule.le:g}, got {value!r}")
    return value


# Bounds of every config number: counts are int32, quantities stay far from overflow.
CONFIG_INT_MAX = 2**31 - 1
CONFIG_FLOAT_MAX = 1e30


def to_dict(obj: DataclassInstance) -> dict:
    """A config dataclass as a JSON-safe dict (the inverse of its `from_dict`)."""
    return dataclasses.asdict(obj)


__all__ = [
    "GpuSpec",
    "GPU_PRESETS",
    "ModelConfig",
    "MODEL_PRESETS",
    "ClusterConfig",
    "EngineLimits",
    "Policy",
    "BALANCING_MODES",
    "DISPATCH_MODES",
    "config_from_dict",
    "check_field",
    "field_rules",
    "FieldRule",
    "gpu_from",
    "to_dict",
]
