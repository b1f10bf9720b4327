"""Fit a trace's length distributions and generate a synthetic workload with the same
statistics (PolyTrace-style), to share without sharing data: the fit report (KS
statistic per fitted distribution), then N steps x groups x samples written as files
(downloadable as a .zip) and ingested as a new trace of the team.

Form ids: wl-steps, wl-groups, wl-samples, wl-seed, wl-dp-size, wl-task, wl-formats,
wl-ingest, wl-name, wl-fit (fit only), wl-submit (fit and generate), wl-form-message.
State: wl-job, wl-done, wl-poll. Output: wl-progress, wl-ks (chart), wl-fit-table,
wl-output (links wl-trace-link to the new trace and wl-download to the zip),
wl-history (one <tr data-job-id> per job, "Open" buttons). `?job=ID` opens that job;
`?rerun=ID` fills the form as that job was configured.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import ALL, Input, Output, State, ctx, dcc, html, no_update
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.workload import KS_CAPTION, fit_ks_figure, task_summary
from dashboard.server import results
from dashboard.server.downloads import workload_zip_href
from dashboard.server.figure_cache import cached
from dashboard.views.components import PAGE_TRACE_ID, alert, clicked_index, control, controls, graph, href, section
from dashboard.views.formatting import human_count, job_active
from dashboard.views.job_views import describe_workload as describe
from dashboard.views.job_views import followed_banner, job_banner, job_history_table, job_progress
from dashboard.views.number_fields import (
    Bounds,
    NumberFields,
    blocked_message,
    check_fields,
    error_id,
    number_control,
)
from dashboard.views.replay_forms import workload_body, workload_values_from_job
from dashboard.views.trace_frame import trace_page

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/workload",
    name="Synthetic workload",
    title="Synthetic workload · RLVR Explorer",
    nav="trace",
    order=6,
)

NO_FIT = "Fit the trace (or generate a workload) to see how well the distributions match"


# The form's number fields (`NumberFields`).
# An invalid value blocks the submit with its message under the field.
NUMBERS: NumberFields = {
    "wl-steps": ("steps", "Steps", Bounds(ge=1, required=True), ""),
    "wl-groups": ("groups", "Groups per step", Bounds(ge=1), "as fitted"),
    "wl-samples": ("samples_per_group", "Samples per group", Bounds(ge=1), "as fitted"),
    "wl-seed": ("seed", "Seed", Bounds(ge=0), "0"),
    "wl-dp-size": ("dp_size", "DP ranks", Bounds(ge=1), "1"),
}


def _number(id_: str, v: dict):
    return number_control(NUMBERS, id_, v)


def body(trace: dict, job_param=None, rerun=None) -> html.Div:
    if not trace.get("n_samples"):
        return alert("This trace has no samples (rollout lengths) to fit.", "info")
    try:
        history = session.api().jobs(trace_id=trace["id"], kind="workload", limit=50)
    except ApiError as exc:
        return alert(exc.message)
    shown = None
    if job_param is not None and str(job_param).isdigit():
        shown = next((j for j in history if j["id"] == int(job_param)), None)
    if shown is None and history:
        done = [j for j in history if j.get("status") == "succeeded"]
        shown = done[0] if done else history[0]
    shown_id = shown["id"] if shown else None
    if shown and shown.get("status") == "succeeded":
        results.prefetch(shown_id)  # the figures ask for its result in a moment
    multiturn = bool(trace.get("n_turns"))
    formats = ["multiturn", "compact"] if multiturn else ["packed", "compact"]
    tasks = trace.get("tasks") or []
    v: dict[str, Any] = {
        "steps": min(int(trace.get("n_steps") or 1), 20),
        "groups": None,
        "samples_per_group": None,
        "seed": 0,
        "dp_size": 1,
        "task": None,
        "formats": formats,
        "ingest": True,
        "name": None,
    }
    again = next((j for j in history if str(j["id"]) == str(rerun)), None) if rerun is not None else None
    if again is not None:  # "Re-run…" on the jobs page: the form as that job was configured
        v = workload_values_from_job(again.get("params") or {}, v)
    return html.Div(
        [
            dcc.Store(id="wl-job", data=shown_id),
            dcc.Store(id="wl-done", data=shown_id if shown and shown.get("status") == "succeeded" else None),
            dcc.Interval(id="wl-poll", interval=1000, disabled=not job_active(shown)),
            section(
                "Generate a synthetic twin of this trace",
                controls(
                    *(_number(id_, v) for id_ in NUMBERS),
                    control(
                        "Task",
                        dcc.Dropdown(
                            id="wl-task",
                            options=tasks,
                            value=v["task"] if v["task"] in tasks else None,
                            placeholder="the largest task",
                            disabled=not tasks,
                            style={"minWidth": "160px"},
                        ),
                    ),
                ),
                controls(
                    control(
                        "Files",
                        dcc.Checklist(
                            id="wl-formats",
                            value=[f for f in v["formats"] if f in formats] or formats,
                            inline=True,
                            options=(["packed"] if not multiturn else ["multiturn"]) + ["compact"],
                        ),
                    ),
                    control(
                        "Then",
                        dcc.Checklist(
                            id="wl-ingest",
                            value=["ingest"] if v["ingest"] else [],
                            inline=True,
                            options=[{"label": "ingest as a new trace", "value": "ingest"}],
                        ),
                    ),
                    control(
                        "Name",
                        dcc.Input(
                            id="wl-name",
                            value=v["name"],
                            placeholder=f"synthetic twin of {trace.get('name')}",
                            className="input",
                            style={"width": "280px"},
                        ),
                    ),
                    html.Button("Fit only", id="wl-fit", n_clicks=0, className="button secondary"),
                    html.Button("Fit and generate", id="wl-submit", n_clicks=0, className="button"),
                ),
                html.Div(id="wl-form-message"),
                help_text="Fits prompt and response lengths per task (marginals, a joint Gaussian mixture, the far tail, "
                "the trend over steps, group structure and, for multi-turn traces, turns and tool calls) and "
                "samples new steps from the fit. The files hold no sample of the original data.",
            ),
            html.Div(job_progress(shown, "workload job"), id="wl-progress"),
            html.Div(id="wl-output"),
            section(
                "Fit report",
                graph("wl-ks"),
                html.Div(id="wl-fit-table"),
                help_text=KS_CAPTION + " 0 is a perfect fit; the generator samples the joint mixture.",
            ),
            section(
                "Workload jobs of this trace",
                html.Div(
                    job_history_table(history, open_type="wl-open", describe=describe, shown_id=shown_id),
                    id="wl-history",
                ),
            ),
        ]
    )


def layout(trace_id: str | None = None, job: str | None = None, rerun: str | None = None, **_):
    return trace_page(trace_id, __name__, "/workload", lambda trace: body(trace, job, rerun))


@dash.callback(
    output={
        "job": Output("wl-job", "data", allow_duplicate=True),
        "message": Output("wl-form-message", "children"),
        "errors": {id_: Output(error_id(id_), "children") for id_ in NUMBERS},
    },
    inputs={
        "n_fit": Input("wl-fit", "n_clicks"),
        "n_gen": Input("wl-submit", "n_clicks"),
        "trace_id": State(PAGE_TRACE_ID, "data"),
        "numbers": {id_: State(id_, "value") for id_ in NUMBERS},
        "task": State("wl-task", "value"),
        "formats": State("wl-formats", "value"),
        "ingest": State("wl-ingest", "value"),
        "name": State("wl-name", "value"),
    },
    prevent_initial_call=True,
)
def submit(n_fit, n_gen, trace_id, numbers, task, formats, ingest, name):
    """Fit, or fit and generate with the form's values exactly as shown: a number field
    the form cannot send blocks the submit, its message under it."""
    if not (n_fit or n_gen):
        raise PreventUpdate  # a re-rendered button, not a click
    fit_only = ctx.triggered_id == "wl-fit"  # the fit reads none of the numbers
    checked, errors = check_fields(numbers, {} if fit_only else {id_: spec[2] for id_, spec in NUMBERS.items()})
    out = {"job": no_update, "message": None, "errors": {id_: errors.get(id_) for id_ in NUMBERS}}
    if errors:
        return {**out, "message": alert(blocked_message([f'"{NUMBERS[i][1]}"' for i in errors]), id="wl-form-blocked")}
    values = {NUMBERS[id_][0]: v for id_, v in checked.items()}
    values.update(task=task, formats=formats, ingest="ingest" in (ingest or []), name=name)
    try:
        job = session.api().create_workload(workload_body(trace_id, values, fit_only=fit_only))
    except ApiError as exc:
        return {**out, "message": alert(exc.message)}
    return {**out, "job": job["id"], "message": job_banner(job, "Workload job", "wl-started")}


@dash.callback(
    Output("wl-job", "data", allow_duplicate=True),
    Input({"type": "wl-open", "index": ALL}, "n_clicks"),
    prevent_initial_call=True,
)
def reopen(clicks):
    job_id = clicked_index()
    return no_update if job_id is None else job_id


@dash.callback(
    Output("wl-progress", "children"),
    Output("wl-poll", "disabled"),
    Output("wl-done", "data"),
    Output("wl-history", "children"),
    Output("wl-form-message", "children", allow_duplicate=True),
    Input("wl-job", "data"),
    Input("wl-poll", "n_intervals"),
    State("wl-done", "data"),
    State(PAGE_TRACE_ID, "data"),
    State("wl-form-message", "children"),
    prevent_initial_call=True,
)
def follow(job_id, _n, done, trace_id, banner=None):
    if job_id is None:
        return None, True, no_update, no_update, no_update
    try:
        job = results.job(job_id)
    except ApiError as exc:
        return alert(exc.message), True, no_update, no_update, no_update
    active = job_active(job)
    finished = job.get("status") == "succeeded"
    history: object = no_update
    if not (ctx.triggered_id == "wl-poll" and active):
        try:
            history = job_history_table(
                session.api().jobs(trace_id=trace_id, kind="workload", limit=50),
                open_type="wl-open",
                describe=describe,
                shown_id=job_id,
            )
        except ApiError:
            pass
    new_done = job_id if finished and done != job_id else (no_update if finished else None)
    banner = followed_banner(banner, job, "Workload job", "wl-started")
    return job_progress(job, "workload job"), not active, new_done, history, banner


@dash.callback(
    Output("wl-ks", "figure"),
    Output("wl-fit-table", "children"),
    Output("wl-output", "children"),
    Input("wl-done", "data"),
)
def fill(job_id):
    if job_id is None:
        return empty_figure(NO_FIT), None, None
    try:
        result = results.job_result(job_id)
    except ApiError as exc:
        return empty_figure(exc.message), None, alert(exc.message)
    if not result:
        return empty_figure(f"Workload job {job_id} has no result"), None, None
    return cached(
        ("workload", job_id), lambda: (fit_ks_figure(result), fit_table(result), output_links(job_id, result))
    )


def fit_table(result: dict):
    rows = task_summary(result)
    if not rows:
        return None
    head = html.Tr(
        [
            html.Th("Task"),
            html.Th("Samples fitted", className="num"),
            html.Th(
                "At length cap",
                className="num",
                title="share of samples whose response reached the length cap (whatever their stop reason); "
                "unknown when the trace has no cap (none given, recorded or shown by the data)",
            ),
            html.Th("Within-group correlation", className="num"),
            html.Th("Mean response trend (tokens / step)", className="num"),
        ]
    )
    fmt = lambda v, f: "—" if v is None else format(v, f)  # noqa: E731
    body_rows = [
        html.Tr(
            [
                html.Td(r["task"]),
                html.Td(human_count(r["samples"]), className="num"),
                html.Td(_at_cap(r), className="num"),
                html.Td(fmt(r["intra_group_corr"], ".3f"), className="num"),
                html.Td(fmt(r["tokens_per_step"], "+.1f"), className="num"),
            ]
        )
        for r in rows
    ]
    return html.Table([html.Thead(head), html.Tbody(body_rows)], className="table")


def _at_cap(row: dict) -> str:
    """The share at the length cap, or "unknown" (no cap: not 0%)."""
    return "unknown" if row["truncation_rate"] is None else f"{100 * row['truncation_rate']:.2f}%"


def output_links(job_id, result: dict):
    """What the job made: the new trace (a link) and the files (the zip)."""
    if not result.get("steps"):
        return alert("Fit only: nothing generated.", "info", id="wl-fit-only")
    parts: list[Component] = [
        html.Span(
            f"Generated {result.get('steps')} steps, {human_count(result.get('samples'))} samples "
            f"({result.get('groups')} groups x {result.get('samples_per_group')}); files: "
            f"{', '.join(result.get('files') or [])}. "
        )
    ]
    if result.get("trace_id"):
        label = f"Open trace {result['trace_id']}" + ("" if result.get("trace_created", True) else " (already there)")
        parts.append(
            dcc.Link(
                label,
                href=href(f"/traces/{result['trace_id']}"),
                id="wl-trace-link",
                className="button small secondary",
            )
        )
    parts.append(
        html.A(
            "Download .zip",
            href=workload_zip_href(job_id),
            id="wl-download",
            className="button small secondary",
            download=f"workload-{job_id}.zip",
        )
    )
    return html.Div(parts, className="section controls", id="wl-output-box")
