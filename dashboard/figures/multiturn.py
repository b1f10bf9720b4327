"""Multi-turn and latency figures from the "multiturn" result
(core/analysis/multiturn.py: per-step turns/tool-call histograms, cache hit rate,
per-turn context growth, latency by token bins) and the "latency" result
(core/analysis/latency.py: per-step reward seconds over ranks, tool-call latency
percentiles).
"""

from __future__ import annotations

from html import escape

import plotly.graph_objects as go

from dashboard.figures.common import (
    column,
    empty_figure,
    integer_ticks,
    log_token_axis,
    num,
    pct,
    rows_height,
    step_gaps,
    styled_figure,
)
from dashboard.theme import PERCENTILE_COLORS, STAGE_COLORS, UNITS

PCTS = ("p50", "p90", "p99", "max")
# what "tool calls per trajectory" counted (multiturn result's tool_calls_basis)
TOOL_CALL_BASIS = {
    "tool_calls": "the trajectory's stored tool-call rows",
    "samples": "the trajectory's own tool_call_count",
    "turns": "sum of the per-turn tool_call_count (no trajectory-level count in the trace)",
}


def _steps(entries) -> list[dict]:
    return sorted([e for e in entries or [] if isinstance(e, dict)], key=lambda e: e["step"])


def counts_hist_figure(result: dict) -> go.Figure:
    """Trajectories by number of turns and by number of tool calls (all steps)."""
    s = result.get("summary") or {}
    title = "Turns and tool calls per trajectory"
    basis = TOOL_CALL_BASIS.get(str(s.get("tool_calls_basis")))
    if basis:
        title += f" <br><sup>tool calls = {basis}</sup>"
    turns, tools = s.get("turns_hist") or [], s.get("tool_calls_hist") or []
    if not any(turns) and not any(tools):
        return empty_figure(
            "No multi-turn trajectories: upload PolyTrace multiturn_workload_step_N.jsonl files (docs/formats.md)",
            title,
        )
    turns, tools = _trim(turns), _trim(tools)
    fig = styled_figure(title, x_title="count per trajectory", y_title="trajectories", barmode="group")
    if any(turns):
        fig.add_trace(
            go.Bar(
                name="turns",
                x=list(range(len(turns))),
                y=turns,
                marker_color=STAGE_COLORS["gen"],
                hovertemplate="%{y:,} trajectories with %{x} turns<extra></extra>",
            )
        )
    if any(tools):
        fig.add_trace(
            go.Bar(
                name="tool calls",
                x=list(range(len(tools))),
                y=tools,
                marker_color=STAGE_COLORS["reward"],
                hovertemplate="%{y:,} trajectories with %{x} tool calls<extra></extra>",
            )
        )
    fig.update_xaxes(dtick=1 if max(len(turns), len(tools)) <= 20 else None)
    return integer_ticks(fig, "y", from_zero=True)  # a number of trajectories


def _trim(hist: list) -> list:
    """A histogram without its trailing empty bins."""
    end = len(hist)
    while end and not hist[end - 1]:
        end -= 1
    return list(hist[:end])


def turns_over_steps_figure(result: dict) -> go.Figure:
    """Mean and max turns and tool calls per trajectory, per step."""
    steps = _steps(result.get("steps"))
    title = "Turns and tool calls per trajectory over steps"
    if not steps:
        return empty_figure(
            "No multi-turn trajectories: upload PolyTrace multiturn_workload_step_N.jsonl files (docs/formats.md)",
            title,
        )
    x = [e["step"] for e in steps]
    fig = styled_figure(title, x_title=UNITS["step"], y_title="per trajectory (count)", hovermode="x unified")
    for key, label, color, dash in (
        ("turns_mean", "turns (mean)", STAGE_COLORS["gen"], None),
        ("turns_max", "turns (max)", STAGE_COLORS["gen"], "dot"),
        ("tool_calls_mean", "tool calls (mean)", STAGE_COLORS["reward"], None),
        ("tool_calls_max", "tool calls (max)", STAGE_COLORS["reward"], "dot"),
    ):
        ys = column(steps, key)
        if all(y is None for y in ys):
            continue
        fig.add_trace(go.Scatter(name=label, x=x, y=ys, mode="lines+markers", line=dict(color=color, dash=dash)))
    return integer_ticks(step_gaps(fig))


