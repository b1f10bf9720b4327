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
from dash import Input, Output, State, ctx, dcc, html
from dash.development.base_component import Component

from dashboard.api import session
from dashboard.api.client import ApiClient, ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.workload import KS_CAPTION, fit_ks_figure, task_summary
from dashboard.server import results
from dashboard.server.downloads import workload_zip_href
from dashboard.server.figure_cache import cached
from dashboard.views.components import alert, control, controls, graph, href, section
from dashboard.views.formatting import human_count
from dashboard.views.job_panel import Checked, JobPanel, rerun_job, shown_job
from dashboard.views.job_views import describe_workload
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


def workload_jobs(api: ApiClient, trace_id) -> list[dict]:
    """The trace's workload jobs, newest first (the history table)."""
    return api.jobs(trace_id=trace_id, kind="workload", limit=50)


PANEL = JobPanel(
    "wl", "Workload job", "workload job", "wl-form-message", history=workload_jobs, describe=describe_workload
)
PANEL.register()


def _form_start(trace: dict, again: dict | None) -> dict:
    """The form's values: sized from the trace, or as the job "Re-run…" named ran."""
    v: dict[str, Any] = {
        "steps": min(int(trace.get("n_steps") or 1), 20),
        "groups": None,
        "samples_per_group": None,
        "seed": 0,
        "dp_size": 1,
        "task": None,
        "formats": _formats(trace),
        "ingest": True,
        "name": None,
    }
    return v if again is None else workload_values_from_job(again.get("params") or {}, v)


def _formats(trace: dict) -> list[str]:
    """The files a workload of this trace can be written as."""
    return ["multiturn", "compact"] if trace.get("n_turns") else ["packed", "compact"]


def _output_controls(trace: dict, v: dict) -> html.Div:
    """What is made: the files, whether they become a trace, its name, and the buttons."""
    formats = _formats(trace)
    return controls(
        control(
            "Files",
            dcc.Checklist(
                id="wl-formats",
                value=[f for f in v["formats"] if f in formats] or formats,
                inline=True,
                options=formats,
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
    )


def _form_section(trace: dict, v: dict) -> html.Section:
    tasks = trace.get("tasks") or []
    task = dcc.Dropdown(
        id="wl-task",
        options=tasks,
        value=v["task"] if v["task"] in tasks else None,
        placeholder="the largest task",
        disabled=not tasks,
        style={"minWidth": "160px"},
    )
    return section(
        "Generate a synthetic twin of this trace",
        controls(*(_number(id_, v) for id_ in NUMBERS), control("Task", task)),
        _output_controls(trace, v),
        PANEL.message(),
        help_text="Fits prompt and response lengths per task (marginals, a joint Gaussian mixture, the far tail, "
        "the trend over steps, group structure and, for multi-turn traces, turns and tool calls) and "
        "samples new steps from the fit. The files hold no sample of the original data.",
    )


def body(trace: dict, job_param=None, rerun=None) -> html.Div:
    if not trace.get("n_samples"):
        return alert("This trace has no samples (rollout lengths) to fit.", "info")
    try:
        history = workload_jobs(session.api(), trace["id"])
    except ApiError as exc:
        return alert(exc.message)
    shown = shown_job(history, job_param)
    return html.Div(
        [
            *PANEL.stores(shown),
            _form_section(trace, _form_start(trace, rerun_job(history, rerun))),
            PANEL.progress(shown),
            html.Div(id="wl-output"),
            section(
                "Fit report",
                graph("wl-ks"),
                html.Div(id="wl-fit-table"),
                help_text=KS_CAPTION + " 0 is a perfect fit; the generator samples the joint mixture.",
            ),
            section("Workload jobs of this trace", PANEL.history_box(history, shown)),
        ]
    )


def layout(trace_id: str | None = None, job: str | None = None, rerun: str | None = None, **_):
    return trace_page(trace_id, __name__, "/workload", lambda trace: body(trace, job, rerun))


def check(trace_id, form: dict) -> Checked:
    """Fit, or fit and generate with the form's values exactly as shown: a number field
    the form cannot send blocks the submit, its message under it."""
    fit_only = ctx.triggered_id == "wl-fit"  # the fit reads none of the numbers
    checked, errors = check_fields(form["numbers"], {} if fit_only else {i: spec[2] for i, spec in NUMBERS.items()})
    fields = {id_: errors.get(id_) for id_ in NUMBERS}
    if errors:
        blocked = blocked_message([f'"{NUMBERS[i][1]}"' for i in errors])
        return Checked(None, fields, alert(blocked, id="wl-form-blocked"))
    values = {NUMBERS[id_][0]: v for id_, v in checked.items()}
    values.update(
        task=form["task"], formats=form["formats"], ingest="ingest" in (form["ingest"] or []), name=form["name"]
    )
    return Checked(workload_body(trace_id, values, fit_only=fit_only), fields)


PANEL.register_submit(
    buttons=("wl-fit", "wl-submit"),
    form={
        "numbers": {id_: State(id_, "value") for id_ in NUMBERS},
        **{key: State(f"wl-{key}", "value") for key in ("task", "formats", "ingest", "name")},
    },
    fields={id_: Output(error_id(id_), "children") for id_ in NUMBERS},
    check=check,
    send=lambda api, body: api.create_workload(body),
)


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
