"""The engine-replay job (kind ``engine_replay``, queue ``engine``): a trace's steps acted
out on real inference engines under a policy, beside the simulator's prediction from an
engine profile (engine/runs.py does the work; the CLI's `engine-replay` runs the same).

Params: trace_id, policy, params (the policy's own), steps ([first, end) or null),
max_requests, length_scale, profile_id, engines, arch (a preset architecture)."""

from __future__ import annotations

from backend.jobs.engine_replay import replay_message
from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobStatus, Trace, TraceStatus
from engine.client import EngineFailed, EngineMissing
from engine.runs import replay_on_engine
from workers.runners.outcome import NOT_READY, JobFailed, job_outcome
from workers.runners.simulations import ThrottledProgress, load_columns, steps_of_columns


def run_engine_replay_job(job_id: int) -> None:
    engine = get_engine()
    with new_session() as session:
        job = session.get(Job, job_id)
        if job is None or job.status == JobStatus.SUCCEEDED:
            return
        params, team_id = dict(job.params), job.team_id
        trace = session.get(Trace, params["trace_id"])
    progress = ThrottledProgress(job_id)
    with job_outcome(engine, job_id, "engine replay", user_errors=(ValueError, EngineMissing, EngineFailed)) as outcome:
        if trace is None or trace.status != TraceStatus.READY or trace.team_id != team_id:
            raise JobFailed(NOT_READY)
        progress(0.01, "reading the trace")
        steps = tuple(params["steps"]) if params.get("steps") else None
        with engine.connect() as conn:
            columns = load_columns(conn, trace, steps)
        workload = steps_of_columns(columns, trace.max_response_len) if columns.get("samples") is not None else []
        if not workload:
            raise JobFailed("steps: no training steps to replay")
        out = replay_on_engine(
            team_id,
            workload,
            params["policy"],
            params.get("params") or {},
            max_requests=params.get("max_requests"),
            length_scale=float(params.get("length_scale", 1.0)),
            profile_id=params.get("profile_id"),
            engines=params.get("engines"),
            arch=params.get("arch", "tiny"),
            progress=lambda message: progress(0.5, message),
        )
        outcome.succeed(out, replay_message(out))
