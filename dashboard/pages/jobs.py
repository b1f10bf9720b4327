"""Jobs: ingestions, analyses, replays and workloads with their trace (by name), readable
parameters, duration, progress and errors; re-run an analysis with a form of its
parameters; re-run a replay or workload in its page's form, or open it there.

Ids: jobs-status, jobs-kind, jobs-trace (filters; the trace by name), jobs-prev / jobs-next /
jobs-range (pages of PAGE_SIZE, newest first; filters and page in the URL:
?status=&kind=&trace_id=&offset=), jobs-table (one
<tr data-job-id data-kind data-status> per job; "Re-run" buttons {"type": "job-rerun"}
for analyses, "Re-run…" / "Open" links for replays and workloads), jobs-poll,
rerun-kind, rerun-trace, rerun-form (one widget per parameter, in
<div data-param=NAME>, ids {"type": "rerun-param", "name": NAME}, its message slot
{"type": "rerun-param-error", "name": NAME}: a number field's text that is not a number
blocks Run), rerun-fields,
rerun-submit, rerun-message.
"""

from __future__ import annotations

import json

import dash
from dash import ALL, Input, Output, State, ctx, dcc, html, no_update
from dash.development.base_component import Component

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.views.components import (
    alert,
    clicked_index,
    control,
    controls,
    data_attrs,
    href,
    progress,
    section,
    sign_in_required,
    signed_in,
)
from dashboard.views.formatting import human_time, job_active
from dashboard.views.job_views import ANY_NUMBER, describe_params, job_duration, param_fields, read_fields
from dashboard.views.number_fields import blocked_message, error_slot, number_input
from dashboard.views.pager import pager, pager_outputs, pager_state, register_pager
from dashboard.views.url_state import query_value, register_url_state, url_sink

dash.register_page(__name__, path="/jobs", name="Jobs", title="Jobs · RLVR Explorer", nav="top", order=2)

JOB_PAGES = {"simulation": "simulate", "workload": "workload"}  # kind -> the trace page that shows its jobs
JOB_STATUSES = ("queued", "running", "succeeded", "failed")
PARAM = "rerun-param"
PARAM_ERROR = f"{PARAM}-error"  # under each parameter: why its value is refused
PAGE_SIZE = 25


def _int(x):
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


_KINDS: dict[str, list[str]] = {}


def _kinds() -> tuple[list[str], list[str]]:
    """(every job kind, the analysis kinds), from the API's registries; kept once read (they
    change only with the server's code), empty while the API cannot answer."""
    if not _KINDS:
        try:
            answer = session.api().job_kinds()
        except ApiError:
            return [], []
        _KINDS.update(jobs=answer["kinds"], analyses=[a["kind"] for a in answer["analyses"]])
    return _KINDS["jobs"], _KINDS["analyses"]


def _trace_names() -> dict[int, str]:
    """{trace id: name} of the team's traces (newest 500), for the table and the pickers."""
    try:
        items = session.api().list_traces(limit=500).get("items", [])
    except ApiError:
        return {}
    return {int(t["id"]): t.get("name") or f"trace {t['id']}" for t in items}


def _trace_options(names: dict[int, str]) -> list[dict]:
    return [{"label": f"{name} (#{tid})", "value": tid} for tid, name in names.items()]


def _jobs_section(options: list[dict], kind, trace_id, query: dict, job_kinds: list[str]):
    """The job list: filters (status, kind, trace), the table and its pages."""
    return section(
        "Running and finished",
        controls(
            control(
                "Status",
                dcc.Dropdown(
                    id="jobs-status",
                    options=list(JOB_STATUSES),
                    value=query_value(query, "status", None, choices=JOB_STATUSES),
                    placeholder="any",
                    style={"minWidth": "160px"},
                ),
            ),
            control(
                "Kind",
                dcc.Dropdown(
                    id="jobs-kind",
                    options=job_kinds,
                    placeholder="any",
                    value=kind,
                    style={"minWidth": "160px"},
                ),
            ),
            control(
                "Trace",
                dcc.Dropdown(
                    id="jobs-trace",
                    options=options,
                    value=trace_id,
                    placeholder="any",
                    style={"minWidth": "280px"},
                ),
            ),
        ),
        html.Div(id="jobs-message"),
        html.Div(id="jobs-table"),
        *pager("jobs", query_value(query, "offset", 0, kind=int)),
        dcc.Interval(id="jobs-poll", interval=1500),
        dcc.Store(id="jobs-fingerprint"),
    )


