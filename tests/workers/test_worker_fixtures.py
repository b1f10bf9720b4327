"""Every analysis runs as a job on every real fixture, on both deployment shapes, and the
GPU temporal breakdown agrees with Holistic Trace Analysis' reference figures."""

from __future__ import annotations

import re

import pytest

from tests.conftest import SHARED_FIXTURES, wait_for_job

RUNS = {
    "verl_video_qwen2_5_vl_7b": {"lengths", "longtail", "imbalance"},
    "verl_dapo_qwen2_5_32b": {"lengths", "longtail", "imbalance"},
    "rllm_deepcoder_14b_16k": {"lengths", "longtail", "imbalance", "latency"},
    "search_r1_qwen2_5_7b": {"lengths", "longtail", "latency", "multiturn"},
}


def upload_files(api, paths):
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in paths]
    r = api.post("/api/v1/traces", files=files)
    if r.status_code == 202:  # above the inline limit: a worker ingests it
        job = wait_for_job(api, r.json()["job"]["id"])
        assert job["status"] == "succeeded", job
        return api.get(f"/api/v1/traces/{r.json()['trace']['id']}").json()
    assert r.status_code == 201, r.text
    return r.json()


def finished_jobs(api, trace_id) -> dict[str, dict]:
    jobs = api.get(f"/api/v1/traces/{trace_id}/analyses").json()["items"]
    return {j["kind"]: wait_for_job(api, j["id"]) for j in jobs}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_default_analyses_on_fixture(api, worker, shared_fixtures, run):
    folder = shared_fixtures / "polytrace" / run
    trace = upload_files(api, sorted(folder.iterdir()))
    jobs = finished_jobs(api, trace["id"])
    assert RUNS[run] <= set(jobs), set(jobs)
    for kind, job in jobs.items():
        assert job["status"] == "succeeded", (kind, job["error"])
        assert job["result"], kind


def reference_table() -> dict[str, tuple[float, float]]:
    """{file: (idle %, compute %)} from the fixtures README."""
    text = (SHARED_FIXTURES / "README.md").read_text()
    rows = re.findall(
        r"\|\s*`([^`]+\.json\.gz)`\s*\|\s*\d+\s*\|(?:\s*[\d.]+\s*\|){4}\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|", text
    )
    return {name: (float(idle), float(compute)) for name, idle, compute in rows}


@pytest.mark.parametrize(
    "name", ["sampled_rank-0.json.gz", "ns_resolution_rank-0.json.gz", "queue_length_rank-0.json.gz"]
)
def test_gpu_timeline_job_matches_hta(api, worker, shared_fixtures, name):
    reference = reference_table()
    assert name in reference
    trace = upload_files(api, [shared_fixtures / "kineto" / name])
    job = finished_jobs(api, trace["id"])["gpu_timeline"]
    assert job["status"] == "succeeded", job["error"]
    (row,) = job["result"]["temporal"]
    idle, compute = reference[name]
    assert abs(row["idle_pct"] - idle) <= 0.5
    assert abs(row["compute_pct"] - compute) <= 0.5


def test_gpu_timeline_two_ranks(api, worker, shared_fixtures):
    reference = reference_table()
    paths = sorted((shared_fixtures / "kineto").glob("sampled_rank-*.json.gz"))
    trace = upload_files(api, paths)
    job = finished_jobs(api, trace["id"])["gpu_timeline"]
    assert job["status"] == "succeeded", job["error"]
    by_rank = {r["rank"]: r for r in job["result"]["temporal"]}
    assert set(by_rank) == {0, 1}
    for rank, path in enumerate(paths):
        idle, compute = reference[path.name]
        assert abs(by_rank[rank]["idle_pct"] - idle) <= 0.5
        assert abs(by_rank[rank]["compute_pct"] - compute) <= 0.5
    assert job["result"]["idle"] and job["result"]["kernel_types"]
    # the CPU-side HTA analyses ran on the events kept at ingest (HTA 0.5.0 figures)
    result = job["result"]
    assert result["cpu_side"] is True
    overlap = {r["rank"]: r["comm_comp_overlap_pct"] for r in result["comm_comp_overlap"]}
    assert abs(overlap[0] - 11.81) <= 0.01 and abs(overlap[1] - 20.05) <= 0.01
    assert [r["n_launches"] for r in result["launch_stats"]] == [602, 577]
    assert sorted(result["potential_stragglers"]["stragglers"]) == [0, 1]
