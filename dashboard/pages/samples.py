"""The samples behind a chart: a paged, sortable sample table with the drill-down's
filters in the URL query, a sample's turn timeline, and a step's request timeline.

URL: ``/traces/<id>/samples?step=&step_min=&step_max=&response_len_min=&response_len_max=
&dp_rank=&num_turns=&truncated=&sort=&order=&page=&sample=<step>.<group>.<sample>`` --
every filter, the sort and the page live in the query, so a chart's click is a link and
a view can be shared. The server filters, sorts and pages (GET /traces/{id}/samples).

Ids: samples-filters (the filter form), samples-total, samples-table (rows carry
``data-key="step.group.sample"``), samples-prev / samples-next, sample-turns and
sample-tokens (a sample's turns, when ``sample=`` is given: its row is highlighted,
class ``focused``), request-timeline (the
step's trajectories, when one step is filtered and the trace has turns).
"""

from __future__ import annotations

import dash
from dash import dcc, html
from dash.development.base_component import Component

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.samples import request_timeline_figure, turn_timeline_figure, turn_tokens_figure
from dashboard.pages.sample import sample_href
from dashboard.views.components import GRAPH_CONFIG, alert, control, data_attrs, section, yes_no_select
from dashboard.views.drill import samples_href
from dashboard.views.reward_length_panel import length_unit_note
from dashboard.views.trace_frame import trace_page

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/samples",
    name="Samples",
    title="Samples · RLVR Explorer",
    nav="trace",
    order=9,
)

PAGE_SIZE = 50
INT_FILTERS = ("step", "step_min", "step_max", "response_len_min", "response_len_max", "dp_rank", "num_turns")
FILTER_LABELS = {
    "step": "step",
    "step_min": "steps from",
    "step_max": "steps to",
    "response_len_min": "response length ≥",
    "response_len_max": "response length <",
    "dp_rank": "DP rank",
    "num_turns": "turns",
    "truncated": "truncated",
}
COLUMNS = (
    ("step", "step"),
    ("group_idx", "group"),
    ("sample_idx", "sample"),
    ("dp_rank", "DP rank"),
    ("prompt_len", "prompt tokens"),
    ("response_len", "response tokens"),
    ("truncated", "truncated"),
    ("reward", "reward"),
    ("num_turns", "turns"),
    ("num_tool_calls", "tool calls"),
    ("latency_s", "latency (s)"),
)
SORTABLE = {c for c, _ in COLUMNS}


def parse_query(query: dict) -> dict:
    """The filters, sort, order and page of a query string (bad values dropped)."""
    out: dict = {}
    for key in INT_FILTERS:
        value = str(query.get(key) or "").strip()
        if value.lstrip("-").isdigit():
            out[key] = int(value)
    truncated = str(query.get("truncated") or "").lower()
    if truncated in ("true", "false"):
        out["truncated"] = truncated
    sort = query.get("sort")
    out["sort"] = sort if sort in SORTABLE else "step"
    out["order"] = "desc" if query.get("order") == "desc" else "asc"
    page = str(query.get("page") or "")
    out["page"] = int(page) if page.isdigit() else 0
    if _sample_key(query.get("sample")) is not None:
        out["sample"] = str(query["sample"])
    return out


def _cell(column: str, value) -> str:
    if value is None:
        return "–"
    if column == "truncated":
        return "yes" if value else "no"
    if column == "reward":
        return f"{value:.3g}"
    if column == "latency_s":
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}" if column in ("prompt_len", "response_len") else str(value)
    return str(value)


def _at_cap_note(trace: dict) -> html.P | None:
    """Where stop reasons are recorded, how to see the samples at the length cap too (a
    sample may end there for another reason): the second figure's definition."""
    t = trace.get("truncation") or {}
    if not t.get("stop_reason") or not t.get("length_cap"):
        return None
    return html.P(
        f"{t.get('at_cap_definition', '')}: filter response length ≥ {t['length_cap']:,} to list them.",
        className="help",
        id="samples-at-cap-definition",
    )


def _filter_form(trace_id, q: dict, truncation_known: bool = True) -> html.Form:
    fields: list[Component] = []
    for key in INT_FILTERS:
        fields.append(
            html.Label(
                [
                    html.Span(FILTER_LABELS[key], className="control-label"),
                    dcc.Input(name=key, id=f"samples-f-{key}", type="number", value=q.get(key), debounce=True),
                ],
                className="control",
            )
        )
    if truncation_known:  # a trace without stop reasons or a cap has no truncated filter
        fields.append(control("truncated", yes_no_select("truncated", "samples-f-truncated", q)))
    fields += [
        dcc.Input(type="hidden", name="sort", value=q["sort"]),
        dcc.Input(type="hidden", name="order", value=q["order"]),
        html.Button("Apply", type="submit", className="button"),
        html.A("Clear", href=samples_href(trace_id, {}), className="button secondary"),
    ]
    return html.Form(fields, id="samples-filters", method="GET", className="controls")


