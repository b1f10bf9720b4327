"""The job panel of a page that starts jobs (replays, workloads, advice): its submit, the
banner that follows the started job, the progress line, the table of the trace's
earlier jobs with their "Open" buttons, and the store the page's result figures listen to.

A page declares one `JobPanel(prefix, ...)`, places its pieces in its layout and calls
`register` once for its follow / reopen callbacks and `register_submit` for its form.
Ids (prefix "sim", say): sim-job (the job shown or running), sim-done (the succeeded job
drawn: the result figures' input), sim-poll, sim-progress, sim-history (one
<tr data-job-id> per job, buttons {"type": "sim-open", "index": job id}), sim-started
(the banner, in the panel's message slot).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import dash
from dash import ALL, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard.api import session
from dashboard.api.client import ApiClient, ApiError
from dashboard.server import results
from dashboard.views.components import PAGE_TRACE_ID, alert, clicked_index, data_attrs, progress
from dashboard.views.formatting import human_time, job_active


def job_banner(job: dict, what: str, banner_id: str, text: str | None = None) -> html.Div:
    """The submit's banner about its job as the job stands: started (info), finished (ok),
    failed (error). It carries the job and the status it shows, so the page's follow
    callback can bring it up to date (`followed_banner`)."""
    status = job.get("status") or "queued"
    attrs = {"id": banner_id, "data-job-id": str(job["id"]), "data-status": status}
    if text is not None:
        kind = "info" if job_active(job) else ("error" if status == "failed" else "ok")
        return alert(text, kind, **attrs)
    if job_active(job):
        return alert(f"{what} {job['id']} started: its progress is below.", "info", **attrs)
    if status == "failed":
        error = job.get("error") or job.get("message") or "unknown error"
        return alert(f"{what} {job['id']} failed: {error}", "error", **attrs)
    return alert(f"{what} {job['id']} finished: its results are below.", "ok", **attrs)


def followed_banner(shown, job: dict, what: str, banner_id: str):
    """The banner now on the page (a Dash component dict) brought up to date with the job
    it announced: "started" becomes finished or failed when the job does. no_update when
    the banner is about another job (or none) or already says the job's status."""
    props = shown.get("props") if isinstance(shown, dict) else None
    if not props or props.get("data-job-id") != str(job.get("id")):
        return no_update
    if job_active(job) or props.get("data-status") == job.get("status"):
        return no_update
    return job_banner(job, what, banner_id)


def job_progress(job: dict | None, what: str):
    """Running: a progress bar with the job's message; failed: its error; done: a line."""
    if not job:
        return None
    if job_active(job):
        pct = 100 * float(job.get("progress") or 0)
        return progress(
            job.get("progress"), f"{what} {job.get('id')}: {job.get('message') or job.get('status')} {pct:.0f}%"
        )
    if job.get("status") == "failed":
        return alert(f"{what} {job.get('id')} failed: {job.get('error') or job.get('message') or 'unknown error'}")
    return html.Span(f"{what} {job.get('id')}: {job.get('message') or 'done'}", className="muted")


def _history_row(j: dict, open_type: str, current: bool, describe) -> html.Tr:
    st = j.get("status") or "?"
    result_text = j.get("error") if st == "failed" else j.get("message")
    action = (
        "shown"
        if current
        else html.Button(
            "Open", id={"type": open_type, "index": j["id"]}, n_clicks=0, className="button small secondary"
        )
    )
    return html.Tr(
        [
            html.Td(str(j["id"])),
            html.Td(html.Span(st, className=f"badge badge-{st}")),
            html.Td(human_time(j.get("created_at"))),
            html.Td(describe(j)),
            html.Td(result_text or "", className="file-error" if st == "failed" else "muted"),
            html.Td(action),
        ],
        **data_attrs(job_id=str(j["id"]), status=st),
    )


def job_history_table(jobs: list[dict], *, open_type: str, describe, shown_id=None) -> html.Table | html.P:
    """One row per job, newest first: id, status, when, `describe(job)`, and "Open"."""
    if not jobs:
        return html.P("None yet.", className="muted")
    head = html.Tr(
        [html.Th("Job"), html.Th("Status"), html.Th("Created"), html.Th("What"), html.Th("Result"), html.Th("")]
    )
    shown = None if shown_id is None else int(shown_id)
    rows = [_history_row(j, open_type, shown == int(j["id"]), describe) for j in jobs]
    return html.Table([html.Thead(head), html.Tbody(rows)], className="table")


def shown_job(history: list[dict], job_param=None) -> dict | None:
    """The job a page opens with: `?job=ID` when it is one of the trace's, else the latest
    that succeeded, else the latest. A succeeded one's result is fetched meanwhile (the
    figures ask for it in a moment)."""
    shown = None
    if job_param is not None and str(job_param).isdigit():
        shown = next((j for j in history if j["id"] == int(job_param)), None)
    if shown is None and history:
        done = [j for j in history if j.get("status") == "succeeded"]
        shown = done[0] if done else history[0]
    if shown and shown.get("status") == "succeeded":
        results.prefetch(shown["id"])
    return shown


def rerun_job(history: list[dict], rerun=None) -> dict | None:
    """The job `?rerun=ID` names, when it is one of the trace's: the form starts as it ran."""
    return None if rerun is None else next((j for j in history if str(j["id"]) == str(rerun)), None)


class Checked(NamedTuple):
    """A page's reading of its form: the request to send (None: refused, `refusal` says
    why) and the page's own outputs (the messages under its fields)."""

    body: dict | None
    fields: Any = None
    refusal: Any = None


def api_error_text(exc: ApiError) -> str:
    """The API's refusal, with the field it names when the message does not."""
    where = f" ({exc.field})" if exc.field and exc.field not in exc.message else ""
    return f"{exc.message}{where}"


