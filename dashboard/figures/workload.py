"""Workload-fit figures from a workload job's result (workers/runners/workloads.py):

  result["fit"]   {task: report} with per task: n_samples, prompt / response {lognorm,
                  gamma: KS statistic}, joint_gmm {components, ks_prompt, ks_response},
                  tail {threshold, ks, rate}, truncation_rate, intra_group_corr, trend,
                  and for multi-turn traces multiturn {completion, tool_tokens,
                  tool_latency: KS}
  result[...]     task, steps, groups, samples_per_group, samples, files, trace_id,
                  trace_created

A KS statistic is the largest gap between the fitted and the observed CDF (0 = a
perfect fit); the generator samples from the joint mixture, the marginals are shown for
comparison.
"""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, num, rows_height, styled_figure
from dashboard.theme import TRACE_COLORS

GOOD_KS = 0.05
KS_CAPTION = (
    "KS = the largest vertical gap between a fitted distribution's CDF and the data's empirical CDF. "
    "The dotted line at 0.05 marks a close fit: nowhere more than 5 percentage points of samples off "
    "(e.g. the fit puts 55% of responses under 1k tokens where the data has 50%)."
)


def fit_rows(result: dict) -> list[dict]:
    """One row per fitted distribution: [{task, fit, ks}] (KS statistic, None when not
    fitted), in a fixed order per task."""
    rows = []
    for task, rep in sorted((result.get("fit") or {}).items()):
        rep = rep or {}
        for part in ("prompt", "response"):
            for family, label in (("lognorm", "lognormal"), ("gamma", "gamma")):
                ks = num((rep.get(part) or {}).get(family))
                if ks is not None:
                    rows.append({"task": task, "fit": f"{part} length, {label}", "ks": ks})
        joint = rep.get("joint_gmm") or {}
        k = joint.get("components")
        for part in ("prompt", "response"):
            ks = num(joint.get(f"ks_{part}"))
            if ks is not None:
                rows.append({"task": task, "fit": f"joint mixture ({k} components), {part}", "ks": ks})
        tail = num((rep.get("tail") or {}).get("ks"))
        if tail is not None:
            rows.append({"task": task, "fit": "far tail, lognormal", "ks": tail})
        labels = {
            "completion": "turn completion tokens",
            "tool_tokens": "tool response tokens",
            "tool_latency": "tool latency",
        }
        for key, label in labels.items():
            ks = num((rep.get("multiturn") or {}).get(key))
            if ks is not None:
                rows.append({"task": task, "fit": label, "ks": ks})
    return rows


def fit_ks_figure(result: dict) -> go.Figure:
    """KS statistic of every fit, one bar each (shorter is better); the dotted line marks
    0.05, labelled: a fit whose CDF is nowhere more than 5 percentage points away from
    the data's (the figure's caption on the page says so, KS_CAPTION)."""
    rows = fit_rows(result)
    title = "Goodness of fit (Kolmogorov-Smirnov statistic, lower is better)"
    if not rows:
        return empty_figure("No fit in this job (a parameter-file workload)", title)
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig = styled_figure(
        title, x_title="KS statistic", y_title="", height=rows_height(len(rows), per_row=26), barmode="group"
    )
    for i, task in enumerate(tasks):
        mine = [r for r in rows if r["task"] == task]
        label = [r["fit"] if len(tasks) == 1 else f"{task}: {r['fit']}" for r in mine]
        fig.add_trace(
            go.Bar(
                name=task,
                orientation="h",
                x=[r["ks"] for r in mine],
                y=label,
                marker_color=TRACE_COLORS[i % len(TRACE_COLORS)],
                hovertemplate="%{y}: KS %{x:.3f}<extra></extra>",
            )
        )
    fig.add_vline(
        x=GOOD_KS,
        line=dict(color="#999", width=1, dash="dot"),
        annotation_text=f"KS {GOOD_KS}: close fit",
        annotation_position="top right",
        annotation_font=dict(size=11, color="#666"),
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(showlegend=len(tasks) > 1)
    return fig


def task_summary(result: dict) -> list[dict]:
    """Per fitted task: [{task, samples, truncation_rate (the share at the length cap,
    None: unknown), intra_group_corr, tokens_per_step}] (the trend of mean
    response length per step)."""
    out = []
    for task, rep in sorted((result.get("fit") or {}).items()):
        rep = rep or {}
        out.append(
            {
                "task": task,
                "samples": rep.get("n_samples"),
                "truncation_rate": num(rep.get("truncation_rate")),
                "intra_group_corr": num(rep.get("intra_group_corr")),
                "tokens_per_step": num((rep.get("trend") or {}).get("mean_tokens_per_step")),
            }
        )
    return out
