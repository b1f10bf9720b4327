"""GPU-timeline figures: a kernel Gantt from the `/gpu-events` payload.

Event rows: `{rank, stream, step, kind ("compute"|"communication"|"memory"), name,
start_us, dur_us}`. The server bounds how many it returns (`truncated` says when it
cut), so the browser never receives a whole trace.

The Gantt draws each event as a thick WebGL line segment (thousands of events stay
smooth to zoom), one row per (rank, stream), plus one row per rank marking the gaps
where no stream of that rank was busy (idle).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, rows_height, styled_figure
from dashboard.theme import GPU_KIND_COLORS, GPU_KINDS, IDLE_CAUSE_COLORS, UNITS


def idle_gaps(starts: np.ndarray, ends: np.ndarray, *, min_gap: float = 0.0) -> list[tuple[float, float]]:
    """Gaps longer than `min_gap` inside [first start, last end] not covered by any
    interval (the complement of the union of the intervals)."""
    if len(starts) == 0:
        return []
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.float64)[order]
    e = np.asarray(ends, dtype=np.float64)[order]
    covered_until = np.maximum.accumulate(e)
    # A gap opens before event i when it starts after everything before it has ended.
    gap_start = covered_until[:-1]
    gap_end = s[1:]
    keep = gap_end - gap_start > min_gap
    return [(float(a), float(b)) for a, b in zip(gap_start[keep], gap_end[keep])]


def _segments(x0: np.ndarray, x1: np.ndarray, y: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x/y arrays of disconnected horizontal segments: start, end, NaN (a NaN breaks the
    line). float arrays travel to the browser as compact typed arrays."""
    n = len(x0)
    xs = np.empty(3 * n, dtype=np.float64)
    xs[0::3], xs[1::3], xs[2::3] = x0, x1, np.nan
    ys = np.empty(3 * n, dtype=np.float32)
    ys[0::3] = y
    ys[1::3] = y
    ys[2::3] = np.nan
    return xs, ys


def short_kernel_name(name: str, width: int = 60) -> str:
    """A kernel name for a hover label: no return type, no template or call arguments."""
    name = name.removeprefix("void ")
    for sep in ("<", "("):
        if sep in name[1:]:
            name = name[: name.index(sep, 1)]
    return name if len(name) <= width else name[: width - 1] + "…"


def kernel_gantt_figure(
    events: list[dict],
    *,
    truncated: bool = False,
    origin_us: float | None = None,
    origin_label: str = "the first event",
    title: str = "GPU kernels per rank and stream",
    labels: bool = False,
    flows: bool = False,
    x_range_us: tuple[float, float] | None = None,
    highlight: str | None = None,
) -> go.Figure:
    """Gantt of GPU events; x = ms from `origin_us` (default: the first event), which
    the axis title names with `origin_label` (e.g. "the step start").

    Detail view options: `labels` writes the (short) kernel name on every bar wide enough
    to hold it (at most LABEL_LIMIT bars); `flows` adds a "launches (CPU)" row per rank
    and an arrow from each event's CPU launch (`launch_us`) to its start; `x_range_us`
    fixes the visible range; `highlight` (a substring) outlines the matching events."""
    if not events:
        return empty_figure("No GPU events in this window", title)
    rank = np.array([e["rank"] for e in events], dtype=np.int64)
    stream = np.array([e["stream"] for e in events], dtype=np.int64)
    start = np.array([e["start_us"] for e in events], dtype=np.float64)
    end = start + np.array([e["dur_us"] for e in events], dtype=np.float64)
    kind = np.array([e.get("kind") for e in events], dtype=object)
    names = [e.get("name") or "" for e in events]
    origin = float(start.min()) if origin_us is None else float(origin_us)
    launch = np.array([np.nan if e.get("launch_us") is None else e["launch_us"] for e in events], dtype=np.float64)
    flows = flows and bool(np.isfinite(launch).any())
    rows = _GanttRows.of(rank, stream, flows)

    suffix = " (first events only: narrow the window)" if truncated else ""
    if origin_us is None:
        origin_label = "the first event"
    fig = styled_figure(
        title + suffix,
        x_title=f"{UNITS['ms']} from {origin_label}",
        y_title="",
        height=rows_height(len(rows.labels), per_row=24),
        hovermode="closest",
    )
    width = max(3, min(14, int(400 / max(len(rows.labels), 1))))
    to_ms = lambda us: (us - origin) / 1000.0  # noqa: E731
    _add_kinds(fig, kind, names, start, end, rows.row, to_ms, width)
    _add_idle(fig, rank, start, end, rows.idle_row, to_ms, width)
    if flows:
        _add_flows(fig, rank, rows.row, start, launch, rows.cpu_row, to_ms)
    visible = (float(start.min()), float(end.max())) if x_range_us is None else x_range_us
    if labels:
        _add_labels(fig, names, start, end, rows.row, to_ms, visible)
    if highlight:
        _add_highlight(fig, highlight, names, start, end, rows.row, to_ms)
    if x_range_us is not None:
        fig.update_xaxes(range=[to_ms(x_range_us[0]), to_ms(x_range_us[1])])
    fig.update_yaxes(
        tickmode="array",
        tickvals=list(range(len(rows.labels))),
        ticktext=rows.labels,
        autorange="reversed",
        showgrid=False,
        zeroline=False,
    )
    return fig


