"""Files a job wrote under the data folder (replay timelines, workload files) go with
their job, and with the trace the job belongs to."""

from __future__ import annotations

from pathlib import Path

from backend.auth import team_for_key
from backend.jobs.contracts import SIMULATION_KIND, WORKLOAD_KIND, artefact_dirs
from backend.jobs.state import create_job
from backend.store.db import session_scope
from backend.store.models import JobStatus
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder


def job_with_files(team_key: str, kind: str, trace_id: int | None, status: str = JobStatus.SUCCEEDED) -> int:
    with session_scope() as s:
        team = team_for_key(s, team_key)
        job = create_job(s, team_id=team.id, trace_id=trace_id, kind=kind, params={"n": id(s)})
        job.status = status
        job_id = job.id
    for folder in artefact_dirs(kind, job_id):
        folder.mkdir(parents=True)
        (folder / "out.json.gz").write_bytes(b"x" * 100)
    return job_id


def folders(kind: str, job_id: int) -> list[Path]:
    dirs = artefact_dirs(kind, job_id)
    assert dirs
    return [d for d in dirs if d.exists()]


def test_deleting_a_trace_removes_its_jobs_files(api, team_key, tmp_path):
    archive = zip_folder(write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2)))
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", archive, "application/zip"))])
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    sim = job_with_files(team_key, SIMULATION_KIND, tid)
    work = job_with_files(team_key, WORKLOAD_KIND, tid)
    other = job_with_files(team_key, SIMULATION_KIND, None)
    assert folders(SIMULATION_KIND, sim) and folders(WORKLOAD_KIND, work)
    assert api.delete(f"/api/v1/traces/{tid}").status_code == 204
    assert not folders(SIMULATION_KIND, sim) and not folders(WORKLOAD_KIND, work)
    assert folders(SIMULATION_KIND, other)  # another trace's (or no trace's) job keeps its files


def test_deleting_a_job_removes_its_files(api, client, team_key):
    from backend.auth import create_team

    sim = job_with_files(team_key, SIMULATION_KIND, None)
    work = job_with_files(team_key, WORKLOAD_KIND, None, status=JobStatus.FAILED)
    running = job_with_files(team_key, SIMULATION_KIND, None, status=JobStatus.RUNNING)
    with session_scope() as s:
        _team, other_key = create_team(s, f"other-{sim}-{id(s)}")
    assert client.delete(f"/api/v1/jobs/{sim}", headers={"X-API-Key": other_key}).status_code == 404
    assert folders(SIMULATION_KIND, sim)
    for kind, job_id in ((SIMULATION_KIND, sim), (WORKLOAD_KIND, work)):
        assert api.delete(f"/api/v1/jobs/{job_id}").status_code == 204
        assert api.get(f"/api/v1/jobs/{job_id}").status_code == 404
        assert not folders(kind, job_id)
    r = api.delete(f"/api/v1/jobs/{running}")
    assert r.status_code == 409 and "running" in r.json()["detail"]["message"]
    assert folders(SIMULATION_KIND, running)
