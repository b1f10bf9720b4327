"""Layout pieces for pages that start jobs and show them (replays, workloads): a job's
progress line and the table of a trace's earlier jobs, each row with an "Open" button
(pattern id {"type": open_type, "index": job id}).
"""

from __future__ import annotations

from dash import html

from dashboard.views.components import alert, progress
from dashboard.views.formatting import human_time, job_active

NO_REPLAY = "Configure a replay above and press Replay"


def replay_placeholder(job: dict | None) -> str:
    """What a replay's figures say while there is no succeeded replay to draw: how to
    start one, that the one started is running, or why it failed."""
    if not job:
        return NO_REPLAY
    if job_active(job):
        status = job.get("status") or "queued"
        return f"Replay {job['id']} is {status} (progress above): its figures appear here when it finishes"
    if job.get("status") == "failed":
        return f"Replay {job['id']} failed ({job.get('error') or 'unknown error'}): change the configuration and replay"
    return NO_REPLAY


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


def job_history_table(jobs: list[dict], *, open_type: str, describe, shown_id=None) -> html.Table | html.P:
    """One row per job, newest first: id, status, when, `describe(job)`, and "Open"."""
    if not jobs:
        return html.P("None yet.", className="muted")
    head = html.Tr(
        [html.Th("Job"), html.Th("Status"), html.Th("Created"), html.Th("What"), html.Th("Result"), html.Th("")]
    )
    rows = []
    for j in jobs:
        st = j.get("status") or "?"
        result_text = j.get("error") if st == "failed" else j.get("message")
        current = shown_id is not None and int(shown_id) == int(j["id"])
        rows.append(
            html.Tr(
                [
                    html.Td(str(j["id"])),
                    html.Td(html.Span(st, className=f"badge badge-{st}")),
                    html.Td(human_time(j.get("created_at"))),
                    html.Td(describe(j)),
                    html.Td(result_text or "", className="file-error" if st == "failed" else "muted"),
                    html.Td(
                        "shown"
                        if current
                        else html.Button(
                            "Open",
                            id={"type": open_type, "index": j["id"]},
                            n_clicks=0,
                            className="button small secondary",
                        )
                    ),
                ],
                **{"data-job-id": str(j["id"]), "data-status": st},
            )
        )
    return html.Table([html.Thead(head), html.Tbody(rows)], className="table")