def _table(trace_id, q: dict, page: dict, has_texts: bool = False) -> html.Div:
    base = {k: v for k, v in q.items() if k != "page"}
    head = []
    for column, label in COLUMNS:
        order = "desc" if q["sort"] == column and q["order"] == "asc" else "asc"
        arrow = (" ▲" if q["order"] == "asc" else " ▼") if q["sort"] == column else ""
        head.append(
            html.Th(
                html.A(label + arrow, href=samples_href(trace_id, {**base, "sort": column, "order": order, "page": 0}))
            )
        )
    head.append(html.Th("turn timeline"))
    if has_texts:
        head.append(html.Th("text"))
    rows = []
    for item in page["items"]:
        key = f"{item['step']}.{item['group_idx']}.{item['sample_idx']}"
        cells = [html.Td(_cell(c, item.get(c))) for c, _ in COLUMNS]
        link = html.A("timeline", href=samples_href(trace_id, {**q, "sample": key})) if item.get("num_turns") else "–"
        cells.append(html.Td(link))
        if has_texts:  # the sample's prompt and response (dashboard/pages/sample.py)
            cells.append(
                html.Td(html.A("text", href=sample_href(trace_id, *key.split(".")), className="sample-text-link"))
            )
        classes = " ".join(
            c for c, on in (("truncated", item.get("truncated")), ("focused", key == q.get("sample"))) if on
        )
        rows.append(html.Tr(cells, **data_attrs(key=key), className=classes or None))
    total = page["total"]
    first = q["page"] * PAGE_SIZE
    shown = f"{first + 1:,}–{first + len(page['items']):,}" if page["items"] else "none"
    more = "+" if page.get("total_is_lower_bound") else ""
    nav: list[Component] = [html.Span(f"samples {shown} of {total:,}{more}", id="samples-total")]
    if q["page"] > 0:
        nav.append(html.A("← previous", id="samples-prev", href=samples_href(trace_id, {**q, "page": q["page"] - 1})))
    if first + len(page["items"]) < total:
        nav.append(html.A("next →", id="samples-next", href=samples_href(trace_id, {**q, "page": q["page"] + 1})))
    return html.Div(
        [
            html.Div(nav, className="controls"),
            html.Table([html.Thead(html.Tr(head)), html.Tbody(rows)], id="samples-table", className="table"),
        ]
    )


def _sample_key(text) -> tuple[int, int, int] | None:
    parts = str(text or "").split(".")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1]), int(parts[2])
    return None


def body(trace: dict, query: dict) -> html.Div:
    trace_id = trace["id"]
    q = parse_query(query)
    has_texts = bool(((trace.get("metadata") or {}).get("rollouts") or {}).get("samples"))
    api = session.api()
    params = {k: q[k] for k in (*INT_FILTERS, "truncated") if k in q}
    try:
        page = api.samples(
            trace_id, limit=PAGE_SIZE, offset=q["page"] * PAGE_SIZE, sort=q["sort"], order=q["order"], **params
        )
    except ApiError as exc:
        return alert(exc.message)
    active = ", ".join(f"{FILTER_LABELS[k]} {v}" for k, v in params.items()) or "none"
    parts = [
        length_unit_note(trace),
        section(
            "Samples",
            _filter_form(trace_id, q, bool((trace.get("truncation") or {}).get("basis"))),
            html.P(f"Filters: {active}", className="help", id="samples-active"),
            _table(trace_id, q, page, has_texts),
            html.P(
                (trace.get("truncation") or {}).get("definition") or "",
                className="help",
                id="samples-truncation-definition",
            ),
            _at_cap_note(trace),
            help_text="Click a column title to sort; every chart's mark on the Distributions, Imbalance and "
            "Multi-turn pages opens this table filtered to it, the clicked sample highlighted.",
        ),
    ]
    key = _sample_key(query.get("sample"))
    if key is not None and trace.get("n_turns"):
        try:
            turns = api.sample_turns(trace_id, *key)
        except ApiError as exc:
            parts.append(alert(exc.message))
        else:
            parts.append(
                section(
                    f"Sample {key[0]}.{key[1]}.{key[2]}: turn by turn",
                    html.Div(
                        className="grid-2",
                        children=[
                            dcc.Graph(id="sample-turns", figure=turn_timeline_figure(turns), config=GRAPH_CONFIG),
                            dcc.Graph(id="sample-tokens", figure=turn_tokens_figure(turns), config=GRAPH_CONFIG),
                        ],
                    ),
                )
            )
    if "step" in params and trace.get("n_turns"):
        try:
            trajectories = api.step_trajectories(trace_id, params["step"])
        except ApiError as exc:
            parts.append(alert(exc.message))
        else:
            parts.append(
                section(
                    f"Request timeline of step {params['step']}",
                    dcc.Graph(id="request-timeline", figure=request_timeline_figure(trajectories), config=GRAPH_CONFIG),
                    help_text="Each trajectory's measured engine time (blue) and tool time (sand) back to back, "
                    "sorted by when it finished: the rows at the top are the long tail. Truncated trajectories are "
                    "outlined red (×), discarded ones (an aborted turn or a failed tool call) grey and hatched.",
                )
            )
    return html.Div(parts)


def layout(trace_id: str | None = None, **query):
    return trace_page(trace_id, __name__, "/samples", lambda trace: body(trace, query))
