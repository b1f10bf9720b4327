"""The Simulate page's "Measured on a real engine" panel, for a trace replayed on real
inference engines (`rlvr-explorer engine-replay`, or an engine-queue job): the latest
succeeded replay's predicted and measured figures side by side (a table and a bar
chart), the profile the prediction came from, and the trace's other engine replays.
Drawn with the page (no callback): it reads `GET /traces/{id}/engine-replays` once.

Ids: engine-measured (the section), engine-measured-table (one <tr data-figure> per
figure: predicted, measured, error), engine-measured-chart, engine-measured-about,
engine-measured-history (one <tr data-job-id> per replay, when there are several).
"""

from __future__ import annotations

from dash import dcc, html

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.engine_measured import engine_measured_figure, figure_rows
from dashboard.views.components import GRAPH_CONFIG, alert, data_attrs, section


def _value(key: str, v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if key == "decoded_tokens" else f"{v:.3f}"


def _error(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:+.1f}%"


HEADS = ("Figure", "Predicted", "Measured", "Error")


def figures_table(replay: dict) -> html.Table:
    head = html.Tr([html.Th(h, className="num" if h != "Figure" else None) for h in HEADS])
    rows = [
        html.Tr(
            [
                html.Td(r["label"]),
                html.Td(_value(r["key"], r["predicted"]), className="num"),
                html.Td(_value(r["key"], r["measured"]), className="num"),
                html.Td(_error(r["error"]), className="num"),
            ],
            **data_attrs(figure=r["key"]),
        )
        for r in figure_rows(replay)
    ]
    return html.Table([html.Thead(head), html.Tbody(rows)], className="table", id="engine-measured-table")


def about(replay: dict) -> str:
    """What ran, and what the prediction came from."""
    runs = f"{replay.get('engines')} x {replay.get('engine')} ({replay.get('device')}, {replay.get('arch')})"
    done = f"{replay.get('requests')} requests ({replay.get('aborted') or 0} aborted)"
    exact = "yes" if replay.get("lengths_exact") else "NO"
    scale = replay.get("length_scale")
    scaled = f", lengths x {scale:g}" if scale not in (None, 1, 1.0) else ""
    p = replay.get("profile")
    source = (
        f"engine profile {p['id']} (decode fit R² {p['decode_r2']:.2f}, prefill R² {p['prefill_r2']:.2f})"
        if p and p.get("decode_r2") is not None and p.get("prefill_r2") is not None
        else f"engine profile {replay.get('profile_id')}"
    )
    return (
        f"Engine replay {replay['job_id']}: policy {replay.get('policy')}, {done} on {runs}{scaled}; "
        f"lengths exact: {exact}. Predicted by the simulator from {source}, never from this run."
    )


def history_table(replays: list[dict]) -> html.Table:
    head = html.Tr([html.Th(h) for h in ("Replay", "Status", "Policy", "Requests", "Makespan error")])
    rows = [
        html.Tr(
            [
                html.Td(str(r["job_id"])),
                html.Td(r["status"]),
                html.Td(r.get("policy") or (r.get("params") or {}).get("policy") or ""),
                html.Td("" if r.get("requests") is None else str(r["requests"])),
                html.Td(_error((r.get("error") or {}).get("makespan")) if r.get("error") else ""),
            ],
            **data_attrs(job_id=str(r["job_id"])),
        )
        for r in replays
    ]
    return html.Table([html.Thead(head), html.Tbody(rows)], className="table", id="engine-measured-history")


def engine_measured_section(trace_id: int) -> html.Section | html.Div | None:
    """The panel; None when the trace was never replayed on an engine."""
    try:
        replays = session.api().engine_replays(trace_id)
    except ApiError as exc:
        return alert(exc.message)
    if not replays:
        return None
    done = [r for r in replays if r["status"] == "succeeded" and r.get("measured")]
    children: list = []
    if done:
        latest = done[0]
        children += [
            html.P(about(latest), id="engine-measured-about"),
            *[alert(w, "warn") for w in latest.get("warnings") or []],
            html.Div(
                className="grid-2",
                children=[
                    figures_table(latest),
                    dcc.Graph(
                        id="engine-measured-chart",
                        figure=engine_measured_figure(latest),
                        config=GRAPH_CONFIG,
                        className="chart",
                    ),
                ],
            ),
        ]
    else:
        children.append(html.P("No engine replay of this trace has finished yet: reload to see it.", className="muted"))
    if len(replays) > 1 or not done:
        children.append(history_table(replays))
    return html.Div(
        section(
            "Measured on a real engine",
            *children,
            help_text="The trace's recorded work acted out on real inference engines, beside the simulator's "
            "prediction of the same workload from an engine profile (a batch x context sweep on that engine). "
            "Error = (predicted − measured) / measured.",
        ),
        id="engine-measured",
    )
