"""Callbacks shared by every page, registered on each app by `register(app)`:
the navigation bar, sign-out, and the analysis panels of `components.analysis_panel`.
"""

from __future__ import annotations

import dash
from dash import MATCH, Input, Output, State, html, no_update

from dashboard import components as c
from dashboard import results, session
from dashboard.client import ApiError
from dashboard.payloads import job_active, latest_job


def register(app: dash.Dash) -> None:
    app.clientside_callback(
        "function(target) { if (target) { window.location.replace(target); } return window.dash_clientside.no_update; }",
        Output("redirect", "title"),
        Input(c.REDIRECT_TARGET, "data"),
    )

    @app.callback(
        Output("top-nav", "children"),
        Output("team-box", "children"),
        Input("_pages_location", "pathname"),
    )
    def render_nav(pathname):
        team = session.team_name()
        if not team:
            return [], [dash.dcc.Link("Sign in", href=c.href("/sign-in"), className="nav-link")]
        return c.top_nav(pathname), [
            html.Span(team, className="team-name", id="team-name"),
            html.Button("Sign out", id="sign-out", n_clicks=0, className="button small ghost"),
        ]

    @app.callback(
        Output("nav-redirect", "href"),
        Input("sign-out", "n_clicks"),
        prevent_initial_call=True,
    )
    def do_sign_out(n_clicks):
        if not n_clicks:
            return no_update
        session.sign_out()
        return c.href("/sign-in")

    @app.callback(
        Output({"type": c.RESULT, "kind": MATCH}, "data"),
        Output({"type": c.STATUS, "kind": MATCH}, "children"),
        Output({"type": c.POLL, "kind": MATCH}, "disabled"),
        Input({"type": c.POLL, "kind": MATCH}, "n_intervals"),
        State({"type": c.PARAMS, "kind": MATCH}, "data"),
        State({"type": c.RESULT, "kind": MATCH}, "data"),
        State(c.PAGE_TRACE_ID, "data"),
    )
    def analysis_status(_n, params, shown, trace_id):
        kind = dash.ctx.outputs_list[0]["id"]["kind"]
        if not trace_id:
            return no_update, "", True
        api = session.api()
        try:
            # only this kind's jobs: a trace's full analysis list carries every result
            jobs = api.jobs(trace_id=trace_id, kind=kind, limit=10)
            job = latest_job(jobs, kind)
            if job is None:
                # No analysis of this kind yet: start one (the API dedupes identical requests).
                job = api.run_analysis(trace_id, kind, params or {})
                jobs = [*jobs, job]
        except ApiError as exc:
            state = {"job_id": None, "note": f"{kind} analysis unavailable: {exc.message}"}
            return _if_changed(state, shown), c.alert(exc.message), True
        best = _best_result(jobs, kind)
        if best is not None:
            results.remember(best)
        state = {"job_id": (best or {}).get("id"), "note": None if best else _note(job, kind)}
        return _if_changed(state, shown), _status_line(job), not job_active(job)

    _trace_status_callback(app)


def _trace_status_callback(app: dash.Dash) -> None:
    @app.callback(
        Output("trace-progress", "children"),
        Output("trace-status-reload", "href"),
        Output("trace-status-poll", "disabled"),
        Input("trace-status-poll", "n_intervals"),
        State(c.PAGE_TRACE_ID, "data"),
        State("trace-status-job", "data"),
        State("_pages_location", "pathname"),
        prevent_initial_call=True,
    )
    def poll_trace_status(_n, trace_id, job_id, pathname):
        api = session.api()
        try:
            trace = api.get_trace(trace_id)
            job = api.job(job_id) if job_id else None
        except ApiError as exc:
            return c.alert(exc.message), no_update, True
        if trace.get("status") in ("ready", "failed"):
            # reload (a changed URL, so the Location acts): the page now has a body or the error
            return no_update, f"{pathname}?ready={_n}", True
        if job and job_active(job):
            return c.progress(job.get("progress"), job.get("message") or job.get("status")), no_update, False
        return html.Span(trace.get("status"), className="muted"), no_update, False


def _best_result(jobs: list[dict], kind: str) -> dict | None:
    """The latest succeeded job of `kind` that has a result (kept on screen while a
    re-run is going)."""
    done = [j for j in jobs if j.get("kind") == kind and j.get("status") == "succeeded" and j.get("result") is not None]
    return max(done, key=lambda j: (str(j.get("created_at") or ""), str(j.get("id")))) if done else None


def _note(job: dict, kind: str) -> str:
    """What a figure waiting for this job says."""
    if job_active(job):
        return f"The {kind} analysis is running…"
    if job.get("status") == "failed":
        return f"The {kind} analysis failed: {job.get('error') or job.get('message') or 'unknown error'}"
    return f"The {kind} analysis has no result"


def _if_changed(state: dict, shown: dict | None):
    """The store's new value, or no_update when what is shown did not change (so a poll
    does not redraw the figures every second)."""
    return no_update if state == shown else state


def _status_line(job: dict):
    status = job.get("status")
    if job_active(job):
        text = job.get("message") or status
        return c.progress(job.get("progress"), f"{text} {100 * float(job.get('progress') or 0):.0f}%")
    if status == "failed":
        return c.alert(f"failed: {job.get('error') or job.get('message') or 'unknown error'}")
    return html.Span(f"done {str(job.get('finished_at') or '')[:19].replace('T', ' ')}", className="muted")
