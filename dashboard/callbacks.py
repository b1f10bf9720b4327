"""Callbacks shared by every page, registered on each app by `register(app)`:
the navigation bar, sign-out, and the analysis panels of `components.analysis_panel`.
"""

from __future__ import annotations

import dash
from dash import MATCH, Input, Output, State, html, no_update

from dashboard import components as c
from dashboard import session
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
        Input({"type": c.RUN, "kind": MATCH}, "n_clicks"),
        State({"type": c.PARAMS, "kind": MATCH}, "data"),
        State({"type": c.RESULT, "kind": MATCH}, "data"),
        State(c.PAGE_TRACE_ID, "data"),
    )
    def analysis_status(_n, _clicks, params, current, trace_id):
        kind = dash.ctx.outputs_list[0]["id"]["kind"]
        if not trace_id:
            return no_update, "", True
        api = session.api()
        try:
            rerun = isinstance(dash.ctx.triggered_id, dict) and dash.ctx.triggered_id.get("type") == c.RUN
            jobs = [] if rerun else api.analyses(trace_id)
            job = None if rerun else latest_job(jobs, kind)
            if job is None:
                # No analysis of this kind yet (or the user asked again): start one.
                job = api.run_analysis(trace_id, kind, params or {})
                jobs = [*jobs, job]
        except ApiError as exc:
            return no_update, c.alert(exc.message), True
        return _panel_state(job, jobs, kind, current)

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


def _panel_state(job: dict, jobs: list[dict], kind: str, current: dict | None):
    """(store data, status children, polling disabled) for the latest job."""
    done = [j for j in jobs if j.get("kind") == kind and j.get("status") == "succeeded" and j.get("result") is not None]
    best = max(done, key=lambda j: (str(j.get("created_at") or ""), str(j.get("id")))) if done else None
    data = no_update
    if best is not None and (current or {}).get("job_id") != best.get("id"):
        data = {"job_id": best.get("id"), "result": best["result"]}
    status = job.get("status")
    if job_active(job):
        text = job.get("message") or status
        children = c.progress(job.get("progress"), f"{text} {100 * float(job.get('progress') or 0):.0f}%")
    elif status == "failed":
        children = c.alert(f"failed: {job.get('error') or job.get('message') or 'unknown error'}")
    else:
        children = html.Span(f"done {str(job.get('finished_at') or '')[:19].replace('T', ' ')}", className="muted")
    return data, children, not job_active(job)
