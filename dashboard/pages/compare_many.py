"""Compare many traces (up to 12): aligned by step with a per-trace offset, side-by-side
panels for lengths, long tail, imbalance, data efficiency, stage times and GPU time where
the runs have them, and a table of differences against the first trace.

Query: /compare/many?traces=1,2,3&offsets=2:5 (kept current in the URL). Ids:
cmpn-traces, cmpn-offsets, cmpn-message, charts cmpn-lengths, cmpn-longtail,
cmpn-imbalance, cmpn-efficiency, cmpn-stages, cmpn-gpu; table cmpn-diff (rows
tr[data-figure], cells td[data-trace-id][data-part=value|delta|ratio]).
"""

from __future__ import annotations

from urllib.parse import urlencode

import dash
from dash import Input, Output, dcc, html

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.compare_many import (
    data_efficiency_figure,
    diff_rows,
    gpu_figure,
    imbalance_figure,
    lengths_figure,
    longtail_figure,
    stages_figure,
)
from dashboard.figures.metrics import parse_offsets
from dashboard.server import results as results_cache
from dashboard.server.analysis_places import analyses_shown
from dashboard.views.components import (
    alert,
    control,
    controls,
    data_attrs,
    graph,
    section,
    sign_in_required,
    signed_in,
    step_offsets_control,
)
from dashboard.views.formatting import human_number

dash.register_page(
    __name__, path="/compare/many", name="Compare many", title="Compare many · RLVR Explorer", nav="compare"
)

MAX_RUNS = 12


def _ids(text: str | None) -> list[int]:
    return [int(p) for p in (text or "").replace("#", "").split(",") if p.strip().isdigit()]


def layout(traces: str | None = None, offsets: str | None = None, **_):
    if not signed_in():
        return sign_in_required("/compare/many")
    try:
        items = session.api().list_traces(limit=500, status="ready").get("items", [])
    except ApiError as exc:
        return alert(exc.message)
    known = {t["id"] for t in items}
    chosen = [i for i in _ids(traces) if i in known][:MAX_RUNS] or [t["id"] for t in items[:2]]
    options = [{"label": f"{t['name']} (#{t['id']})", "value": t["id"]} for t in items]
    return html.Div(
        [
            html.H2("Compare many traces"),
            controls(
                control(
                    "Traces (the first is the reference)",
                    dcc.Dropdown(
                        id="cmpn-traces", options=options, value=chosen, multi=True, style={"minWidth": "480px"}
                    ),
                ),
                step_offsets_control("cmpn-offsets", offsets),
            ),
            html.Div(id="cmpn-message"),
            section(
                "Differences",
                html.Div(id="cmpn-diff"),
                help_text="Each figure per run; delta = run − reference, ratio = run / reference (the first trace).",
            ),
            html.Div(
                className="grid-2",
                children=[section("Lengths", graph("cmpn-lengths")), section("Long tail", graph("cmpn-longtail"))],
            ),
            html.Div(
                className="grid-2",
                children=[
                    section("DP imbalance", graph("cmpn-imbalance")),
                    section("Data efficiency", graph("cmpn-efficiency")),
                ],
            ),
            html.Div(
                className="grid-2",
                children=[section("Stage times", graph("cmpn-stages")), section("GPU time", graph("cmpn-gpu"))],
            ),
            dcc.Store(id="cmpn-query"),
            html.Div(id="cmpn-url-sink", hidden=True),
        ]
    )


def _results(api, trace_id) -> dict:
    """The newest succeeded result per kind: the job list without results, then each
    chosen result through the server-side result cache (results are megabytes)."""
    chosen: dict = {}
    kinds = analyses_shown("compare")  # the registry's word
    for job in api.analyses(trace_id):
        kind = job.get("kind")
        if kind in kinds and kind not in chosen and job.get("status") == "succeeded":
            chosen[kind] = job["id"]
    out = {}
    for kind, job_id in chosen.items():
        result = results_cache.job(job_id, results_cache.page_query(kind)).get("result")
        if result:
            out[kind] = result
    return out


