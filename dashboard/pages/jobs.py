"""Jobs: ingestions, analyses, replays and workloads with progress and errors; re-run an
analysis with other parameters; open a replay or workload on its page.

Ids: jobs-status, jobs-kind (filters), jobs-table (one <tr data-job-id> per job),
jobs-poll, rerun-kind, rerun-trace, rerun-params (JSON), rerun-submit, rerun-message.
"""

from __future__ import annotations

import json

import dash
from dash import ALL, Input, Output, State, ctx, dcc, html, no_update

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.views.components import (
    alert,
    clicked_index,
    control,
    controls,
    href,
    progress,
    section,
    sign_in_required,
    signed_in,
)
from dashboard.views.formatting import human_time, job_active

dash.register_page(__name__, path="/jobs", name="Jobs", title="Jobs · RLVR Explorer", nav="top", order=2)

ANALYSIS_KINDS = ("lengths", "longtail", "imbalance", "latency", "multiturn", "data_efficiency", "gpu_timeline")
JOB_KINDS = ("ingest", *ANALYSIS_KINDS, "simulation", "workload")
JOB_PAGES = {"simulation": "simulate", "workload": "workload"}  # kind -> the trace page that shows its jobs
JOB_STATUSES = ("queued", "running", "succeeded", "failed")


def _int(x):
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def layout(trace_id: str | None = None, kind: str | None = None, **_):
    if not signed_in():
        return sign_in_required("/jobs")
    trace_id = _int(trace_id)
    kind = kind if kind in JOB_KINDS else None
    return html.Div(
        [
            html.H2("Jobs"),
            section(
                "Running and finished",
                controls(
                    control(
                        "Status",
                        dcc.Dropdown(
                            id="jobs-status", options=list(JOB_STATUSES), placeholder="any", style={"minWidth": "160px"}
                        ),
                    ),
                    control(
                        "Kind",
                        dcc.Dropdown(
                            id="jobs-kind",
                            options=list(JOB_KINDS),
                            placeholder="any",
                            value=kind,
                            style={"minWidth": "160px"},
                        ),
                    ),
                    control(
                        "Trace id",
                        dcc.Input(
                            id="jobs-trace",
                            type="number",
                            value=trace_id,
                            debounce=True,
                            className="input",
                            placeholder="any",
                        ),
                    ),
                ),
                html.Div(id="jobs-message"),
                html.Div(id="jobs-table"),
                dcc.Interval(id="jobs-poll", interval=1500),
                dcc.Store(id="jobs-fingerprint"),
            ),
            section(
                "Run an analysis",
                controls(
                    control(
                        "Analysis",
                        dcc.Dropdown(
                            id="rerun-kind",
                            options=list(ANALYSIS_KINDS),
                            value=kind if kind in ANALYSIS_KINDS else "lengths",
                            clearable=False,
                            style={"minWidth": "180px"},
                        ),
                    ),
                    control("Trace id", dcc.Input(id="rerun-trace", type="number", className="input", value=trace_id)),
                ),
                control("Parameters (JSON)", dcc.Textarea(id="rerun-params", value="{}", className="params")),
                html.Button("Run", id="rerun-submit", n_clicks=0, className="button"),
                html.Div(id="rerun-message"),
                help_text="'Re-run' on a job above copies its analysis, trace and parameters here to edit.",
            ),
        ]
    )


def _params_text(params) -> str:
    return json.dumps(params or {}, indent=1, sort_keys=True)


def _action(job: dict):
    """Re-run an analysis; open a replay or workload on its trace's page."""
    if job.get("kind") in ANALYSIS_KINDS:
        return html.Button(
            "Re-run", id={"type": "job-rerun", "index": job["id"]}, n_clicks=0, className="button small secondary"
        )
    page = JOB_PAGES.get(job.get("kind"))
    if page and job.get("trace_id"):
        return dcc.Link(
            "Open", href=href(f"/traces/{job['trace_id']}/{page}?job={job['id']}"), className="button small secondary"
        )
    return ""


