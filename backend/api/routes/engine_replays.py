"""A trace's engine replays (`rlvr-explorer engine-replay`, or an `engine_replay` job on
the engine queue, queued here by POST): measured on real inference engines versus the simulator's
prediction from an engine profile, with the profile used. Team-scoped: another team's
trace is a 404, and only this team's jobs and profiles are read."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from backend.api.deps import SessionDep, TraceDep, require_replayable
from backend.api.errors import ERROR_RESPONSES
from backend.api.replay_requests import unprocessable
from backend.api.schemas import JobOut
from backend.api.schemas_engine import (
    FIGURES,
    EngineProfileOut,
    EngineReplayCreate,
    EngineReplayList,
    EngineReplayOut,
)
from backend.jobs.contracts import ENGINE_REPLAY_KIND
from backend.jobs.engine_replay import engine_replay_params, queue_engine_replay
from backend.store.models import EngineProfile, Job, JobStatus
from backend.store.queries.engine_profiles import engine_profiles_by_id
from backend.store.queries.jobs import list_jobs

router = APIRouter(prefix="/traces/{trace_id}/engine-replays", tags=["engine"], responses=ERROR_RESPONSES)


def relative_errors(measured: dict, predicted: dict) -> dict:
    """(predicted − measured) / measured per figure; None where nothing was measured."""
    out = {}
    for figure in FIGURES:
        m, p = measured.get(figure), predicted.get(figure)
        out[figure.removesuffix("_s")] = (p - m) / m if m and p is not None else None
    return out


def profile_out(row: EngineProfile) -> EngineProfileOut:
    fit = row.fit or {}
    return EngineProfileOut(
        id=row.id,
        engine=row.engine,
        device=row.device,
        arch=row.arch,
        tp=row.tp,
        coefficients=dict(row.coefficients),
        decode_r2=fit.get("decode_r2"),
        prefill_r2=fit.get("prefill_r2"),
        created_at=row.created_at,
    )


def replay_out(job: Job, profiles: dict[int, EngineProfile]) -> EngineReplayOut:
    fields: dict = {
        "job_id": job.id,
        "status": job.status,
        "message": job.message,
        "error_message": job.error,
        "params": dict(job.params or {}),
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }
    r = job.result or {}
    if job.status == JobStatus.SUCCEEDED and "measured" in r:
        row = profiles.get(r.get("profile_id") or 0)
        kept = ("policy", "engine", "device", "arch", "engines", "steps", "requests", "finished", "aborted")
        fields.update({k: r.get(k) for k in (*kept, "lengths_exact", "measured", "predicted", "cpu_share")})
        fields.update(
            policy_params=r.get("params"),
            length_scale=(r.get("workload") or {}).get("length_scale"),
            error=relative_errors(r["measured"], r["predicted"]),
            warnings=list(r.get("warnings") or []),
            profile_id=r.get("profile_id"),
            profile=profile_out(row) if row is not None else None,
        )
    return EngineReplayOut.model_validate(fields)


@router.get("", response_model=EngineReplayList)
def list_engine_replays(
    session: SessionDep,
    trace: TraceDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
) -> EngineReplayList:
    """The trace's engine replays, newest first: each one's measured and predicted
    makespan, p50/p90 completion and decoded tokens, their relative errors, the policy,
    requests, whether lengths were exact, and the engine profile the prediction used."""
    jobs = list_jobs(
        session, team_id=trace.team_id, trace_id=trace.id, kind=ENGINE_REPLAY_KIND, limit=limit, include_result=True
    )
    ids = {int(p) for j in jobs if (p := (j.result or {}).get("profile_id")) is not None}
    profiles = engine_profiles_by_id(session, team_id=trace.team_id, ids=ids)
    return EngineReplayList(items=[replay_out(j, profiles) for j in jobs])


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={409: {"description": "The trace is not ready."}},
)
def create_engine_replay(body: EngineReplayCreate, session: SessionDep, trace: TraceDep) -> Job:
    """Queue a replay of the trace on real inference engines (an engine worker runs it:
    `celery -A workers.celery_app worker -Q engine` from the engine environment). A
    policy that cannot run on an engine, or a parameter that is not its own, is a 422
    naming the field and why."""
    require_replayable(trace)
    options = body.model_dump(exclude={"policy", "params"}, exclude_none=True)
    if body.steps is not None:
        if body.steps[1] <= body.steps[0] or body.steps[0] < 0:
            raise unprocessable(ValueError("steps: [first, end) with 0 <= first < end"))
        options["steps"] = list(body.steps)
    try:
        params = engine_replay_params(trace.id, body.policy, body.params, **options)
    except ValueError as exc:
        raise unprocessable(exc) from exc
    return queue_engine_replay(session, trace.team_id, params)
