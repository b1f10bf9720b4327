"""Figures and rows of the configuration advisor's result (POST /advice)."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboard.figures.common import empty_figure, num, styled_figure


def ranking_rows(result: dict, top: int = 20) -> list[dict]:
    """[{rank, label, params, mean, p10, p90, interval, vs_best, near_best, vs_ref, cause}]
    of the best `top` configurations: `interval` the P10-P90 in words ("uncalibrated: no
    interval" where the advice has no noise model: p10 and p90 None, never a zero-width
    interval), `params` the swept parameters in words ("" for none),
    `vs_ref` the speedup over the advice's reference (None for the reference itself) and
    `cause` the component that moves the most (`gain.phrase`)."""
    # advice stored before intervals could be absent: no noise model means no interval
    no_noise = "uncertainty" in result and result["uncertainty"] is None
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
                "interval": UNCALIBRATED if no_noise else interval_text(num(s.get("p10")), num(s.get("p90"))),
                "vs_best": num(r.get("vs_best")),
                "near_best": bool(r.get("within_noise_of_best")) and i > 1,
                "vs_ref": num(gain.get("speedup")) if gain else None,
                "cause": gain.get("phrase") if gain else None,
            }
        )
    return out


def interval_text(p10: float | None, p90: float | None) -> str:
    """A P10-P90 in words, or that there is none."""
    if p10 is None or p90 is None:
        return UNCALIBRATED
    return f"{p10:.1f}-{p90:.1f}"


UNCALIBRATED = "uncalibrated: no interval"


def _error_bars(steps: list[dict]) -> dict | None:
    """P10-P90 bars around the mean; None when a step has no interval."""
    lo, mid, hi = ([num(s.get(k)) for s in steps] for k in ("p10", "mean", "p90"))
    if any(v is None for v in (*lo, *hi)):
        return None
    return dict(
        type="data",
        symmetric=False,
        array=[(h or 0.0) - (m or 0.0) for h, m in zip(hi, mid, strict=True)],
        arrayminus=[(m or 0.0) - (low or 0.0) for m, low in zip(mid, lo, strict=True)],
    )


def winner_figure(result: dict) -> go.Figure:
    """Per step: the winner's predicted step time with its P10-P90 band (none when
    uncalibrated), and the runner-up's (the second of the ranking)."""
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
                error_y=_error_bars(steps),
                hovertemplate="step %{x}: %{y:.1f} s<extra></extra>",
            )
        )
    return fig
