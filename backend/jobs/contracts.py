"""Job contracts: what each job kind is called on the queue, and where its files live.

Both sides read this one module: the backend sends a job by task name (it never imports
the workers), the workers register their tasks under the same names, and the API and
the workers compute artefact paths (and delete them with their job or trace) here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from backend.settings import Settings, get_settings
from core.analysis.registry import ANALYSES

INGEST_KIND = "ingest"
SIMULATION_KIND = "simulation"
WORKLOAD_KIND = "workload"
ADVICE_KIND = "advice"
TEXT_INDEX_KIND = "text_index"
ENGINE_REPLAY_KIND = "engine_replay"
# Engine replays go to a queue of their own: only workers with an inference engine (the
# engine environment, deploy/engine-venv.sh; a GPU machine) read it.
ENGINE_QUEUE = "engine"

# Celery task name per task; every analysis kind (lengths, gpu_timeline, ...) goes to
# `analyses`, which reads a trace's columns once for all the jobs it is given.
TASK_NAMES = {
    INGEST_KIND: "workers.tasks.ingest_upload",
    "analyses": "workers.tasks.run_analyses",
    "analysis_part": "workers.tasks.analysis_part",
    SIMULATION_KIND: "workers.tasks.run_simulation",
    WORKLOAD_KIND: "workers.tasks.run_workload",
    ADVICE_KIND: "workers.tasks.run_advice",
    "advice_part": "workers.tasks.advice_part",
    TEXT_INDEX_KIND: "workers.tasks.index_texts",
    ENGINE_REPLAY_KIND: "workers.tasks.run_engine_replay",
}


def job_kinds() -> list[str]:
    """Every job kind: the tasks' own and each registered analysis."""
    return [INGEST_KIND, *ANALYSES, SIMULATION_KIND, WORKLOAD_KIND, ADVICE_KIND, TEXT_INDEX_KIND, ENGINE_REPLAY_KIND]


def task_name(job_kind: str) -> str:
    """The task that runs a job of `job_kind`."""
    return TASK_NAMES.get(job_kind, TASK_NAMES["analyses"])


# --------------------------------------------------------------------------- artefacts

WORKLOAD_ZIP = "workload.zip"


def simulation_dir(job_id: int) -> Path:
    return get_settings().data_dir / "simulations" / str(int(job_id))


def chrome_trace_path(job_id: int, which: str) -> Path:
    """The simulated timeline of policy `which` ("a" or "b"), gzipped Chrome-trace JSON."""
    return simulation_dir(job_id) / f"chrome_trace_{which}.json.gz"


def workload_dir(job_id: int) -> Path:
    """Generated workload files: per-step JSONL, compact JSON, fitted model, the zip."""
    return get_settings().data_dir / "workloads" / str(int(job_id))


def workload_zip(job_id: int) -> Path:
    return workload_dir(job_id) / WORKLOAD_ZIP


def artefact_dirs(job_kind: str, job_id: int) -> list[Path]:
    """Folders a job of this kind may have written (removed with the job)."""
    if job_kind == SIMULATION_KIND:
        return [simulation_dir(job_id)]
    if job_kind == WORKLOAD_KIND:
        return [workload_dir(job_id)]
    return []


def remove_artefacts(jobs) -> None:
    """Remove the folders of `jobs`, (kind, id) pairs whose rows are gone (or going)."""
    for job_kind, job_id in jobs:
        for folder in artefact_dirs(job_kind, job_id):
            shutil.rmtree(folder, ignore_errors=True)


def upload_folder(params: dict, settings: Settings) -> Path | None:
    """The stored upload an ingest job's parameters name (`upload`, under the upload
    folder; `folder`, a path: jobs of before)."""
    if params.get("upload"):
        return settings.upload_dir / Path(str(params["upload"])).name
    if params.get("folder"):
        return Path(str(params["folder"]))
    return None
