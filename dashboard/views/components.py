"""Layout pieces shared by the pages: charts with stable ids, cards, alerts, the
sign-in guard, the navigation generated from Dash's page registry and the analysis
panel (status, progress and re-run of one analysis kind for the page's trace).

Page registry conventions (extra keywords of `dash.register_page`):
    nav="top"      the page appears in the top navigation bar (ordered by `order`)
    nav="trace"    the page is a view of one trace (`path_template` has `<trace_id>`)
                   and appears in the trace's tab bar
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import quote

import dash
from dash import dcc, html
from dash.development.base_component import ComponentSingleType, ComponentType

from dashboard.api import session
from dashboard.figures.common import empty_figure

# Figures carry their own height (rows of ranks need room), so graphs are not
# "responsive" (that would force the container's height); width follows the container.
# No "Share chart" button: it uploads the chart's data to Plotly Cloud (plotly.js >= 3.1).
GRAPH_CONFIG: dcc.Graph.Config = {
    "displaylogo": False,
    "toImageButtonOptions": {"format": "png", "scale": 2},
    "modeBarButtonsToRemove": ["sendChartToCloud"],
}

# Analysis panel ids (pattern-matching, one panel per kind on a page).
RESULT = "analysis-result"
STATUS = "analysis-status"
POLL = "analysis-poll"
PARAMS = "analysis-params"
PAGE_TRACE_ID = "page-trace-id"


def href(path: str) -> str:
    """A path of this app, with the mount prefix (requests_pathname_prefix)."""
    return dash.get_relative_path(path)


def graph(graph_id: str, *, height: int | None = None, message: str = "Loading…") -> dcc.Graph:
    """A chart whose div has a stable id: browser tests read
    `document.getElementById(id).querySelector('.js-plotly-plot').data`."""
    return dcc.Graph(id=graph_id, figure=placeholder_figure(message, height), config=GRAPH_CONFIG, className="chart")


@lru_cache(maxsize=64)
def placeholder_figure(message: str, height: int | None = None) -> dict:
    """The figure a chart shows until its callback fills it, built once: a plotly Figure
    with its template costs ~40 ms to build, and a page has up to a dozen charts (a
    third of a page's layout time on a warm server). Shared, so never to be mutated."""
    fig = empty_figure(message)
    if height:
        fig.update_layout(height=height)
    return fig.to_plotly_json()


def card(label: str, value: str, hint: str = "", card_id: str | None = None, stale: str | None = None) -> html.Div:
    """A headline figure; `stale`: how far behind its trace it is (views.freshness)."""
    kw: dict[str, Any] = {"id": card_id} if card_id else {}
    return html.Div(
        className="card stale" if stale else "card",
        children=[
            html.Div(label, className="card-label"),
            html.Div(value, className="card-value"),
            html.Div(hint, className="card-hint"),
            *([html.Div(stale, className="card-stale")] if stale else []),
        ],
        **kw,
    )


def data_attrs(**values: str) -> dict[str, Any]:
    """HTML data-* attributes for a component's keywords: data_attrs(job_id="7") is
    {"data-job-id": "7"}. Typed Any because Dash takes them through its untyped **kwargs."""
    return {"data-" + name.replace("_", "-"): value for name, value in values.items()}


def alert(message: ComponentType, kind: str = "error", **kw: Any) -> html.Div:
    return html.Div(message, className=f"alert alert-{kind}", role="alert", **kw)


def progress(fraction: float | None, label: str = "") -> html.Div:
    pct = max(0.0, min(1.0, float(fraction or 0.0))) * 100
    return html.Div(
        className="progress",
        children=[
            html.Div(className="progress-bar", style={"width": f"{pct:.0f}%"}),
            html.Span(label or f"{pct:.0f}%", className="progress-label"),
        ],
    )


def controls(*items) -> html.Div:
    return html.Div(list(items), className="controls")


def control(label: str, component) -> html.Label:
    return html.Label([html.Span(label, className="control-label"), component], className="control")


def yes_no_select(name: str, id_: str, query: dict) -> html.Select:
    """A GET form's any / yes / no filter (values "", "true", "false"), as the query has it."""
    chosen = query.get(name)
    return html.Select(
        name=name,
        id=id_,
        children=[
            html.Option("any", value="", selected=chosen not in ("true", "false")),
            html.Option("yes", value="true", selected=chosen == "true"),
            html.Option("no", value="false", selected=chosen == "false"),
        ],
    )


def step_offsets_control(id_: str, value: str | None) -> html.Label:
    """The per-trace step offsets that align traces on one step axis ("trace:offset, ...",
    read by `figures.metrics.parse_offsets`)."""
    return control(
        "Step offsets",
        dcc.Input(
            id=id_, value=value or "", placeholder="trace:offset, e.g. 12:5", debounce=True, style={"width": "180px"}
        ),
    )


def section(title: str, *children: ComponentSingleType, help_text: str = "") -> html.Section:
    head: list[ComponentSingleType] = [html.H3(title)]
    if help_text:
        head.append(html.P(help_text, className="help"))
    return html.Section(head + list(children), className="section")


# -- sign-in guard ------------------------------------------------------------------
REDIRECT_TARGET = "redirect-target"


def redirect(target: str, message=None) -> html.Div:
    """Send the browser to `target` as soon as this renders (a clientside callback in
    `dashboard.callbacks` reads the store), with a visible link meanwhile."""
    return html.Div(
        [dcc.Store(id=REDIRECT_TARGET, data=target), html.P(message or dcc.Link("continue", href=target))],
        id="redirect",
        className="page narrow",
    )


def sign_in_required(path: str) -> html.Div:
    """What a page shows when nobody is signed in: a redirect to the sign-in page,
    which comes back to `path` (app-relative) afterwards."""
    target = href("/sign-in") + "?next=" + quote(path, safe="")
    return redirect(target, ["Sign in with your team's API key to see this page: ", dcc.Link("sign in", href=target)])


def signed_in() -> bool:
    return bool(session.api_key())


# -- navigation from the page registry -----------------------------------------------
def _pages(nav: str) -> list[dict]:
    return sorted(
        (p for p in dash.page_registry.values() if p.get("nav") == nav), key=lambda p: (p.get("order") or 0, p["name"])
    )


def top_nav(pathname: str | None) -> list:
    """Links to the top-level pages; the current one highlighted."""
    links = []
    for p in _pages("top"):
        target = p["relative_path"]
        active = bool(pathname and (pathname == target or pathname.startswith(target.rstrip("/") + "/")))
        links.append(
            dcc.Link(
                p["name"],
                href=target,
                className="nav-link active" if active else "nav-link",
                id=f"nav-{p['module'].split('.')[-1]}",
            )
        )
    return links


def trace_tabs(trace_id: str, current_module: str) -> html.Nav:
    """Tabs to every page of one trace, generated from the registry."""
    links = []
    for p in _pages("trace"):
        target = href(p["path_template"].replace("<trace_id>", str(trace_id)))
        cls = "tab-link active" if p["module"] == current_module else "tab-link"
        links.append(dcc.Link(p["name"], href=target, className=cls))
    return html.Nav(links, className="trace-tabs")


def trace_header(trace: dict | None, trace_id: str, current_module: str) -> html.Div:
    name = (trace or {}).get("name") or f"trace {trace_id}"
    meta = []
    if trace:
        meta = [trace.get("source_format") or "", trace.get("framework") or "", trace.get("status") or ""]
    return html.Div(
        [
            html.Div(
                [dcc.Link("Traces", href=href("/traces")), html.Span(" / "), html.Span(name, id="trace-name")],
                className="breadcrumb",
            ),
            html.Div(" · ".join(m for m in meta if m), className="trace-meta"),
            trace_tabs(trace_id, current_module),
        ],
        className="trace-header",
    )


# -- analysis panel -----------------------------------------------------------------
def analysis_panel_layout(
    kind: str,
    label: str,
    trace_id,
    params: dict | None = None,
    *,
    state: dict | None = None,
    status=None,
    polling: bool = False,
) -> html.Div:
    """Status line of analysis `kind` for the page's trace (read from the store with id
    PAGE_TRACE_ID). The shared callback in `dashboard.callbacks` starts the analysis
    (with `params`) when the trace has none, polls its progress, and puts the latest result in the
    store {"type": RESULT, "kind": kind} as {"job_id", "note"} (note: why there is no
    result yet); figures listen to it and fetch the result server-side with
    `dashboard.server.results.analysis_result` (the browser never holds the result).
    `state`, `status`, `polling`: the store's first value, status line and whether to
    poll, when the layout already knows them (`dashboard.views.panels.analysis_panel`)."""
    return html.Div(
        className="analysis-panel",
        children=[
            dcc.Store(id={"type": RESULT, "kind": kind}, data=state),
            dcc.Store(id={"type": PARAMS, "kind": kind}, data=params or {}),
            dcc.Interval(id={"type": POLL, "kind": kind}, interval=1500, disabled=not polling),
            html.Span(label, className="analysis-label"),
            html.Span(status, id={"type": STATUS, "kind": kind}, className="analysis-status"),
            dcc.Link("other parameters…", href=href(f"/jobs?trace_id={trace_id}&kind={kind}"), className="muted"),
        ],
    )


def clicked_index():
    """The `index` of the pattern-matched button that was really clicked, else None.

    Re-rendering a list of buttons fires their callback with n_clicks None; only a
    trigger with a click count is a click."""
    trig = dash.ctx.triggered_id
    if isinstance(trig, dict) and dash.ctx.triggered and dash.ctx.triggered[0]["value"]:
        return trig["index"]
    return None
