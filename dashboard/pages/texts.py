"""Search the text of a trace's samples (verl rollout dumps): a phrase across a step or
the run, with filters by reward, response length and the repetition flag; each match
links to its sample page. The form is a plain GET form, so a search is a URL.

URL: ``/traces/<id>/texts?q=&step=&reward_min=&reward_max=&response_len_min=
&response_len_max=&repeating=&page=``

Ids: texts-form, texts-q, texts-summary, texts-results (rows carry
``data-key="step.group.sample"``), texts-prev / texts-next.
"""

from __future__ import annotations

from urllib.parse import urlencode

import dash
from dash import dcc, html
from dash.development.base_component import Component

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.pages.sample import sample_href
from dashboard.views.attach_hint import upload_hint
from dashboard.views.components import alert, control, data_attrs, href, section, yes_no_select
from dashboard.views.trace_frame import trace_page

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/texts",
    name="Texts",
    title="Texts · RLVR Explorer",
    nav="trace",
    order=10,
)

PAGE_SIZE = 50
NUMBER_FIELDS = (
    ("step", "step", "int"),
    ("reward_min", "reward ≥", "float"),
    ("reward_max", "reward ≤", "float"),
    ("response_len_min", "response length ≥", "int"),
    ("response_len_max", "response length <", "int"),
)


def parse_query(query: dict) -> dict:
    """The search and its filters from the query string (bad values dropped)."""
    out: dict = {"q": str(query.get("q") or "")[:300]}
    for key, _, kind in NUMBER_FIELDS:
        raw = str(query.get(key) or "").strip()
        try:
            out[key] = int(raw) if kind == "int" else float(raw)
        except ValueError:
            continue
    if query.get("repeating") in ("true", "false"):
        out["repeating"] = query["repeating"]
    page = str(query.get("page") or "")
    out["page"] = int(page) if page.isdigit() else 0
    return out


def texts_href(trace_id, params: dict) -> str:
    clean = {k: v for k, v in params.items() if v is not None and v != "" and not (k == "page" and v == 0)}
    query = urlencode(clean)
    return href(f"/traces/{trace_id}/texts" + (f"?{query}" if query else ""))


def _form(trace_id, q: dict) -> html.Form:
    fields: list[Component] = [
        html.Label(
            [
                html.Span("phrase", className="control-label"),
                dcc.Input(name="q", id="texts-q", type="search", value=q["q"], style={"width": "320px"}),
            ],
            className="control",
        )
    ]
    for key, label, _ in NUMBER_FIELDS:
        fields.append(
            html.Label(
                [
                    html.Span(label, className="control-label"),
                    dcc.Input(name=key, id=f"texts-f-{key}", type="number", value=q.get(key)),
                ],
                className="control",
            )
        )
    fields.append(control("ends in a repetition", yes_no_select("repeating", "texts-f-repeating", q)))
    fields += [
        html.Button("Search", type="submit", className="button"),
        html.A("Clear", href=texts_href(trace_id, {}), className="button secondary"),
    ]
    return html.Form(fields, id="texts-form", method="GET", className="controls")


def _results(trace_id, q: dict, found: dict) -> html.Div:
    rows = []
    for m in found["items"]:
        key = f"{m['step']}.{m['group_idx']}.{m['sample_idx']}"
        link = sample_href(trace_id, m["step"], m["group_idx"], m["sample_idx"])
        rows.append(
            html.Tr(
                [
                    html.Td(html.A(key, href=link)),
                    html.Td("–" if m["reward"] is None else f"{m['reward']:.3g}"),
                    html.Td(f"{m['response_len']:,}"),
                    html.Td(f"period {m['repeat_period']}" if m.get("repeat_period") else "–"),
                    html.Td(m.get("where") or ""),
                    html.Td(html.Span(m["snippet"], style={"whiteSpace": "pre-wrap"})),
                ],
                **data_attrs(key=key),
            )
        )
    unit = found.get("length_unit", "tokens")
    head = html.Tr([html.Th(h) for h in ("sample", "reward", f"response ({unit})", "repetition", "found in", "text")])
    total = found["total"]
    first = q["page"] * PAGE_SIZE
    how = "with the text index" if found.get("indexed") else f"reading {found.get('scanned', 0):,} samples"
    summary = f"{total:,}{'+' if found.get('total_is_lower_bound') else ''} samples" + (
        f", found {how}" if q["q"] else ""
    )
    nav: list[Component] = [html.Span(summary, id="texts-summary")]
    if q["page"] > 0:
        nav.append(html.A("← previous", id="texts-prev", href=texts_href(trace_id, {**q, "page": q["page"] - 1})))
    if first + len(found["items"]) < total:
        nav.append(html.A("next →", id="texts-next", href=texts_href(trace_id, {**q, "page": q["page"] + 1})))
    table = html.Table([html.Thead(head), html.Tbody(rows)], id="texts-results", className="table")
    return html.Div([html.Div(nav, className="controls"), table])


def body(trace: dict, query: dict) -> html.Div | html.Section:
    trace_id = trace["id"]
    if not ((trace.get("metadata") or {}).get("rollouts") or {}).get("samples"):
        return upload_hint(trace_id, "This trace has no sample texts.", "texts")
    q = parse_query(query)
    filters = {
        k: q[k]
        for k in ("step", "reward_min", "reward_max", "response_len_min", "response_len_max", "repeating")
        if k in q
    }
    try:
        found = session.api().text_search(trace_id, q["q"], limit=PAGE_SIZE, offset=q["page"] * PAGE_SIZE, **filters)
    except ApiError as exc:
        return html.Div([_form(trace_id, q), alert(exc.message)])
    return section(
        "Search the samples' text",
        _form(trace_id, q),
        _results(trace_id, q, found),
        help_text="A sample matches when its prompt or response contains the phrase (case-insensitive). Leave the "
        "phrase empty to list the samples the filters keep. Repetition: the response's last 1,000 characters repeat a "
        "period of at most 333 characters.",
    )


def layout(trace_id: str | None = None, **query):
    return trace_page(trace_id, __name__, "/texts", lambda trace: body(trace, query))