def load_run(api, trace_id: int, offset: int) -> dict:
    trace = api.get_trace(trace_id)
    return {
        "id": trace["id"],
        "name": trace["name"],
        "offset": offset,
        "summary": api.summaries(trace_id) if trace.get("n_samples") else None,
        "steps": api.steps(trace_id) if trace.get("n_steps") else [],
        "results": _results(api, trace_id),
    }


def _fmt(v, kind: str) -> str:
    if v is None:
        return "—"
    if kind == "ratio":
        return f"{v:.2f}×"
    return human_number(v, signed=kind == "delta")


def diff_table(runs: list[dict]) -> html.Table:
    head = [html.Th("Figure")]
    for i, r in enumerate(runs):
        head.append(
            html.Th(f"{r['name']} (#{r['id']})" + (" · reference" if i == 0 else ""), colSpan=1 if i == 0 else 3)
        )
    sub = [html.Th("")] + [
        html.Th(p) for i, _ in enumerate(runs) for p in (("value",) if i == 0 else ("value", "delta", "ratio"))
    ]
    body = []
    for row in diff_rows(runs):
        cells = [html.Td(row["label"])]
        for i, (run, cell) in enumerate(zip(runs, row["runs"])):
            for part in ("value",) if i == 0 else ("value", "delta", "ratio"):
                cells.append(
                    html.Td(
                        _fmt(cell[part], part),
                        **data_attrs(
                            trace_id=str(run["id"]),
                            part=part,
                            value="" if cell[part] is None else repr(float(cell[part])),
                        ),
                    )
                )
        body.append(html.Tr(cells, **data_attrs(figure=row["key"])))
    return html.Table(
        [html.Thead([html.Tr(head), html.Tr(sub)]), html.Tbody(body)], className="table", id="cmpn-diff-table"
    )


@dash.callback(
    Output("cmpn-lengths", "figure"),
    Output("cmpn-longtail", "figure"),
    Output("cmpn-imbalance", "figure"),
    Output("cmpn-efficiency", "figure"),
    Output("cmpn-stages", "figure"),
    Output("cmpn-gpu", "figure"),
    Output("cmpn-diff", "children"),
    Output("cmpn-message", "children"),
    Output("cmpn-query", "data"),
    Input("cmpn-traces", "value"),
    Input("cmpn-offsets", "value"),
)
def fill(trace_ids, offsets_text):
    ids = [int(t) for t in trace_ids or []][:MAX_RUNS]
    query = "?" + urlencode({"traces": ",".join(map(str, ids)), **({"offsets": offsets_text} if offsets_text else {})})
    if not ids:
        fig = empty_figure("Choose traces to compare")
        return fig, fig, fig, fig, fig, fig, None, None, query
    api = session.api()
    offsets = parse_offsets(offsets_text)
    runs, notes = [], []
    for tid in ids:
        try:
            runs.append(load_run(api, tid, offsets.get(tid, 0)))
        except ApiError as exc:
            notes.append(f"#{tid}: {exc.message}")
    if len(trace_ids or []) > MAX_RUNS:
        notes.append(f"showing the first {MAX_RUNS} traces")
    return (
        lengths_figure(runs),
        longtail_figure(runs),
        imbalance_figure(runs),
        data_efficiency_figure(runs),
        stages_figure(runs),
        gpu_figure(runs),
        diff_table(runs) if runs else None,
        alert("; ".join(notes), "info") if notes else None,
        query,
    )


dash.clientside_callback(
    """
    function(query) {
        if (query && window.location.search !== query) {
            window.history.replaceState(null, '', window.location.pathname + query);
        }
        return window.dash_clientside.no_update;
    }
    """,
    Output("cmpn-url-sink", "title"),
    Input("cmpn-query", "data"),
    prevent_initial_call=True,
)
