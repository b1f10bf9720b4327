"""Analysis panels with their state: which job of an analysis kind a page shows.

`analysis_panel(kind, label, trace_id, params)` is the panel of `components` with its
store already filled when the page's layout is built (so a page's figures draw in the
first round of callbacks instead of waiting for a poll); the shared polling callback
(`dashboard.callbacks`) keeps it current with `panel_jobs` and `panel_state`.

Store contents: {"job_id": the succeeded job whose result the figures show (None when
there is none yet), "note": why there is none}. Job lists carry no results; figures
fetch the chosen job's result by id (`dashboard.server.results`).
"""

from __future__ import annotations

from datetime import UTC, datetime

import flask
from dash import html

from dashboard.api import session
from dashboard.api.client import ApiClient, ApiError
from dashboard.server import results
from dashboard.views import components as c
from dashboard.views.formatting import job_active, latest_job, latest_succeeded
from dashboard.views.freshness import age_text


def panel_jobs(
    api: ApiClient, trace_id, kind: str, params: dict | None, jobs: list[dict] | None = None
) -> tuple[dict, dict | None]:
    """(the latest job of `kind` for the trace, started now when there is none; the
    latest succeeded one, whose result is shown while a re-run is going).
    `jobs`: the trace's analysis jobs when the caller already listed them."""
    if jobs is None:
        jobs = api.jobs(trace_id=trace_id, kind=kind, limit=10)
    jobs = [j for j in jobs if j.get("kind") == kind]
    job = latest_job(jobs, kind)
    if job is None:
        # No analysis of this kind yet: start one (the API dedupes identical requests).
        job = api.run_analysis(trace_id, kind, params or {})
        jobs = [*jobs, job]
    return job, latest_succeeded(jobs, kind)


def panel_state(job: dict, best: dict | None, kind: str) -> dict:
    return {"job_id": (best or {}).get("id"), "note": None if best else note(job, kind)}


def note(job: dict, kind: str) -> str:
    """What a figure waiting for this job says."""
    if job_active(job):
        return f"The {kind} analysis is running…"
    if job.get("status") == "failed":
        return f"The {kind} analysis failed: {job.get('error') or job.get('message') or 'unknown error'}"
    return f"The {kind} analysis has no result"


def status_line(job: dict, best: dict | None = None):
    """The panel's line: a re-run's progress (saying the figures show an earlier result,
    and its age, meanwhile), a failure, or when the shown result was computed."""
    status = job.get("status")
    if job_active(job):
        text = job.get("message") or status
        shown = ""
        if best is not None and best.get("id") != job.get("id"):
            shown = f" — figures show the earlier result ({age_text(best.get('finished_at'), datetime.now(UTC))})"
        return c.progress(job.get("progress"), f"{text} {100 * float(job.get('progress') or 0):.0f}%{shown}")
    if status == "failed":
        return c.alert(f"failed: {job.get('error') or job.get('message') or 'unknown error'}")
    return html.Span(f"done {str(job.get('finished_at') or '')[:19].replace('T', ' ')}", className="muted")


def _trace_analyses(api: ApiClient, trace_id) -> list[dict]:
    """The trace's analysis jobs, listed once per request (a page may have several panels)."""
    memo = flask.g.setdefault("rlvr_trace_analyses", {})
    if trace_id not in memo:
        memo[trace_id] = api.analyses(trace_id)
    return memo[trace_id]


def analysis_panel(kind: str, label: str, trace_id, params: dict | None = None) -> html.Div:
    """`components.analysis_panel_layout` with its state as of now (see the module doc)."""
    api = session.api()
    try:
        jobs = None if params else _trace_analyses(api, trace_id)
        job, best = panel_jobs(api, trace_id, kind, params, jobs)
    except ApiError as exc:
        # 422 on "kind": the analysis does not apply to this trace -- information, not an error
        inapplicable = exc.status == 422 and exc.field == "kind"
        return c.analysis_panel_layout(
            kind,
            label,
            trace_id,
            params,
            state={"job_id": None, "note": f"{kind} analysis unavailable: {exc.message}"},
            status=c.alert(exc.message, "info" if inapplicable else "error"),
            polling=False,
        )
    if best is not None:
        results.prefetch(best["id"], results.page_query(kind))  # its figures will ask for it in a moment
    return c.analysis_panel_layout(
        kind,
        label,
        trace_id,
        params,
        state=panel_state(job, best, kind),
        status=status_line(job, best),
        polling=job_active(job),
    )