def layout(trace_id: str | None = None, kind: str | None = None, **query):
    if not signed_in():
        return sign_in_required("/jobs")
    trace_id = _int(trace_id)
    job_kinds, analysis_kinds = _kinds()
    kind = kind if kind in job_kinds else None
    names = _trace_names()
    options = _trace_options(names)
    return html.Div(
        [
            html.H2("Jobs"),
            url_sink("jobs"),
            _jobs_section(options, kind, trace_id, query, job_kinds),
            section(
                "Run an analysis",
                controls(
                    control(
                        "Analysis",
                        dcc.Dropdown(
                            id="rerun-kind",
                            options=analysis_kinds,
                            value=kind if kind in analysis_kinds else "lengths",
                            clearable=False,
                            style={"minWidth": "180px"},
                        ),
                    ),
                    control(
                        "Trace",
                        dcc.Dropdown(
                            id="rerun-trace",
                            options=options,
                            value=trace_id,
                            placeholder="choose a trace",
                            style={"minWidth": "280px"},
                        ),
                    ),
                ),
                html.Div(id="rerun-form"),
                dcc.Store(id="rerun-fields"),
                html.Button("Run", id="rerun-submit", n_clicks=0, className="button"),
                html.Div(id="rerun-message"),
                help_text="'Re-run' on an analysis above fills this form with its trace and parameters; the fields "
                "start from the latest run of the analysis on the trace. Replays and workloads re-run in their "
                "page's form ('Re-run…').",
            ),
        ]
    )


def _action(job: dict):
    """Re-run an analysis here; re-run a replay or workload in its page's form, or open it."""
    if job.get("kind") in _kinds()[1]:
        return html.Button(
            "Re-run", id={"type": "job-rerun", "index": job["id"]}, n_clicks=0, className="button small secondary"
        )
    page = JOB_PAGES.get(job.get("kind") or "")
    if page and job.get("trace_id"):
        base = f"/traces/{job['trace_id']}/{page}"
        return html.Div(
            [
                dcc.Link("Open", href=href(f"{base}?job={job['id']}"), className="button small secondary"),
                dcc.Link("Re-run…", href=href(f"{base}?rerun={job['id']}"), className="button small secondary"),
            ],
            style={"display": "flex", "gap": "6px", "whiteSpace": "nowrap"},
        )
    return ""


def jobs_table(jobs: list[dict], names: dict[int, str] | None = None) -> html.Table | html.P:
    if not jobs:
        return html.P("No jobs.", className="muted")
    names = names or {}
    head = html.Tr(
        [
            html.Th(h)
            for h in (
                "Job",
                "Kind",
                "Trace",
                "Status",
                "Progress",
                "Message / error",
                "Created",
                "Took",
                "Parameters",
                "",
            )
        ]
    )
    rows = []
    for j in jobs:
        st = j.get("status") or "?"
        msg = j.get("error") if st == "failed" else j.get("message")
        tid = j.get("trace_id")
        rows.append(
            html.Tr(
                [
                    html.Td(str(j["id"])),
                    html.Td(j.get("kind")),
                    html.Td(
                        dcc.Link(names.get(int(tid), f"trace {tid}"), href=href(f"/traces/{tid}"), title=f"trace {tid}")
                        if tid
                        else "—",
                        className="job-trace",
                    ),
                    html.Td(html.Span(st, className=f"badge badge-{st}")),
                    html.Td(progress(j.get("progress"))),
                    html.Td(msg or "", className="file-error" if st == "failed" else "muted"),
                    html.Td(human_time(j.get("created_at"))),
                    html.Td(job_duration(j), className="job-duration"),
                    html.Td(
                        describe_params(j),
                        className="job-params",
                        title=json.dumps(j.get("params") or {}, sort_keys=True)[:2000],
                    ),
                    html.Td(_action(j)),
                ],
                **data_attrs(job_id=str(j["id"]), status=st, kind=j.get("kind") or ""),
            )
        )
    return html.Table([html.Thead(head), html.Tbody(rows)], className="table", id="jobs-table-el")


register_url_state(
    "jobs",
    {
        "status": ("jobs-status", "value", None),
        "kind": ("jobs-kind", "value", None),
        "trace_id": ("jobs-trace", "value", None),
        "offset": ("jobs-offset", "data", 0),
    },
)


register_pager("jobs", PAGE_SIZE, ("jobs-status", "jobs-kind", "jobs-trace"))


@dash.callback(
    Output("jobs-table", "children"),
    Output("jobs-poll", "interval"),
    Output("jobs-message", "children"),
    Output("jobs-fingerprint", "data"),
    *pager_outputs("jobs"),
    Input("jobs-poll", "n_intervals"),
    Input("jobs-offset", "data"),
    Input("jobs-status", "value"),
    Input("jobs-kind", "value"),
    Input("jobs-trace", "value"),
    State("jobs-fingerprint", "data"),
)
def list_jobs(_n, offset, status, kind, trace_id, previous):
    offset = offset or 0
    try:  # one more than a page: whether there is an older page
        jobs = session.api().jobs(trace_id=trace_id, status=status, kind=kind, limit=PAGE_SIZE + 1, offset=offset)
    except ApiError as exc:
        return no_update, 10_000, alert(exc.message), no_update, no_update, no_update, no_update
    more, jobs = len(jobs) > PAGE_SIZE, jobs[:PAGE_SIZE]
    shown = f"jobs {offset + 1:,}–{offset + len(jobs):,}" + (" (older ones on the next page)" if more else "")
    paging = pager_state(shown if jobs else "no jobs", offset, more)
    # Re-render only on change, so a poll doesn't reset the page while nothing moves
    # (a running job's duration is redrawn with its progress).
    fingerprint = json.dumps([offset, *[(j["id"], j.get("status"), j.get("progress"), j.get("message")) for j in jobs]])
    active = any(job_active(j) for j in jobs)
    if fingerprint == previous and ctx.triggered_id == "jobs-poll":
        return no_update, 1500 if active else 10_000, no_update, no_update, *paging
    return jobs_table(jobs, _trace_names()), 1500 if active else 10_000, None, fingerprint, *paging


