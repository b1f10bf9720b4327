"""Figures and table rows for the HTA analyses of the "gpu_timeline" result
(core/analysis/gpu_report.py: comm_comp_overlap, queue_length, launch_stats,
kernel_breakdown, memory_bw, user_annotations, per_step, potential_stragglers; every
table a list of row dicts). Pure functions of the payload."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, rows_height, styled_figure
from dashboard.figures.gpu import as_columns, short_kernel_name
from dashboard.theme import GPU_KIND_COLORS, UNITS


def overlap_figure(table) -> go.Figure:
    """Per rank: share of communication (NCCL) time during which a computation kernel
    also ran (HTA get_comm_comp_overlap)."""
    cols = as_columns(table)
    title = "Communication overlapped by computation"
    if not cols or not cols.get("rank"):
        return empty_figure("No GPU events", title)
    pct = cols.get("comm_comp_overlap_pct") or []
    no_times = [None] * len(cols["rank"])  # a table without the ms columns: hover shows 0
    if all(p is None for p in pct):
        return empty_figure("No communication kernels on any rank", title)
    fig = styled_figure(
        title,
        x_title="communication time overlapped (%)",
        y_title=UNITS["rank"],
        height=rows_height(len(cols["rank"]), per_row=26, minimum=220, maximum=900),
    )
    fig.add_trace(
        go.Bar(
            y=[f"rank {r}" for r in cols["rank"]],
            x=pct,
            orientation="h",
            marker_color=GPU_KIND_COLORS["communication"],
            customdata=[
                [(c or 0) / 1000, (o or 0) / 1000]
                for c, o in zip(cols.get("comm_us") or no_times, cols.get("overlap_us") or no_times)
            ],
            hovertemplate="%{y}: %{x:.2f}% of %{customdata[0]:,.1f} ms communication overlapped "
            "(%{customdata[1]:,.1f} ms)<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(range=[0, 100])
    return fig


def queue_length_figure(table) -> go.Figure:
    """Per rank and stream: mean and max number of GPU operations launched but not yet
    started (HTA get_queue_length_summary; values at each change of the queue)."""
    cols = as_columns(table)
    title = "CUDA launch queue per stream"
    if not cols or not cols.get("rank"):
        return empty_figure("No queue-length figures (needs the trace's CPU runtime events)", title)
    labels = [f"rank {r} stream {s}" for r, s in zip(cols["rank"], cols["stream"])]
    fig = styled_figure(
        title,
        x_title="queued GPU operations (count)",
        y_title="",
        barmode="group",
        height=rows_height(len(labels), per_row=30, minimum=220, maximum=1200),
    )
    for key, label, color in (("mean", "mean", "#4E79A7"), ("max", "max", "#F28E2B")):
        fig.add_trace(
            go.Bar(
                name=label,
                y=labels,
                x=cols.get(key),
                orientation="h",
                marker_color=color,
                hovertemplate=f"%{{y}} {label}: %{{x:,.1f}}<extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


def per_step_figure(table) -> go.Figure:
    """Per ProfilerStep and rank: idle share of the GPU's kernel time (HTA temporal
    breakdown applied to each step's events)."""
    cols = as_columns(table)
    title = "Idle share per ProfilerStep"
    if not cols or not cols.get("step"):
        return empty_figure("No per-step figures (the trace has fewer than two ProfilerSteps)", title)
    fig = styled_figure(title, x_title="ProfilerStep", y_title="idle (% of kernel time)", barmode="group")
    for r in sorted(set(cols["rank"])):
        idx = [i for i, x in enumerate(cols["rank"]) if x == r]
        fig.add_trace(
            go.Bar(
                name=f"rank {r}",
                x=[str(cols["step"][i]) for i in idx],
                y=[cols["idle_pct"][i] for i in idx],
                customdata=[cols["compute_pct"][i] for i in idx],
                hovertemplate=f"rank {r}, step %{{x}}: idle %{{y:.2f}}%, compute %{{customdata:.2f}}%<extra></extra>",
            )
        )
    fig.update_xaxes(type="category")
    fig.update_yaxes(rangemode="tozero")
    return fig


def _fmt(v, spec: str = ",.1f") -> str:
    return "—" if v is None else format(v, spec)


def launch_stats_rows(table) -> list[dict]:
    """Kernel-launch statistics per rank, formatted (HTA get_cuda_kernel_launch_stats)."""
    cols = as_columns(table) or {}
    out = []
    for i, r in enumerate(cols.get("rank") or []):
        out.append(
            {
                "rank": r,
                "launches": _fmt(cols["n_launches"][i], ","),
                "delay median (us)": _fmt(cols["launch_delay_median_us"][i]),
                "delay p95 (us)": _fmt(cols["launch_delay_p95_us"][i]),
                "CPU launch median (us)": _fmt(cols["cpu_duration_median_us"][i]),
                "GPU median (us)": _fmt(cols["gpu_duration_median_us"][i]),
                "GPU shorter than launch": _fmt(cols["n_gpu_shorter_than_cpu"][i], ","),
                "launch > 50 us": _fmt(cols["n_runtime_outliers"][i], ","),
                "delay > 100 us": _fmt(cols["n_launch_delay_outliers"][i], ","),
            }
        )
    return out


def memory_bw_rows(table) -> list[dict]:
    cols = as_columns(table) or {}
    return [
        {
            "rank": r,
            "copy kind": cols["name"][i],
            "points": _fmt(cols["count"][i], ","),
            "mean (GB/s)": _fmt(cols["mean"][i], ",.2f"),
            "median (GB/s)": _fmt(cols["p50"][i], ",.2f"),
            "max (GB/s)": _fmt(cols["max"][i], ",.2f"),
        }
        for i, r in enumerate(cols.get("rank") or [])
    ]


def annotation_rows(table, limit: int = 50) -> list[dict]:
    cols = as_columns(table) or {}
    rows = [
        {
            "rank": r,
            "annotation": cols["name"][i],
            "total (ms)": (cols["sum_us"][i] or 0) / 1000,
            "mean (ms)": (cols["mean_us"][i] or 0) / 1000,
            "max (ms)": (cols["max_us"][i] or 0) / 1000,
        }
        for i, r in enumerate(cols.get("rank") or [])
    ]
    rows.sort(key=lambda x: -x["total (ms)"])
    return [{k: (_fmt(v, ",.2f") if isinstance(v, float) else v) for k, v in x.items()} for x in rows[:limit]]


def kernel_type_rows(breakdown) -> list[dict]:
    """HTA's kernel-type table: time per type and per overlap of types, over all ranks."""
    cols = as_columns((breakdown or {}).get("by_type")) or {}
    return [
        {"kernel type": k, "time (ms)": _fmt((s or 0) / 1000, ",.2f"), "share (%)": _fmt(p, ".1f")}
        for k, s, p in zip(cols.get("kernel_type") or [], cols.get("sum_us") or [], cols.get("percentage") or [])
    ]


def stragglers_text(result: dict | None) -> str:
    """HTA's potential stragglers as one sentence."""
    if not result:
        return "Potential stragglers need the trace's CPU-side events."
    if not result.get("stragglers"):
        return f"Potential stragglers: none found ({result.get('note', 'no candidate')})."
    ranks = ", ".join(str(r) for r in result["stragglers"])
    return (
        f"Potential stragglers (HTA's rule: latest start of the most rank-variable NCCL kernel, "
        f"{short_kernel_name(result.get('kernel') or '')} on stream {result.get('stream')}): rank {ranks}."
    )
