"""Engine-replay jobs: parameters checked against the policy registry, the job sent to
the engine queue (contracts.ENGINE_QUEUE), which only engine workers read."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from backend.jobs.contracts import ENGINE_QUEUE, ENGINE_REPLAY_KIND
from backend.jobs.state import create_job
from backend.store.models import Job, JobStatus, utcnow
from core.simulator.policies import policy_spec


def engine_replay_params(trace_id: int, policy: str, params: dict | None = None, **options) -> dict:
    """The job's parameters; ValueError naming the field when the policy cannot run on an
    engine or a parameter is not its own."""
    spec = policy_spec(policy)
    if spec.not_on_engine is not None:
        raise ValueError(f"policy.kind: {policy} does not run on an engine: {spec.not_on_engine}")
    spec.resolve(params, "policy.params")
    known = {"steps", "max_requests", "length_scale", "profile_id", "engines", "arch"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown field")
    return {"trace_id": trace_id, "policy": policy, "params": dict(params or {}), **options}


def create_engine_replay_job(session: Session, team_id: int, params: dict) -> Job:
    job = create_job(session, team_id=team_id, trace_id=params["trace_id"], kind=ENGINE_REPLAY_KIND, params=params)
    job.queue = ENGINE_QUEUE
    return job


def queue_engine_replay(session: Session, team_id: int, params: dict) -> Job:
    """Commit the job and send it to the engine queue; with the broker down it waits in
    the outbox, which the workers' sweeper sends to the same queue."""
    from backend.jobs.dispatch import QueueUnavailable, dispatch

    job = create_engine_replay_job(session, team_id, params)
    session.commit()
    try:
        dispatch(job.id, ENGINE_REPLAY_KIND, ENGINE_QUEUE)
    except QueueUnavailable:
        pass
    return job


def replay_message(result: dict) -> str:
    """A finished replay's one-line summary (the job's message)."""
    err = result["error"]["makespan"]
    head = f"{result['requests']} requests on {result['engines']} engine(s)"
    return f"{head}; makespan error {err:+.1%}" if err is not None else head


def record_engine_replay(session: Session, team_id: int, params: dict, result: dict, started_at: datetime) -> Job:
    """A replay run outside the queue (the CLI's `engine-replay`) kept as a finished job of
    its trace, so the API and the Simulate page show it as they show a worker's."""
    job = create_engine_replay_job(session, team_id, params)
    job.status, job.progress, job.result = JobStatus.SUCCEEDED, 1.0, result
    job.message = replay_message(result)
    job.started_at, job.finished_at = started_at, utcnow()
    return job
