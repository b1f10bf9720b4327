"""Callbacks shared by every page, registered on each app by `register(app)`:
the navigation bar, sign-out, and the analysis panels of `dashboard.views.panels`.
"""

from __future__ import annotations

import dash
from dash import ALL, MATCH, Input, Output, State, html, no_update

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.views import components as c
from dashboard.views.formatting import job_active
from dashboard.views.panels import panel_jobs, panel_state, status_line


def register(app: dash.Dash) -> None:
    app.clientside_callback(
        "function(target) { if (target) { window.location.replace(target); } return window.dash_clientside.no_update; }",
        Output("redirect", "title"),
        Input(c.REDIRECT_TARGET, "data"),
    )
    # The API refused the session's key (dashboard.api.session.end_session): to sign-in.
    app.clientside_callback(
        "function(target) { if (target) { window.location.replace(target); } return window.dash_clientside.no_update; }",
        Output(f"{session.SESSION_ENDED}-redirect", "title"),
        Input(session.SESSION_ENDED, "data"),
        prevent_initial_call=True,
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
        prevent_initial_call=True,  # the layout filled the panel (dashboard.views.panels); this keeps it current
    )
    def analysis_status(_n, params, shown, trace_id):
        kind = dash.ctx.outputs_list[0]["id"]["kind"]
        if not trace_id:
            return no_update, "", True
        api = session.api()
        try:
            job, best = panel_jobs(api, trace_id, kind, params)
        except ApiError as exc:
            state = {"job_id": None, "note": f"{kind} analysis unavailable: {exc.message}"}
            return _if_changed(state, shown), c.alert(exc.message), True
        state = panel_state(job, best, kind)
        return _if_changed(state, shown), status_line(job, best), not job_active(job)

    _trace_status_callback(app)
    _live_trace_callback(app)


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
            return c.progress(job.get("progress"), job.get("message") or job.get("status") or ""), no_update, False
        return html.Span(trace.get("status"), className="muted"), no_update, False


def _live_trace_callback(app: dash.Dash) -> None:
    from dashboard.server.figure_cache import note_trace_version
    from dashboard.views.trace_frame import jobs_version, live_version

    @app.callback(
        Output(c.PAGE_TRACE_ID, "data", allow_duplicate=True),
        Output("trace-live-version", "data"),
        Output("trace-live", "children"),
        Output("trace-live-steps", "children"),
        Output("trace-live-poll", "disabled"),
        Output("trace-live-reload", "href"),
        Output({"type": c.POLL, "kind": ALL}, "disabled", allow_duplicate=True),
        Input("trace-live-poll", "n_intervals"),
        State(c.PAGE_TRACE_ID, "data"),
        State("trace-live-version", "data"),
        State("_pages_location", "pathname"),
        State("_pages_location", "search"),
        prevent_initial_call=True,
    )
    def poll_live_trace(n, trace_id, shown, pathname, search):
        """A live trace grew: its figures are dropped and the page's callbacks (all fed by
        the trace-id store) run again; when its sections change, the page reloads. When
        its analysis jobs change (re-run on the new data, finished), the page's analysis
        panels poll again, so every card and figure shows the newest result."""
        panels: list[object] = [no_update] * len(dash.ctx.outputs_list[-1])
        try:
            api = session.api()
            trace = api.get_trace(trace_id)
            version = {**live_version(trace), "jobs": jobs_version(api.analyses(trace_id))}
        except ApiError:
            return no_update, no_update, no_update, no_update, no_update, no_update, panels
        live = version["live"]
        label = "live" if live else "closed"
        steps = f" {trace.get('n_steps', 0)} steps" + (" so far" if live else "")
        if version["jobs"] != (shown or {}).get("jobs"):
            panels = [False] * len(panels)  # the panels look again (each stops when its job is done)
        # the poll goes on while the trace is live or an analysis of it still runs
        done = not live and not any(status in ("queued", "running") for _k, _i, status in version["jobs"])
        if {k: v for k, v in version.items() if k != "jobs"} == {k: v for k, v in (shown or {}).items() if k != "jobs"}:
            return no_update, version, label, steps, done, no_update, panels
        note_trace_version(trace)
        if shown and version["shape"] != shown.get("shape"):
            query = "&".join(p for p in (search or "").lstrip("?").split("&") if p and not p.startswith("v="))
            target = f"{pathname}?{query + '&' if query else ''}v={n}"
            return no_update, version, label, steps, done, target, panels
        return trace_id, version, label, steps, done, no_update, panels


def _if_changed(state: dict, shown: dict | None):
    """The store's new value, or no_update when what is shown did not change (so a poll
    does not redraw the figures every second)."""
    return no_update if state == shown else state
