"""Running workload jobs: fit a trace's length model and/or generate a synthetic
PolyTrace-style workload, write it to files, ingest it as a new trace of the team.

Pure half (also used by `rlvr-explorer generate`): `fit_models(columns, trace_tasks,
max_response_len)`, `generate(params, models)`, `write_files(folder, steps, formats,
dp_size, models)`, `ingest_files(files)` (which written files make the trace).
I/O half: `run_workload_job(job_id)`.

Files go to ``<data_dir>/workloads/<job_id>/``:
  packed_lengths_step_N.jsonl        format "packed" (one prompt group per line)
  multiturn_workload_step_N.jsonl    format "multiturn" (one trajectory per line)
  workload_compact.json              format "compact" (the whole run keyed by step)
  workload_model.json                the fitted models (`TaskLengthModel.to_dict` per
                                     task; plain numbers, no sample of the data) when
                                     a trace was fitted
  workload.zip                       all of the above, what the download serves
Only one format is ingested (multiturn, else packed, else compact), since each alone
describes every sample.

Job result: {"fit": {task: model.report()} or None, "task", "steps", "groups",
"samples_per_group", "samples", "multiturn", "files": [names], "ingested_files",
"trace_id": the new trace or None, "trace_created": False when the team had already
ingested identical content (that trace is returned)}.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson

from backend.formats.base import InputError
from backend.ingest.service import accept_upload, ingest_stored
from backend.ingest.uploads import local_files
from backend.jobs.contracts import WORKLOAD_ZIP, workload_dir
from backend.jobs.state import set_progress
from backend.settings import get_settings
from backend.store.db import get_engine, new_session
from backend.store.models import Job, JobStatus, Trace, TraceStatus
from core.workload.export import write_compact_json, write_multiturn_jsonl, write_packed_jsonl
from core.workload.fit import TaskLengthModel, fit_workload
from core.workload.generate import GeneratedStep, generate_steps
from core.workload.params_file import generate_from_parameters, load_parameters
from workers.runners.outcome import NOT_READY, JobFailed, job_outcome

log = logging.getLogger(__name__)

MODEL_FILE = "workload_model.json"
COMPACT_FILE = "workload_compact.json"
Progress = Callable[[float, str], None]


# --------------------------------------------------------------------------- pure


def fit_models(
    columns: dict[str, dict], task_names: list[str] | None = None, max_response_len: int | None = None, seed: int = 0
) -> dict[str, TaskLengthModel]:
    """One length model per task of a trace's columns (`sim_runner.load_columns`)."""
    if "samples" not in columns or not len(columns["samples"].get("step", [])):
        raise ValueError("trace_id: the trace has no samples to fit")
    samples = dict(columns["samples"])
    task_id = samples.pop("task_id", None)
    if task_id is not None and task_names:
        names = np.array(list(task_names) + ["default"], dtype=object)
        tid = np.asarray(task_id, dtype=np.int64)
        samples["task"] = names[np.where((tid >= 0) & (tid < len(task_names)), tid, len(task_names))]
    return fit_workload(
        samples, columns.get("turns"), columns.get("tool_calls"), max_response_len=max_response_len, seed=seed
    )


def pick_task(models: dict[str, TaskLengthModel], task: str | None) -> str:
    if task is None:
        return max(models, key=lambda k: models[k].n_samples)
    if task not in models:
        raise ValueError(f"task: the trace has tasks {', '.join(models)}, not {task!r}")
    return task


def generate(params: dict, models: dict[str, TaskLengthModel] | None) -> list[GeneratedStep]:
    """The requested steps, from the parameter file or the fitted model of the task."""
    if params.get("parameters") is not None:
        return generate_from_parameters(
            load_parameters(params["parameters"]),
            params["task"],
            params["steps"],
            params["groups"],
            params["samples_per_group"],
            seed=params["seed"],
        )
    if models is None:
        raise ValueError("a workload from a trace needs the trace's fitted task models")
    task = pick_task(models, params.get("task"))
    return generate_steps(
        models[task],
        params["steps"],
        groups=params.get("groups"),
        samples_per_group=params.get("samples_per_group"),
        seed=params["seed"],
    )


def write_files(
    folder: Path,
    steps: list[GeneratedStep],
    formats: list[str],
    dp_size: int = 1,
    models: dict[str, TaskLengthModel] | None = None,
) -> dict[str, list[Path]]:
    """Write the steps in each format (and the fitted models); {format: paths}."""
    folder.mkdir(parents=True, exist_ok=True)
    multiturn = bool(steps) and all(s.turns is not None for s in steps)
    out: dict[str, list[Path]] = {}
    if steps and "multiturn" in formats:
        if not multiturn:
            raise ValueError("formats: 'multiturn' needs multi-turn steps, and this workload is single-turn")
        out["multiturn"] = write_multiturn_jsonl(folder, steps)
    if steps and "packed" in formats:
        out["packed"] = write_packed_jsonl(folder, steps, dp_size)
    if steps and "compact" in formats:
        out["compact"] = [write_compact_json(folder / COMPACT_FILE, steps)]
    if models:
        path = folder / MODEL_FILE
        path.write_bytes(orjson.dumps({k: m.to_dict() for k, m in models.items()}, option=orjson.OPT_SERIALIZE_NUMPY))
        out["model"] = [path]
    return out


