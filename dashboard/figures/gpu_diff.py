"""The GPU trace diff on the Compare page (GET /traces/{a}/gpu-diff?test_trace_id=b):
a summary line, the largest changes in total time, and a table. Pure functions of the
payload ({rows: columns, ops_diff, control, test})."""

from __future__ import annotations

import plotly.graph_objects as go
from dash import html

from dashboard.figures.common import empty_figure, styled_figure
from dashboard.figures.gpu import short_kernel_name

DIFF_ROWS = 40


def _diff_rows(diff: dict) -> list[dict]:
    cols = diff.get("rows") or {}
    names = cols.get("name") or []
    return [{k: cols[k][i] for k in cols} for i in range(len(names))]


def diff_summary(diff: dict):
    g = diff.get("ops_diff") or {}
    c, t = diff.get("control") or {}, diff.get("test") or {}
    return html.P(
        f"A: rank {c.get('rank')}, step {c.get('step')}; B: rank {t.get('rank')}, step {t.get('step')}. "
        f"{g.get('added', 0)} added, {g.get('deleted', 0)} deleted, {g.get('increased', 0)} more often, "
        f"{g.get('decreased', 0)} less often, {g.get('unchanged', 0)} unchanged in count."
    )


def diff_figure(diff: dict):
    """The ops / kernels whose total time changed most (B minus A, ms)."""
    rows = sorted(_diff_rows(diff), key=lambda r: -abs(r["diff_duration_us"]))[:20]
    if not rows:
        return empty_figure("No ops in the compared steps")
    rows = rows[::-1]
    fig = styled_figure(
        "Largest changes in total time (B - A)",
        x_title="time change (ms)",
        y_title="",
        height=max(300, 60 + 24 * len(rows)),
    )
    fig.add_trace(
        go.Bar(
            y=[short_kernel_name(r["name"], 50) for r in rows],
            x=[r["diff_duration_us"] / 1000 for r in rows],
            orientation="h",
            marker_color=["#E15759" if r["diff_duration_us"] > 0 else "#59A14F" for r in rows],
            customdata=[[r["control_counts"], r["test_counts"]] for r in rows],
            hovertemplate="%{y}: %{x:+,.3f} ms (count %{customdata[0]} -> %{customdata[1]})<extra></extra>",
        )
    )
    fig.update_yaxes(type="category")
    return fig


def diff_table(diff: dict):
    rows = sorted(_diff_rows(diff), key=lambda r: (r["change"] == "=", -abs(r["diff_duration_us"])))[:DIFF_ROWS]
    if not rows:
        return None
    head = html.Tr(
        [html.Th(h) for h in ("Op / kernel", "Change")]
        + [html.Th(h, className="num") for h in ("Count A", "Count B", "Total A (ms)", "Total B (ms)", "B - A (ms)")]
    )
    body = [
        html.Tr(
            [
                html.Td(short_kernel_name(r["name"], 90), title=r["name"]),
                html.Td(
                    "added"
                    if r["control_counts"] == 0
                    else "deleted"
                    if r["test_counts"] == 0
                    else {"+": "more", "-": "fewer", "=": "same count"}[r["change"]]
                ),
                html.Td(f"{r['control_counts']:,}", className="num"),
                html.Td(f"{r['test_counts']:,}", className="num"),
                html.Td(f"{r['control_total_us'] / 1000:,.3f}", className="num"),
                html.Td(f"{r['test_total_us'] / 1000:,.3f}", className="num"),
                html.Td(f"{r['diff_duration_us'] / 1000:+,.3f}", className="num"),
            ]
        )
        for r in rows
    ]
    return html.Table([html.Thead(head), html.Tbody(body)], className="table")