@dataclass
class _GanttRows:
    """The Gantt's rows top to bottom: per rank its CPU launches (with flows), an idle row,
    then its streams; each event's row."""

    labels: list[str]
    row: np.ndarray
    idle_row: dict[int, int]
    cpu_row: dict[int, int]

    @classmethod
    def of(cls, rank: np.ndarray, stream: np.ndarray, flows: bool) -> _GanttRows:
        labels: list[str] = []
        row_of: dict[tuple[int, int], int] = {}
        idle_row: dict[int, int] = {}
        cpu_row: dict[int, int] = {}
        for r in np.unique(rank):
            if flows:
                cpu_row[int(r)] = len(labels)
                labels.append(f"rank {r} launches (CPU)")
            idle_row[int(r)] = len(labels)
            labels.append(f"rank {r} idle")
            for s in np.unique(stream[rank == r]):
                row_of[(int(r), int(s))] = len(labels)
                labels.append(f"rank {r} stream {s}")
        row = np.array([row_of[(int(r), int(s))] for r, s in zip(rank, stream)], dtype=np.float64)
        return cls(labels, row, idle_row, cpu_row)


def _add_kinds(fig, kind, names, start, end, row, to_ms, width) -> None:
    """One trace of bars per GPU event kind."""
    for k in GPU_KINDS:
        sel = np.flatnonzero(kind == k)
        if sel.size == 0:
            continue
        xs, ys = _segments(to_ms(start[sel]), to_ms(end[sel]), row[sel])
        # hover text on each segment's start vertex only (kernel names are long)
        text = np.full(3 * sel.size, "", dtype=object)
        text[0::3] = [f"{short_kernel_name(names[i])}<br>{(end[i] - start[i]):,.1f} us" for i in sel]
        fig.add_trace(
            go.Scatter(
                name=k,
                x=xs,
                y=ys,
                mode="lines",
                line=dict(color=GPU_KIND_COLORS[k], width=width),
                text=text.tolist(),
                hovertemplate="%{text}<br>at %{x:.3f} ms<extra>" + k + "</extra>",
            )
        )


def _add_idle(fig, rank, start, end, idle_row, to_ms, width) -> None:
    """Each rank's idle gaps (no stream busy) on its idle row."""
    gx0, gx1, gy = [], [], []
    for r, y in idle_row.items():
        m = rank == r
        for a, b in idle_gaps(start[m], end[m]):
            gx0.append(to_ms(a))
            gx1.append(to_ms(b))
            gy.append(y)
    if not gx0:
        return
    xs, ys = _segments(np.array(gx0), np.array(gx1), np.array(gy, dtype=np.float32))
    fig.add_trace(
        go.Scatter(
            name="idle (no stream busy)",
            x=xs,
            y=ys,
            mode="lines",
            line=dict(color=GPU_KIND_COLORS["idle"], width=width),
            hovertemplate="idle until %{x:.3f} ms<extra></extra>",
        )
    )


def _add_highlight(fig, highlight, names, start, end, row, to_ms) -> None:
    """Outline the events whose name holds `highlight` (case-insensitive)."""
    hit = np.array([highlight.lower() in n.lower() for n in names], dtype=bool)
    if not hit.any():
        return
    xs, ys = _segments(to_ms(start[hit]), to_ms(end[hit]), row[hit])
    fig.add_trace(
        go.Scatter(
            name=f"matches '{highlight}'",
            x=xs,
            y=ys,
            mode="lines+markers",
            line=dict(color="#E15759", width=2),
            marker=dict(color="#E15759", size=6, symbol="line-ns-open"),
            hoverinfo="skip",
        )
    )


LABEL_LIMIT = 400
FLOW_LIMIT = 3000


