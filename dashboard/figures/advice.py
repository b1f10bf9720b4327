"""Figures and rows of the configuration advisor's result (POST /advice)."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, num, styled_figure


def ranking_rows(result: dict, top: int = 20) -> list[dict]:
    """[{rank, label, params, mean, p10, p90, vs_best, near_best, vs_ref, cause}] of the
    best `top` configurations: `params` the swept parameters in words ("" for none),
    `vs_ref` the speedup over the advice's reference (None for the reference itself) and
    `cause` the component that moves the most (`gain.phrase`)."""
    out = []
    for i, r in enumerate((result.get("ranking") or [])[:top], 1):
        s = r.get("step_s") or {}
        gain = r.get("gain") or {}
        out.append(
            {
                "rank": i,
                "label": r.get("label"),
                "params": ", ".join(f"{k}={v}" for k, v in (r.get("params") or {}).items()),
                "mean": num(s.get("mean")),
                "p10": num(s.get("p10")),
                "p90": num(s.get("p90")),
                "vs_best": num(r.get("vs_best")),
                "near_best": bool(r.get("within_noise_of_best")) and i > 1,
                "vs_ref": num(gain.get("speedup")) if gain else None,
                "cause": gain.get("phrase") if gain else None,
            }
        )
    return out


def winner_figure(result: dict) -> go.Figure:
    """Per step: the winner's predicted step time with its P10-P90 band, and the
    runner-up's (the second of the ranking)."""
    ranking = result.get("ranking") or []
    if not ranking:
        return empty_figure("No advice yet", "Step time of the best configuration")
    fig = styled_figure(
        f"Step time per step: {ranking[0].get('label')}", x_title="step", y_title="predicted step time (s)"
    )
    for i, r in enumerate(ranking[:2]):
        steps = r.get("steps") or []
        x = [s["step"] for s in steps]
        name = "best" if i == 0 else "runner-up"
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[num(s.get("mean")) for s in steps],
                mode="lines+markers",
                name=f"{name}: {r.get('label')}",
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[(num(s.get("p90")) or 0) - (num(s.get("mean")) or 0) for s in steps],
                    arrayminus=[(num(s.get("mean")) or 0) - (num(s.get("p10")) or 0) for s in steps],
                ),
                hovertemplate="step %{x}: %{y:.1f} s<extra></extra>",
            )
        )
    return fig