def ingest_files(files: dict[str, list[Path]]) -> list[Path]:
    """The files that make the trace: one format, the richest written."""
    for fmt in ("multiturn", "packed", "compact"):
        if files.get(fmt):
            return files[fmt]
    return []


def write_zip(folder: Path, files: dict[str, list[Path]]) -> Path:
    target = folder / WORKLOAD_ZIP
    tmp = folder / (WORKLOAD_ZIP + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for paths in files.values():
            for p in paths:
                zf.write(p, p.name)
    tmp.replace(target)
    return target


def summary(params: dict, steps: list[GeneratedStep], models: dict | None) -> dict:
    groups = [len(s.responses) for s in steps]
    sizes = sorted({int(r.size) for s in steps for r in s.responses})
    return {
        "fit": {k: m.report() for k, m in models.items()} if models else None,
        "task": steps[0].task if steps else (pick_task(models, params.get("task")) if models else params.get("task")),
        "steps": len(steps),
        "first_step": steps[0].step if steps else None,
        "groups": groups[0] if groups and len(set(groups)) == 1 else groups or None,
        "samples_per_group": sizes[0] if len(sizes) == 1 else sizes or None,
        "samples": int(sum(s.n_samples for s in steps)),
        "multiturn": bool(steps) and all(s.turns is not None for s in steps),
    }


# --------------------------------------------------------------------------- the job


def run_workload_job(job_id: int) -> None:
    from workers.runners.simulations import load_columns

    engine = get_engine()
    with new_session() as session:
        job = session.get(Job, job_id)
        if job is None or job.status == JobStatus.SUCCEEDED:
            return
        params, team_id = dict(job.params), job.team_id
        trace = session.get(Trace, params["trace_id"]) if params.get("trace_id") is not None else None

    def progress(fraction: float, message: str) -> None:
        set_progress(engine, job_id, fraction, message)

    with job_outcome(engine, job_id, "workload", user_errors=(ValueError, InputError)) as outcome:
        models = None
        if params.get("trace_id") is not None:
            if trace is None or trace.status != TraceStatus.READY:
                raise JobFailed(NOT_READY)
            progress(0.05, "reading the trace")
            with engine.connect() as conn:
                columns = load_columns(conn, trace)
            progress(0.15, "fitting length distributions")
            models = fit_models(columns, trace.tasks, trace.max_response_len, params["seed"])
        progress(0.35, f"generating {params['steps']} steps")
        steps = generate(params, models) if params["steps"] else []
        folder = workload_dir(job_id)
        progress(0.5, "writing files")
        files = write_files(folder, steps, params["formats"], params["dp_size"], models)
        write_zip(folder, files)
        result = summary(params, steps, models)
        result.update(
            files=sorted(p.name for ps in files.values() for p in ps),
            ingested_files=[],
            trace_id=None,
            trace_created=None,
        )
        chosen = ingest_files(files)
        if params["ingest"] and chosen:
            result.update(
                ingest_generated(
                    team_id,
                    chosen,
                    params.get("name") or default_name(params, result),
                    lambda f, m: progress(0.6 + 0.39 * f, f"ingesting: {m}"),
                )
            )
        message = f"generated {result['steps']} steps, {result['samples']} samples"
        if result["trace_id"] is not None:
            message += f"; trace {result['trace_id']}"
        outcome.succeed(result, message)


def default_name(params: dict, result: dict) -> str:
    source = f"trace {params['trace_id']}" if params.get("trace_id") is not None else "parameter file"
    return f"synthetic {result['task']}: {result['steps']} steps from {source} (seed {params['seed']})"


def ingest_generated(team_id: int, files: list[Path], name: str, progress: Progress | None = None) -> dict:
    """Ingest written files as a trace of the team, now (the files stay in place)."""
    with new_session() as session:
        outcome = accept_upload(
            session,
            get_settings(),
            team_id=team_id,
            stored=local_files(files),
            name=name,
            forced_format=None,
            max_response_len=None,
            inline=True,
            progress=progress,
        )
        if outcome.trace.status != TraceStatus.READY:
            # identical content whose ingest an earlier, killed attempt left unfinished:
            # ingest again (the pipeline first clears what that attempt wrote)
            ingest_stored(outcome.trace.id, files, get_settings(), None, None, progress)
        return {
            "trace_id": outcome.trace.id,
            "trace_created": outcome.created,
            "ingested_files": [p.name for p in files],
        }