def _add_labels(fig, names, start, end, row, to_ms, visible) -> None:
    """Kernel names written on the bars that are at least ~1/40 of the visible span."""
    lo, hi = float(visible[0]), float(visible[1])
    span = max(hi - lo, 1e-9)
    vis = np.flatnonzero((end > lo) & (start < hi) & ((np.minimum(end, hi) - np.maximum(start, lo)) >= span / 40))
    if len(vis) > LABEL_LIMIT:
        vis = vis[np.argsort(-(end - start)[vis], kind="stable")[:LABEL_LIMIT]]
    if not len(vis):
        return
    mid = (np.maximum(start[vis], lo) + np.minimum(end[vis], hi)) / 2
    width_chars = np.maximum(((np.minimum(end[vis], hi) - np.maximum(start[vis], lo)) / span * 160).astype(int), 4)
    fig.add_trace(
        go.Scatter(
            name="kernel names",
            x=to_ms(mid),
            y=row[vis],
            mode="text",
            text=[short_kernel_name(names[i], int(w)) for i, w in zip(vis.tolist(), width_chars.tolist())],
            textfont=dict(size=10, color="#222"),
            hoverinfo="skip",
            showlegend=False,
        )
    )


def _add_flows(fig, rank, row, start, launch, cpu_row, to_ms) -> None:
    """Launch -> kernel arrows: a marker on the rank's CPU row at the launch, a thin line
    to the event's start on its stream row."""
    have = np.flatnonzero(np.isfinite(launch))[:FLOW_LIMIT]
    if not len(have):
        return
    y0 = np.array([cpu_row[int(r)] for r in rank[have]], dtype=np.float64)
    n = len(have)
    xs = np.empty(3 * n)
    ys = np.empty(3 * n)
    xs[0::3], xs[1::3], xs[2::3] = to_ms(launch[have]), to_ms(start[have]), np.nan
    ys[0::3], ys[1::3], ys[2::3] = y0, row[have], np.nan
    fig.add_trace(
        go.Scatter(
            name="launch -> kernel",
            x=xs,
            y=ys,
            mode="lines",
            line=dict(color="rgba(80,80,80,0.45)", width=1),
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            name="CPU launch",
            x=to_ms(launch[have]),
            y=y0,
            mode="markers",
            marker=dict(color="#555", size=5, symbol="triangle-down"),
            customdata=(start[have] - launch[have]),
            hovertemplate="launch at %{x:.3f} ms; the GPU started %{customdata:,.1f} us later<extra></extra>",
        )
    )


# -- breakdowns from the "gpu_timeline" analysis (core/analysis/gpu_report.py:
# `temporal`, `idle`, `kernel_types.by_kind`, `stragglers.per_rank`; tables as rows) ---
def as_columns(table) -> dict | None:
    """A result table as a column dict, whether it came as rows (list of dicts, as the
    gpu_timeline analysis stores them) or already as columns."""
    if isinstance(table, dict):
        return table
    if isinstance(table, list) and table and all(isinstance(r, dict) for r in table):
        keys = list(dict.fromkeys(k for r in table for k in r))
        return {k: [r.get(k) for r in table] for k in keys}
    return None