# -- the re-run form -------------------------------------------------------------------
def _widget(name: str, kind: str, value):
    pid = {"type": PARAM, "name": name}
    if kind == "bool":
        return dcc.Checklist(id=pid, options=[{"label": "yes", "value": "yes"}], value=["yes"] if value else [])
    if kind in ("number", "optional"):  # checked on Run: what is typed is sent, or Run is refused
        return number_input(pid, value, ANY_NUMBER, placeholder="default", width=130, slot=False)
    if kind == "json":
        return dcc.Input(id=pid, type="text", value=json.dumps(value), className="input", style={"width": "260px"})
    return dcc.Input(id=pid, type="text", value=value, className="input", style={"width": "180px"})


def rerun_form(params: dict | None, note: str | None = None) -> tuple[list, list]:
    """(the form's children, its [(name, widget type)] fields) for these parameters."""
    fields = param_fields(params or {})
    if not fields:
        text = note or "No earlier run of this analysis on this trace: it runs with its defaults."
        return [html.P(text, className="muted")], []
    widgets = [
        html.Div(
            [control(name.replace("_", " "), _widget(name, kind, value)), error_slot({"type": PARAM, "name": name})],
            **data_attrs(param=name),
        )
        for name, kind, value in fields
    ]
    out: list[Component] = [html.Div(widgets, className="controls")]
    if note:
        out.append(html.P(note, className="muted"))
    return out, [[name, kind] for name, kind, _ in fields]


@dash.callback(
    Output("rerun-kind", "value"),
    Output("rerun-trace", "value"),
    Output("rerun-form", "children"),
    Output("rerun-fields", "data"),
    Input({"type": "job-rerun", "index": ALL}, "n_clicks"),
    Input("rerun-kind", "value"),
    Input("rerun-trace", "value"),
)
def fill_form(_clicks, kind, trace_id):
    api = session.api()
    job_id = clicked_index() if isinstance(ctx.triggered_id, dict) else None
    if isinstance(ctx.triggered_id, dict) and job_id is None:
        return no_update, no_update, no_update, no_update  # the table re-rendered, nothing clicked
    try:
        if job_id is not None:
            job = api.job(job_id)
            form, fields = rerun_form(job.get("params"), f"Parameters of job {job_id}: change what you need and Run.")
            return job.get("kind"), job.get("trace_id"), form, fields
        if trace_id in (None, "") or not kind:
            return no_update, no_update, [html.P("Choose a trace.", className="muted")], []
        latest = api.jobs(trace_id=trace_id, kind=kind, limit=1)
    except ApiError as exc:
        return no_update, no_update, alert(exc.message), []
    params = latest[0].get("params") if latest else None
    note = f"Starting from job {latest[0]['id']} (the latest {kind} run on this trace)." if latest else None
    form, fields = rerun_form(params, note)
    return no_update, no_update, form, fields


@dash.callback(
    Output("rerun-message", "children"),
    Output({"type": PARAM_ERROR, "name": ALL}, "children"),
    Input("rerun-submit", "n_clicks"),
    State("rerun-kind", "value"),
    State("rerun-trace", "value"),
    State("rerun-fields", "data"),
    State({"type": PARAM, "name": ALL}, "value"),
    prevent_initial_call=True,
)
def rerun(n, kind, trace_id, fields, values):
    """Run the analysis with the parameters as typed; a value the form cannot send
    blocks it, its message under the field."""
    shown = [item["id"]["name"] for item in ctx.states_list[3]]
    if not n:
        return no_update, [no_update] * len(shown)
    if trace_id in (None, ""):
        return alert("Choose a trace."), [None] * len(shown)
    kinds = {name: k for name, k in fields or []}
    params, errors = read_fields([(name, kinds.get(name, "text")) for name in shown], values)
    said = [errors.get(name) for name in shown]
    if errors:
        return alert(blocked_message(list(errors)), id="rerun-blocked"), said
    try:
        job = session.api().run_analysis(int(trace_id), kind, params)
    except ApiError as exc:
        where = f" ({exc.field})" if exc.field and exc.field not in exc.message else ""
        return alert(f"{exc.message}{where}"), said
    note = f"Started job {job.get('id')} ({kind} on trace {trace_id}): its status is in the table above."
    return alert(note, "info"), said