def jobs_table(jobs: list[dict]) -> html.Table | html.P:
    if not jobs:
        return html.P("No jobs.", className="muted")
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
                "Finished",
                "Parameters",
                "",
            )
        ]
    )
    rows = []
    for j in jobs:
        st = j.get("status") or "?"
        msg = j.get("error") if st == "failed" else j.get("message")
        rows.append(
            html.Tr(
                [
                    html.Td(str(j["id"])),
                    html.Td(j.get("kind")),
                    html.Td(
                        dcc.Link(str(j["trace_id"]), href=href(f"/traces/{j['trace_id']}"))
                        if j.get("trace_id")
                        else "—"
                    ),
                    html.Td(html.Span(st, className=f"badge badge-{st}")),
                    html.Td(progress(j.get("progress"))),
                    html.Td(msg or "", className="file-error" if st == "failed" else "muted"),
                    html.Td(human_time(j.get("created_at"))),
                    html.Td(human_time(j.get("finished_at"))),
                    html.Td(html.Code(json.dumps(j.get("params") or {}, sort_keys=True)[:120])),
                    html.Td(_action(j)),
                ],
                **{"data-job-id": str(j["id"]), "data-status": st, "data-kind": j.get("kind") or ""},
            )
        )
    return html.Table([html.Thead(head), html.Tbody(rows)], className="table", id="jobs-table-el")


@dash.callback(
    Output("jobs-table", "children"),
    Output("jobs-poll", "interval"),
    Output("jobs-message", "children"),
    Output("jobs-fingerprint", "data"),
    Input("jobs-poll", "n_intervals"),
    Input("jobs-status", "value"),
    Input("jobs-kind", "value"),
    Input("jobs-trace", "value"),
    State("jobs-fingerprint", "data"),
)
def list_jobs(_n, status, kind, trace_id, previous):
    try:
        jobs = session.api().jobs(trace_id=trace_id, status=status, kind=kind)
    except ApiError as exc:
        return no_update, 10_000, alert(exc.message), no_update
    # Re-render only on change, so a poll doesn't reset the page while nothing moves.
    fingerprint = json.dumps([(j["id"], j.get("status"), j.get("progress"), j.get("message")) for j in jobs])
    active = any(job_active(j) for j in jobs)
    if fingerprint == previous and ctx.triggered_id == "jobs-poll":
        return no_update, 1500 if active else 10_000, no_update, no_update
    return jobs_table(jobs), 1500 if active else 10_000, None, fingerprint


@dash.callback(
    Output("rerun-kind", "value"),
    Output("rerun-trace", "value"),
    Output("rerun-params", "value"),
    Input({"type": "job-rerun", "index": ALL}, "n_clicks"),
    prevent_initial_call=True,
)
def copy_job(clicks):
    job_id = clicked_index()
    if job_id is None:
        return no_update, no_update, no_update
    try:
        job = session.api().job(job_id)
    except ApiError:
        return no_update, no_update, no_update
    return job.get("kind"), job.get("trace_id"), _params_text(job.get("params"))


@dash.callback(
    Output("rerun-message", "children"),
    Input("rerun-submit", "n_clicks"),
    State("rerun-kind", "value"),
    State("rerun-trace", "value"),
    State("rerun-params", "value"),
    prevent_initial_call=True,
)
def rerun(n, kind, trace_id, params_text):
    if not n:
        return no_update
    if trace_id in (None, ""):
        return alert("Give the trace id.")
    try:
        params = json.loads(params_text or "{}")
        if not isinstance(params, dict):
            raise ValueError("parameters must be a JSON object")
    except ValueError as exc:
        return alert(f"Parameters are not valid JSON: {exc}")
    try:
        job = session.api().run_analysis(int(trace_id), kind, params)
    except ApiError as exc:
        return alert(exc.message)
    return alert(f"Started job {job.get('id')} ({kind} on trace {trace_id}).", "ok")