def temporal_breakdown_figure(table) -> go.Figure:
    """Per rank: share of the GPU's kernel time spent computing, in other GPU activity
    (communication, memory) and idle (HTA's temporal breakdown, %)."""
    table = as_columns(table)
    title = "Temporal breakdown per rank"
    if not table or not table.get("rank"):
        return empty_figure(
            "No GPU events: upload PyTorch profiler (Kineto) trace files, one per rank (docs/formats.md)", title
        )
    ranks = [f"rank {r}" for r in table["rank"]]
    fig = styled_figure(
        title,
        x_title="share of kernel time (%)",
        y_title=UNITS["rank"],
        barmode="stack",
        height=rows_height(len(ranks), per_row=26, minimum=220, maximum=900),
    )
    for key, label, color in (
        ("compute_pct", "compute", GPU_KIND_COLORS["compute"]),
        ("non_compute_pct", "communication / memory", GPU_KIND_COLORS["non_compute"]),
        ("idle_pct", "idle", GPU_KIND_COLORS["idle"]),
    ):
        us = table.get(key.replace("_pct", "_us")) or [None] * len(ranks)
        fig.add_trace(
            go.Bar(
                name=label,
                y=ranks,
                x=table.get(key),
                orientation="h",
                marker_color=color,
                customdata=[None if u is None else u / 1000 for u in us],
                hovertemplate=f"%{{y}} {label}: %{{x:.1f}}% (%{{customdata:,.1f}} ms)<extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(legend_traceorder="normal")
    fig.update_xaxes(range=[0, 100])
    return fig


def idle_breakdown_figure(table) -> go.Figure:
    """Per rank (streams summed): idle time by cause, in ms: host wait (the CPU did not
    enqueue work in time), kernel wait (launch gaps between back-to-back kernels), other."""
    table = as_columns(table)
    title = "Idle time by cause per rank"
    if not table or not table.get("rank"):
        return empty_figure(
            "No GPU events: upload PyTorch profiler (Kineto) trace files, one per rank (docs/formats.md)", title
        )
    ranks = sorted(set(table["rank"]))
    totals = {k: {r: 0.0 for r in ranks} for k in ("host_wait_us", "kernel_wait_us", "other_us")}
    for i, r in enumerate(table["rank"]):
        for k in totals:
            v = (table.get(k) or [None] * len(table["rank"]))[i]
            totals[k][r] += float(v or 0.0)
    fig = styled_figure(
        title,
        x_title=UNITS["ms"] + " (summed over streams)",
        y_title=UNITS["rank"],
        barmode="stack",
        height=rows_height(len(ranks), per_row=26, minimum=220, maximum=900),
    )
    for key, label in (("host_wait_us", "host wait"), ("kernel_wait_us", "kernel wait"), ("other_us", "other")):
        cause = key.replace("_us", "")
        fig.add_trace(
            go.Bar(
                name=label,
                y=[f"rank {r}" for r in ranks],
                x=[totals[key][r] / 1000 for r in ranks],
                orientation="h",
                marker_color=IDLE_CAUSE_COLORS[cause],
                hovertemplate=f"%{{y}} {label}: %{{x:,.1f}} ms<extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(legend_traceorder="normal")
    return fig


def kernel_kind_figure(table) -> go.Figure:
    """Per rank: busy time of each kernel kind (union of its intervals), in ms."""
    table = as_columns(table)
    title = "GPU busy time by kernel kind"
    if not table or not table.get("rank"):
        return empty_figure(
            "No GPU events: upload PyTorch profiler (Kineto) trace files, one per rank (docs/formats.md)", title
        )
    ranks = sorted(set(table["rank"]))
    fig = styled_figure(
        title,
        x_title=UNITS["ms"],
        y_title=UNITS["rank"],
        barmode="group",
        height=rows_height(len(ranks), per_row=40, minimum=220, maximum=900),
    )
    for k in GPU_KINDS:
        rows = [i for i, kk in enumerate(table.get("kind") or []) if kk == k]
        if not rows:
            continue
        fig.add_trace(
            go.Bar(
                name=k,
                y=[f"rank {table['rank'][i]}" for i in rows],
                x=[(table.get("busy_us") or [0] * len(table["rank"]))[i] / 1000 for i in rows],
                orientation="h",
                marker_color=GPU_KIND_COLORS[k],
                hovertemplate=f"%{{y}} {k}: %{{x:,.1f}} ms<extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(legend_traceorder="normal")
    return fig


def straggler_figure(table) -> go.Figure:
    """Per step and rank: compute time relative to the step's median rank (1 = typical);
    ranks the analysis flags as stragglers are drawn as red diamonds."""
    table = as_columns(table)
    title = "Stragglers: compute time vs the median rank"
    if not table or not table.get("rank"):
        return empty_figure("No per-rank step figures", title)
    if len(set(table["rank"])) < 2:
        # a rank compared with the median of itself is always 1: nothing to show
        return empty_figure("Stragglers need at least two ranks; this trace has one", title)
    fig = styled_figure(title, x_title=UNITS["rank"], y_title="compute / median rank (ratio)")
    flag = [bool(x) for x in table.get("is_straggler") or [False] * len(table["rank"])]
    for is_strag, label, color, symbol in (
        (False, "rank", GPU_KIND_COLORS["compute"], "circle"),
        (True, "straggler", "#E15759", "diamond"),
    ):
        idx = [i for i, f in enumerate(flag) if f == is_strag]
        if not idx:
            continue
        fig.add_trace(
            go.Scatter(
                name=label,
                x=[table["rank"][i] for i in idx],
                y=[table["compute_vs_median"][i] for i in idx],
                customdata=[table.get("step", [None] * len(flag))[i] for i in idx],
                mode="markers",
                marker=dict(color=color, symbol=symbol, size=10),
                hovertemplate="rank %{x}, step %{customdata}: %{y:.3f}x median<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line=dict(color="#999", width=1, dash="dot"))
    fig.update_xaxes(dtick=1 if len(set(table["rank"])) <= 32 else None)
    return fig


def top_kernels_rows(table, limit: int = 30) -> list[dict]:
    """Top kernels (kind, name, count, total ms, share of its kind) for a table."""
    cols = as_columns(table)
    if not cols:
        return []
    out = []
    for i in range(len(cols.get("name") or [])):
        out.append(
            {
                "kind": cols["kind"][i],
                "name": cols["name"][i],
                "count": cols.get("count", [None] * 999)[i],
                "sum_ms": (cols.get("sum_us") or [0] * 999)[i] / 1000.0,
                "pct_of_kind": (cols.get("pct_of_kind") or [None] * 999)[i],
            }
        )
    return sorted(out, key=lambda r: -r["sum_ms"])[:limit]
