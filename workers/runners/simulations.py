"""Running simulation jobs: the I/O around the replay (`core.simulator.replay`).

Read the job's request (`ReplayRequest.from_json` of its row) and the trace's columns,
call `replay` and `result_dict` in core, write the Chrome traces and store the result,
reporting progress on the job row. `load_columns` and `steps_of_columns` also serve
`rlvr-explorer simulate`, `advise` and `generate`, which read the store in-process.

Chrome-trace export: the worker writes the complete timeline of each policy as gzipped
Chrome trace JSON to ``<data_dir>/simulations/<job_id>/chrome_trace_{a,b}.json.gz``
(the data folder is shared by the API and the workers, as uploads are), so the download
never recomputes a replay; when the file is missing (a worker on another machine
without the shared folder) the API rebuilds it from the stored timeline
(`chrome_trace_from_result`), complete whenever the timeline was not truncated.
"""

from __future__ import annotations

import gzip
import logging
import time

import orjson
from sqlalchemy.engine import Connection

from backend.jobs.contracts import chrome_trace_path
from backend.jobs.state import set_progress
from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobStatus, Trace, TraceStatus
from backend.store.trace_tables import load_trace_tables
from core.analysis.tables import STEP_TIMING_COLUMNS
from core.simulator import SimResult, StepWorkload, chrome_trace
from core.simulator.replay import Replay, replay, result_dict
from core.simulator.request import ReplayRequest, SyntheticSource
from core.simulator.workload import workload_from_columns
from workers.runners.outcome import NOT_READY, JobFailed, job_outcome

log = logging.getLogger(__name__)


# The columns the simulator's workload builder and the workload fit read, per table.
WANTED = {
    "samples": (
        "step",
        "group_idx",
        "sample_idx",
        "prompt_len",
        "response_len",
        "dp_rank",
        "validate",
        "latency_s",
        "task_id",
    ),
    "turns": (
        "step",
        "group_idx",
        "sample_idx",
        "turn",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "engine_latency_s",
    ),
    "tool_calls": ("step", "group_idx", "sample_idx", "turn", "latency_s", "response_tokens"),
    "rank_timings": ("step", "rank", "phase", "seconds", "validate"),
}


# --------------------------------------------------------------------------- reading


def load_columns(conn: Connection, trace: Trace, step_range: tuple[int, int] | None = None) -> dict[str, dict]:
    """{table: {column: array}} of the trace (steps in [lo, hi) when given), for
    `workload_from_columns` and `fit_workload`; tables the trace lacks are absent."""
    out = load_trace_tables(conn, trace, {**WANTED, "steps": ("step", *STEP_TIMING_COLUMNS)}, step_range)
    if "tool_calls" in out and "latency_s" not in out["tool_calls"]:
        del out["tool_calls"]  # tool calls without latencies add nothing to a replay
    return out


def steps_of_columns(columns: dict[str, dict], max_response_len: int | None = None) -> list[StepWorkload]:
    if "samples" not in columns:
        raise ValueError("trace_id: the trace has no samples to replay")
    return workload_from_columns(
        columns["samples"],
        columns.get("turns"),
        columns.get("tool_calls"),
        columns.get("rank_timings"),
        columns.get("steps"),
        max_response_len=max_response_len,
    )


# --------------------------------------------------------------------------- Chrome trace


def write_chrome_traces(job_id: int, r: Replay) -> None:
    """Each policy's complete timeline, gzipped Chrome trace JSON in the shared data folder."""
    _write_chrome_trace(job_id, "a", r.a)
    if r.b is not None:
        _write_chrome_trace(job_id, "b", r.b)


def _write_chrome_trace(job_id: int, which: str, result: SimResult) -> None:
    path = chrome_trace_path(job_id, which)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(orjson.dumps(chrome_trace(result)), compresslevel=5))
    tmp.replace(path)  # never a half-written file


# --------------------------------------------------------------------------- the job


class ThrottledProgress:
    """Progress written to the job row at most once a second (and at the end)."""

    def __init__(self, job_id: int) -> None:
        self.job_id, self.last = job_id, 0.0

    def __call__(self, fraction: float, message: str) -> None:
        now = time.monotonic()
        if now - self.last >= 1.0 or fraction >= 0.98:
            self.last = now
            set_progress(get_engine(), self.job_id, min(fraction, 0.99), message)


def synthetic_steps(source: SyntheticSource, steps: tuple[int, int] | None = None) -> list[StepWorkload]:
    """The steps of a synthetic source (a PolyTrace parameter file), in [first, end) when given."""
    from core.workload.params_file import generate_from_parameters, load_parameters

    generated = generate_from_parameters(
        load_parameters(dict(source.parameters)),
        source.task,
        source.steps,
        source.groups,
        source.samples_per_group,
        seed=source.seed,
    )
    return [g.to_step_workload() for g in generated if steps is None or steps[0] <= g.step < steps[1]]


def read_steps(request: ReplayRequest, trace: Trace | None, progress: ThrottledProgress) -> list[StepWorkload]:
    """The request's workload: the trace's steps read from the store, or the synthetic source's."""
    if request.workload is None:
        if trace is None or trace.status != TraceStatus.READY:
            raise JobFailed(NOT_READY)
        progress(0.01, "reading the trace")
        with get_engine().connect() as conn:
            columns = load_columns(conn, trace, request.steps)
        return steps_of_columns(columns, trace.max_response_len) if columns.get("samples") is not None else []
    progress(0.01, "generating the workload")
    return synthetic_steps(request.workload, request.steps)


def run_simulation_job(job_id: int) -> None:
    engine = get_engine()
    with new_session() as session:
        job = session.get(Job, job_id)
        if job is None or job.status == JobStatus.SUCCEEDED:
            return
        stored = dict(job.params)
        trace = session.get(Trace, stored["trace_id"]) if stored.get("trace_id") is not None else None
    progress = ThrottledProgress(job_id)
    with job_outcome(engine, job_id, "simulation") as outcome:
        request = ReplayRequest.from_json(stored)
        steps = read_steps(request, trace, progress)
        if not steps:
            raise JobFailed("steps: no training steps to replay (is the step range empty?)")
        result = replay(steps, request, progress)
        write_chrome_traces(job_id, result)
        out = result_dict(result)
        summary = f"replayed {len(steps)} steps"
        if request.compare_policy is not None and out["compare"]["total"]["speedup"] is not None:
            summary += (
                f"; {request.compare_policy.kind} vs {request.policy.kind}: {out['compare']['total']['speedup']:.3f}x"
            )
        outcome.succeed(out, summary)