def cache_hit_figure(result: dict) -> go.Figure:
    """Prefix-cache hit rate (cached / prompt tokens) per step, %."""
    steps = _steps(result.get("steps"))
    title = "Prefix-cache hit rate"
    ys = [pct(e.get("cache_hit_rate")) for e in steps]
    if not any(y is not None for y in ys):
        return empty_figure(
            "No per-turn cached-token counts: the turns carry no cached_tokens (PolyTrace multi-turn files do)", title
        )
    fig = styled_figure(title, x_title=UNITS["step"], y_title="cached / prompt tokens (%)")
    fig.add_trace(
        go.Scatter(
            name="cache hit rate",
            x=[e["step"] for e in steps],
            y=ys,
            mode="lines+markers",
            line=dict(color=STAGE_COLORS["old_log_prob"], width=2),
            hovertemplate="step %{x}: %{y:.1f}% cached<extra></extra>",
        )
    )
    fig.update_yaxes(range=[0, 100])
    return integer_ticks(step_gaps(fig))


def context_growth_figure(result: dict) -> go.Figure:
    """Per turn number (all steps): mean prompt (context) tokens, of which cached, and
    mean completion tokens."""
    bt = (result.get("summary") or {}).get("by_turn") or {}
    title = "Context growth by turn"
    if not bt.get("turn"):
        return empty_figure(
            "No per-turn token counts: upload PolyTrace multiturn_workload_step_N.jsonl files (docs/formats.md)", title
        )
    fig = styled_figure(title, x_title="turn", y_title="tokens per request (mean)", hovermode="x unified")
    for key, label, color in (
        ("prompt_mean", "prompt (context)", STAGE_COLORS["gen"]),
        ("cached_mean", "of which cached", STAGE_COLORS["old_log_prob"]),
        ("completion_mean", "completion", STAGE_COLORS["reward"]),
    ):
        fig.add_trace(
            go.Scatter(
                name=label,
                x=bt["turn"],
                y=[num(v) for v in bt.get(key) or []],
                mode="lines+markers",
                line=dict(color=color),
                hovertemplate=f"{label} %{{y:,.0f}} tokens<extra></extra>",
            )
        )
    fig.update_xaxes(dtick=1)
    return fig


def _signed(value: float, digits: int) -> str:
    """' + 0.024' or ' − 0.024' (a term of a sum, never '+ -0.024')."""
    return f" {'−' if value < 0 else '+'} {abs(value):.{digits}f}"


def fit_label(fit: dict) -> str:
    """'a s + b s/k prompt − c s/k completion, R² r' (b, c per thousand tokens)."""
    a, b, c, r2 = (num(fit.get(k)) for k in ("a", "b", "c", "r2"))
    text = f"{a or 0:.2f} s{_signed((b or 0) * 1000, 3)} s/k prompt{_signed((c or 0) * 1000, 3)} s/k completion"
    return text + (f", R² {r2:.2f}" if r2 is not None else ", R² n/a")


def latency_vs_tokens_figure(result: dict) -> go.Figure:
    """Mean engine latency per request against its prompt and completion tokens (log
    bins), with the least-squares fit a + b*prompt + c*completion in the title."""
    s = result.get("summary") or {}
    title = "Engine latency against tokens"
    fit = s.get("latency_fit") or {}
    if num(fit.get("a")) is not None:
        title += f" (fit: {fit_label(fit)})"
        caveats = fit.get("caveats") or []
        if caveats:  # a poor or non-physical fit is not a per-token cost: said under the title
            title += "<br><sup>caveat: " + "; ".join(escape(c, quote=False) for c in caveats) + "</sup>"
    fig = styled_figure(title, x_title=UNITS["tokens"], y_title="engine latency per request (s)", hovermode="closest")
    any_data = False
    for key, label, color in (
        ("latency_by_prompt", "by prompt tokens", STAGE_COLORS["gen"]),
        ("latency_by_completion", "by completion tokens", STAGE_COLORS["reward"]),
    ):
        b = s.get(key) or {}
        if not b.get("bin_lo"):
            continue
        any_data = True
        mid = [(lo * hi) ** 0.5 for lo, hi in zip(b["bin_lo"], b["bin_hi"])]
        fig.add_trace(
            go.Scatter(
                name=label,
                x=mid,
                y=b.get("latency_mean"),
                mode="lines+markers",
                line=dict(color=color),
                customdata=b.get("count"),
                hovertemplate="~%{x:,.0f} tokens: %{y:.2f} s (%{customdata:,} requests)<extra></extra>",
            )
        )
    if not any_data:
        return empty_figure(
            "No engine latencies: the turns carry no engine_latency_s (PolyTrace multi-turn files do)",
            "Engine latency against tokens",
        )
    xs_all = [x for tr in fig.data for x in tr.x]
    log_token_axis(fig, "x", min(xs_all), max(xs_all))
    return fig


def _add_percentile_lines(fig: go.Figure, x: list, steps: list[dict]) -> None:
    """One line per percentile (seconds) over steps."""
    for key in PCTS:
        fig.add_trace(
            go.Scatter(
                name=key,
                x=x,
                y=column(steps, key),
                mode="lines+markers",
                line=dict(color=PERCENTILE_COLORS[key]),
                hovertemplate=f"{key} %{{y:.2f}} s<extra></extra>",
            )
        )


