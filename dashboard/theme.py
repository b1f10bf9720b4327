"""The dashboard's one visual language: fixed colours, labels and units.

A stage, a GPU activity kind, a percentile or a rank keeps the same colour on every
page, so a reader who learnt "orange = reward" on the overview reads the GPU timeline
without a legend hunt.
"""

from __future__ import annotations

from plotly.colors import sample_colorscale

# Training-step stages in execution order (verl's timing_s/* keys, t_* columns of Step).
STAGES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor")
STAGE_COLORS = {
    "gen": "#4E79A7",
    "reward": "#F28E2B",
    "old_log_prob": "#59A14F",
    "ref": "#B07AA1",
    "adv": "#EDC948",
    "update_actor": "#E15759",
    "other": "#BAB0AC",  # t_step minus the named stages
    "wait": "#E4E4E4",  # a rank waiting at a barrier for the slowest rank
}
STAGE_LABELS = {
    "gen": "generation",
    "reward": "reward",
    "old_log_prob": "old log-prob",
    "ref": "reference",
    "adv": "advantage",
    "update_actor": "actor update",
    "other": "other",
    "wait": "waiting for slowest rank",
}

# GPU activity kinds of Kineto events (backend.formats.base.GpuKind order).
GPU_KINDS = ("compute", "communication", "memory")
GPU_KIND_COLORS = {
    "compute": "#76B7B2",
    "communication": "#FF9DA7",
    "memory": "#9C755F",
    "idle": "#D0D0D0",
    "non_compute": "#FF9DA7",
}
IDLE_CAUSE_COLORS = {"host_wait": "#8CD17D", "kernel_wait": "#B6992D", "other": "#D0D0D0"}

# Simulator replays: busy stages of the simulated GPU timeline (the rollout is the
# generation stage) and the causes its idle GPU time is split by
# (core/simulator/result.py IDLE_CAUSES): light tones, so busy time stands out.
SIM_STAGE_COLORS = {
    "rollout": STAGE_COLORS["gen"],
    "reward": STAGE_COLORS["reward"],
    "old_log_prob": STAGE_COLORS["old_log_prob"],
    "ref": STAGE_COLORS["ref"],
    "adv": STAGE_COLORS["adv"],
    "update_actor": STAGE_COLORS["update_actor"],
    "weight_sync": "#FF9DA7",
    "recompute": "#9D7660",
}
SIM_STAGE_LABELS = {
    **STAGE_LABELS,
    "rollout": "rollout",
    "weight_sync": "weight sync",
    "recompute": "recompute (re-prefill of carried or preempted samples)",
}
SIM_IDLE_COLORS = {
    "rollout_tail": "#A0CBE8",
    "tool_wait": "#D7B5A6",
    "reward_wait": "#FFBE7D",
    "dp_imbalance": "#FF9D9A",
    "trainer_waits_rollout": "#B3E2CD",
    "rollout_waits_trainer": "#CBD5E8",
    "staleness_wait": "#F4CAE4",
    "weight_sync": "#FDDBC7",
    "stage_serialisation": "#D4A6C8",
    "unused": "#C9C9C9",
}
# the replay's idle causes in the order it explains them (core.simulator.causes)
SIM_IDLE_CAUSES = tuple(SIM_IDLE_COLORS)
SIM_IDLE_LABELS = {
    "rollout_tail": "rollout tail (waiting for the longest samples)",
    "tool_wait": "waiting for tools",
    "reward_wait": "waiting for reward",
    "dp_imbalance": "DP imbalance",
    "trainer_waits_rollout": "trainer pool waiting for rollouts",
    "rollout_waits_trainer": "rollout pool waiting for the trainer",
    "staleness_wait": "held back by the staleness bound",
    "weight_sync": "paused for a weight sync",
    "stage_serialisation": "waiting for a host-side stage",
    "unused": "not used by the policy",
}

# Percentile lines: one hue, darker = further into the tail.
PERCENTILE_COLORS = {
    "mean": "#7F7F7F",
    "p50": "#9ECAE1",
    "p90": "#4292C6",
    "p99": "#08519C",
    "max": "#08306B",
}

# Two traces side by side on the compare page.
TRACE_COLORS = ("#2F4B7C", "#D45087")

# Counterfactual balancing policies on the imbalance page.
POLICY_COLORS = {"measured": "#E15759", "kk": "#59A14F", "lpt": "#4E79A7"}
# Replays: policy A and B, and what was measured / the naive predictor.
REPLAY_COLORS = {"a": "#4E79A7", "b": "#F28E2B", "measured": "#222222", "naive": "#9D9D9D"}

STEP_COLORSCALE = "Plasma"  # early -> late steps, e.g. overlaid CDFs
HEATMAP_COLORSCALE = "Blues"

FONT = dict(family="Inter, system-ui, -apple-system, Segoe UI, sans-serif", size=12, color="#222")

# Axis titles, always with units.
UNITS = {
    "step": "training step",
    "tokens": "length (tokens)",
    "seconds": "time (s)",
    "ms": "time (ms)",
    "share": "share of samples (%)",
    "cdf": "cumulative share of samples",
    "rank": "rank",
    "dp_rank": "DP rank",
}


def stage_color(stage: str) -> str:
    return STAGE_COLORS.get(stage, STAGE_COLORS["other"])


def step_color(index: int, n: int) -> str:
    """The i-th of n chosen steps on the step colour scale (early dark, late bright)."""
    pos = 0.0 if n <= 1 else index / (n - 1)
    return sample_colorscale(STEP_COLORSCALE, [0.85 * pos])[0]


def base_layout(**overrides) -> dict:
    """Layout defaults shared by every figure (white background, compact margins)."""
    layout = dict(
        template="plotly_white",
        height=400,
        font=FONT,
        margin=dict(l=64, r=24, t=76, b=52),
        # The title in the top margin; the legend right of the plot (the margin grows to
        # fit it), so however many entries it has it covers neither the title nor the data.
        legend=dict(orientation="v", yanchor="top", y=1.0, xanchor="left", x=1.02, font=dict(size=11)),
        hovermode="closest",
        title=dict(font=dict(size=14), x=0.01, xanchor="left", y=0.985, yanchor="top", yref="container"),
    )
    layout.update(overrides)
    return layout
