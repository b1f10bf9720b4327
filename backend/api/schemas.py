"""Request and response schemas of the REST API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from backend.store.ids import ID_MAX, ID_MIN

# An id in a JSON body: a JSON integer in the id column's range (never 108.0 or "108").


def _utc(value: datetime) -> datetime:
    """Stored times are UTC; SQLite hands them back naive: say so (RFC 3339 needs an offset)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]

# Text parameters never hold NUL (Postgres text cannot store it).
NO_NUL = r"^[^\x00]*$"
BodyId = Annotated[int, Field(strict=True, ge=ID_MIN, le=ID_MAX)]


class FileError(BaseModel):
    message: str
    file: str | None = None
    line: int | None = None
    field: str | None = None


class ErrorDetail(FileError):
    errors: list[FileError] | None = None  # an upload's errors, one per file (the first 20)
    changed: dict[str, str] | None = None  # a re-upload's options: field -> what it would change
    trace_id: int | None = None  # ... and the trace that holds its content


class ErrorResponse(BaseModel):
    detail: ErrorDetail


class TeamOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    name: str


class MeOut(BaseModel):
    team: TeamOut


class TraceOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    name: str
    source_format: str | None
    framework: str | None
    status: str
    error: str | None
    n_steps: int
    n_samples: int
    n_turns: int
    n_tool_calls: int
    n_rank_timings: int
    n_gpu_events: int
    size_bytes: int
    max_response_len: int | None
    truncation: TruncationOut | None = None  # traces with samples
    tasks: list[str] = []
    metadata: dict[str, Any] = Field(default_factory=dict, validation_alias="meta")
    created_at: UtcDatetime
    updated_at: UtcDatetime
    job_id: int | None = None
    live: bool = False  # still being written (watch, Client); pages poll it
    # the analysis kinds this trace has the data for (the registry's `applicable`)
    analyses: list[str] = []


class TracePage(BaseModel):
    items: list[TraceOut]
    total: int


class JobOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    kind: str
    trace_id: int | None
    params: dict[str, Any]
    status: str
    progress: float
    message: str | None
    error: str | None
    result: dict[str, Any] | None
    attempts: int
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None


class JobList(BaseModel):
    items: list[JobOut]


class AnalysisKindOut(BaseModel):
    kind: str
    title: str
    defaults: dict[str, Any] = Field(description="Its parameters and their defaults")
    default: bool = Field(description="Queued automatically when a trace it applies to is ready")
    live_series: bool = Field(description="Its per-step figures join GET /traces/{id}/series")
    shows: list[str] = Field(
        default_factory=list,
        description='Where the dashboard shows it: "overview" (a trace\'s Overview, its panel and headline '
        'cards), "compare" (Compare many), and the trace pages drawing its figures (their path under '
        "/traces/{id}/)",
    )


class JobKindsOut(BaseModel):
    kinds: list[str] = Field(description="Every job kind")
    analyses: list[AnalysisKindOut] = Field(description="The analyses (job kinds run per trace), from their registry")


class UploadAccepted(BaseModel):
    trace: TraceOut
    job: JobOut


class StepOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    step: int
    validate_: bool = Field(validation_alias="validate", serialization_alias="validate")
    n_groups: int
    n_samples: int
    prompt_tokens: int
    response_tokens: int
    t_gen: float | None
    t_reward: float | None
    t_old_log_prob: float | None
    t_ref: float | None
    t_adv: float | None
    t_update_actor: float | None
    t_step: float | None
    metrics: dict[str, Any]


class StepList(BaseModel):
    items: list[StepOut]


class StepStats(BaseModel):
    step: int
    validate_: bool = Field(serialization_alias="validate")
    count: int
    mean: float | None = None
    std: float | None = None
    cv: float | None = None
    min: float | None = None
    p10: float | None = None
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    tail_ratio: float | None = None
    skewness: float | None = None
    truncation_rate: float | None = Field(
        None,
        description="share of truncated samples: the engine stopped for length where the trace records its stop"
        " reason, else the response reached the cap (`truncation` says which; None: unknown)",
    )
    at_cap_rate: float | None = Field(
        None,
        description="share of samples whose response reached the length cap, whatever their stop reason "
        "(`truncation.at_cap_definition`; None: no cap known, or summarised before this figure existed)",
    )
    hist: list[int] = []


class TruncationOut(BaseModel):
    """What "truncated" means for this trace: the same samples in summaries, the samples
    filter and every figure."""

    basis: str | None = Field(description="stop_reason (recorded per sample), cap, or None (unknown)")
    stop_reason: bool
    cap: int | None
    cap_source: str | None = Field(description="given (at upload), recorded (in the files), inferred")
    definition: str
    length_cap: int | None = Field(
        None, description="the cap `at_cap_rate` counts against: `cap`, else the one the data shows (None: unknown)"
    )
    length_cap_source: str | None = None
    at_cap_definition: str = Field("", description="what `at_cap_rate` counts, in words")


class SummaryOut(BaseModel):
    field: str
    task: str | None
    tasks: list[str]
    max_response_len: int | None
    truncation: TruncationOut
    bin_edges: list[int]
    steps: list[StepStats]


class SampleOut(BaseModel):
    step: int
    group_idx: int
    sample_idx: int
    rank: int | None
    dp_rank: int | None
    tp_rank: int | None
    task: str | None
    prompt_len: int
    response_len: int
    truncated: bool | None
    validate_: bool | None = Field(serialization_alias="validate")
    reward: float | None
    num_turns: int | None
    num_tool_calls: int | None
    latency_s: float | None


class SamplePage(BaseModel):
    items: list[SampleOut]
    total: int
    # True when counting stopped at SAMPLE_COUNT_CAP matches: `total` is then a floor.
    total_is_lower_bound: bool = False


class TurnOut(BaseModel):
    turn: int
    prompt_tokens: int | None
    cached_tokens: int | None
    new_prompt_tokens: int | None
    completion_tokens: int | None
    engine_latency_s: float | None
    tool_call_count: int | None
    tool_latency_s: float | None
    finish_reason: str | None


class TrajectoryOut(BaseModel):
    group_idx: int
    sample_idx: int
    response_len: int
    num_turns: int | None
    truncated: bool
    discarded: bool
    # [kind ("engine" | "tool"), start_s, seconds] in the trajectory's own time from 0
    segments: list[tuple[str, float, float]]
    end_s: float


class TrajectoryList(BaseModel):
    step: int
    items: list[TrajectoryOut]


class TurnList(BaseModel):
    step: int
    group_idx: int
    sample_idx: int
    items: list[TurnOut]


class RankTimingOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    step: int
    rank: int
    dp_rank: int | None
    tp_rank: int | None
    phase: str
    seconds: float | None
    batch_size: int | None
    validate_: bool | None = Field(validation_alias="validate", serialization_alias="validate")


class RankTimingList(BaseModel):
    items: list[RankTimingOut]


class GpuEventOut(BaseModel):
    rank: int
    stream: int
    step: int
    kind: str
    name: str
    start_us: float
    dur_us: float
    # start of the CPU runtime call that launched it (None when unknown)
    launch_us: float | None = None


class GpuEventPage(BaseModel):
    items: list[GpuEventOut]
    truncated: bool


class AnalysisRequest(BaseModel):
    kind: str
    params: dict[str, Any] = Field(default_factory=dict)