def _add_rank_values(fig: go.Figure, steps: list[dict]) -> None:
    """One marker series per rank (seconds over steps): too few ranks for percentiles."""
    ranks = sorted({r for e in steps for r in e.get("rank") or []})
    colors = list(PERCENTILE_COLORS.values())
    for i, r in enumerate(ranks):
        at = [
            (e["step"], sec) for e in steps for rr, sec in zip(e.get("rank") or [], e.get("seconds") or []) if rr == r
        ]
        fig.add_trace(
            go.Scatter(
                name=f"rank {r}",
                x=[s for s, _ in at],
                y=[sec for _, sec in at],
                mode="lines+markers",
                line=dict(color=colors[i % len(colors)]),
                hovertemplate=f"rank {r} %{{y:.2f}} s<extra></extra>",
            )
        )


def reward_latency_figure(result: dict) -> go.Figure:
    """Reward seconds per step over ranks: p50/p90/p99/max (every rank scores in
    parallel, the step waits for the slowest), and the measured t_reward if logged."""
    steps = [e for e in _steps(result.get("reward")) if e.get("max") is not None or e.get("t_reward") is not None]
    title = "Reward time per step (over ranks)"
    if not steps:
        return empty_figure(
            "No reward timings: upload PolyTrace reward_timings_step_N.jsonl files or a verl log with "
            "timing_s/reward (docs/formats.md)",
            title,
        )
    x = [e["step"] for e in steps]
    few = [e for e in steps if e.get("few_ranks")]
    if few:  # percentiles of 2 ranks interpolate between them: the values themselves
        most = max(e.get("ranks") or 0 for e in few)
        title += f"<br><sup>{most} rank(s) per step: each rank's time, not percentiles</sup>"
    fig = styled_figure(title, x_title=UNITS["step"], y_title=UNITS["seconds"], hovermode="x unified")
    if few:
        _add_rank_values(fig, steps)
    else:
        _add_percentile_lines(fig, x, steps)
    if any(e.get("t_reward") is not None for e in steps):
        fig.add_trace(
            go.Scatter(
                name="measured t_reward",
                x=x,
                y=column(steps, "t_reward"),
                mode="lines",
                line=dict(color=STAGE_COLORS["reward"], dash="dash"),
            )
        )
    return integer_ticks(step_gaps(fig))


def reward_ranks_figure(result: dict) -> go.Figure:
    """Step x rank heatmap of reward seconds (stragglers stand out)."""
    steps = [e for e in _steps(result.get("reward")) if e.get("rank")]
    title = "Reward time per rank"
    if not steps:
        return empty_figure(
            "No per-rank reward timings: upload PolyTrace reward_timings_step_N.jsonl files (docs/formats.md)", title
        )
    ranks = sorted({r for e in steps for r in e["rank"]})
    pos = {r: i for i, r in enumerate(ranks)}
    z: list[list[float | None]] = [[None] * len(steps) for _ in ranks]
    for j, e in enumerate(steps):
        for r, sec in zip(e["rank"], e.get("seconds") or []):
            z[pos[r]][j] = num(sec)
    fig = styled_figure(
        title,
        x_title=UNITS["step"],
        y_title=UNITS["rank"],
        height=rows_height(len(ranks), per_row=14 if len(ranks) <= 64 else 3, minimum=320, maximum=900),
    )
    fig.add_trace(
        go.Heatmap(
            x=[e["step"] for e in steps],
            y=[f"rank {r}" for r in ranks],
            z=z,
            colorscale="Oranges",
            colorbar=dict(title=dict(text="s"), thickness=12),
            hovertemplate="step %{x}, %{y}: %{z:.2f} s<extra></extra>",
        )
    )
    # Categories: the ranks that score (e.g. 0 and 4, one per engine) sit next to each other.
    fig.update_yaxes(autorange="reversed", type="category")
    return integer_ticks(fig)


def tool_latency_figure(result: dict) -> go.Figure:
    """Tool-call latency per step: p50/p90/p99/max over calls."""
    steps = _steps(result.get("tools"))
    title = "Tool-call latency per step"
    if not steps:
        return empty_figure(
            "No tool calls in this trace: upload PolyTrace multiturn_workload_step_N.jsonl files, whose "
            "tool_calls[].latency_s give the tool-call latencies (docs/formats.md)",
            title,
        )
    x = [e["step"] for e in steps]
    fig = styled_figure(title, x_title=UNITS["step"], y_title=UNITS["seconds"], hovermode="x unified")
    _add_percentile_lines(fig, x, steps)
    return integer_ticks(step_gaps(fig))