@dataclass(frozen=True)
class JobPanel:
    """One page's job panel (see the module's docstring for its ids)."""

    prefix: str  # the ids' prefix
    what: str  # the banner's name of a job: "Replay"
    label: str  # the progress line's: "replay"
    message_id: str  # the submit's message slot, where the banner goes
    history: Callable[[ApiClient, Any], list[dict]] | None = None  # (api, trace id) -> jobs, newest first
    describe: Callable[[dict], str] | None = None  # a history row's "What"
    poll_ms: int = 1000
    identical: str | None = None  # the banner when the API answers with an identical finished job ({id})

    def id(self, part: str) -> str:
        return f"{self.prefix}-{part}"

    @property
    def open_type(self) -> str:
        return self.id("open")

    # -- layout -----------------------------------------------------------------------
    def stores(self, shown: dict | None) -> list:
        """The job shown, the succeeded job drawn and the poll that follows a running one."""
        done = shown["id"] if shown and shown.get("status") == "succeeded" else None
        return [
            dcc.Store(id=self.id("job"), data=shown["id"] if shown else None),
            dcc.Store(id=self.id("done"), data=done),
            dcc.Interval(id=self.id("poll"), interval=self.poll_ms, disabled=not job_active(shown)),
        ]

    def progress(self, shown: dict | None) -> html.Div:
        return html.Div(job_progress(shown, self.label), id=self.id("progress"))

    def message(self) -> html.Div:
        return html.Div(id=self.message_id)

    def history_table(self, jobs: list[dict], shown_id=None) -> html.Table | html.P:
        return job_history_table(jobs, open_type=self.open_type, describe=self.describe, shown_id=shown_id)

    def history_box(self, jobs: list[dict], shown: dict | None) -> html.Div:
        return html.Div(self.history_table(jobs, shown["id"] if shown else None), id=self.id("history"))

    def banner(self, job: dict) -> html.Div:
        same = self.identical.format(id=job["id"]) if self.identical and job.get("status") == "succeeded" else None
        return job_banner(job, self.what, self.id("started"), same)

    # -- callbacks --------------------------------------------------------------------
    def register(self) -> None:
        """The callbacks that follow the shown job (and reopen an earlier one)."""
        if self.history is not None:
            dash.callback(
                Output(self.id("job"), "data", allow_duplicate=True),
                Input({"type": self.open_type, "index": ALL}, "n_clicks"),
                prevent_initial_call=True,
            )(reopen)
        dash.callback(
            output={
                "progress": Output(self.id("progress"), "children"),
                "stopped": Output(self.id("poll"), "disabled"),
                "done": Output(self.id("done"), "data"),
                "banner": Output(self.message_id, "children", allow_duplicate=True),
                **({"history": Output(self.id("history"), "children")} if self.history is not None else {}),
            },
            inputs={
                "job_id": Input(self.id("job"), "data"),
                "_n": Input(self.id("poll"), "n_intervals"),
                "done": State(self.id("done"), "data"),
                "trace_id": State(PAGE_TRACE_ID, "data"),
                "banner": State(self.message_id, "children"),
            },
            prevent_initial_call=True,  # the layout shows the state at page load
        )(self.follow)

    def follow(self, job_id, _n, done, trace_id, banner=None) -> dict:
        """The shown job's progress and banner; when it succeeds, the store the figures
        listen to; the history redrawn when another job is shown or this one finishes."""
        out: dict = {"progress": None, "stopped": True, "done": no_update, "banner": no_update}
        if self.history is not None:
            out["history"] = no_update
        if job_id is None:
            return out
        try:
            job = results.job(job_id)
        except ApiError as exc:
            return {**out, "progress": alert(exc.message)}
        active = job_active(job)
        finished = job.get("status") == "succeeded"
        if self.history is not None and (ctx.triggered_id == self.id("job") or not active):
            try:
                out["history"] = self.history_table(self.history(session.api(), trace_id), job_id)
            except ApiError:
                pass
        return {
            **out,
            "progress": job_progress(job, self.label),
            "stopped": not active,
            "done": job_id if finished and done != job_id else (no_update if finished else None),
            "banner": followed_banner(banner, job, self.what, self.id("started")),
        }

    def register_submit(
        self,
        buttons: tuple[str, ...],
        form: dict,
        fields: Any,
        check: Callable[[Any, dict], Checked],
        send: Callable[[ApiClient, dict], dict],
    ) -> None:
        """The submit: a click on one of `buttons` reads the `form` (States) with
        `check(trace_id, form)`; a refusal is said in the message slot, else `send(api,
        body)` starts the job, which the panel then shows with its banner. `fields`: the
        page's own outputs, set from `check`'s `fields`."""

        def submit(clicks, trace_id, form):
            if not any(clicks):
                raise PreventUpdate  # a re-rendered button, not a click
            checked = check(trace_id, form)
            out = {"job": no_update, "message": checked.refusal, "fields": checked.fields}
            if checked.body is None:
                return out
            try:
                job = send(session.api(), checked.body)
            except ApiError as exc:
                return {**out, "message": alert(api_error_text(exc))}
            return {**out, "job": job["id"], "message": self.banner(job)}

        dash.callback(
            output={
                "job": Output(self.id("job"), "data", allow_duplicate=True),
                "message": Output(self.message_id, "children"),
                "fields": fields,
            },
            inputs={
                "clicks": [Input(b, "n_clicks") for b in buttons],
                "trace_id": State(PAGE_TRACE_ID, "data"),
                "form": form,
            },
            prevent_initial_call=True,
        )(submit)


def reopen(clicks):
    """An "Open" button of the history: its job is shown."""
    job_id = clicked_index()
    return no_update if job_id is None else job_id
