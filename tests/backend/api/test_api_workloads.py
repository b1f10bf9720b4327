"""Workload fitting and generation over REST on a real worker: a new ready trace with the
requested shape, a downloadable zip that matches it, 422s and team scoping."""

from __future__ import annotations

import io
import uuid
import zipfile

import orjson
import pytest

from tests.conftest import wait_for_job
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder

URL = "/api/v1/workloads"


@pytest.fixture()
def small_trace(api, tmp_path):
    per_step = synthetic_rows(steps=3, groups=12, n=4)
    r = api.post(
        "/api/v1/traces",
        files=[("files", ("run.zip", zip_folder(write_packed_dir(tmp_path / "run", per_step)), "application/zip"))],
    )
    assert r.status_code == 201, r.text
    return r.json()


def all_samples(api, trace_id):
    r = api.get(f"/api/v1/traces/{trace_id}/samples", params={"limit": 10_000})
    assert r.status_code == 200, r.text
    return r.json()["items"]


def test_fit_generate_ingest_and_download(api, worker, small_trace):
    r = api.post(
        URL,
        json={
            "trace_id": small_trace["id"],
            "steps": 3,
            "groups": 5,
            "samples_per_group": 3,
            "seed": 1,
            "formats": ["packed", "compact"],
            "name": "synthetic twin",
        },
    )
    assert r.status_code == 202, r.text
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    res = job["result"]
    # the fit report: KS statistics of the fitted marginals
    fit = res["fit"]["default"]
    assert fit["n_samples"] == 3 * 12 * 4
    assert all(0 <= v <= 1 for v in fit["response"].values()) and set(fit["response"]) >= {"lognorm", "gamma"}

    # a new ready trace with steps x groups x samples
    new_id = res["trace_id"]
    assert new_id != small_trace["id"] and res["trace_created"] is True
    trace = api.get(f"/api/v1/traces/{new_id}").json()
    assert trace["status"] == "ready" and trace["name"] == "synthetic twin"
    assert trace["n_steps"] == 3 and trace["n_samples"] == 3 * 5 * 3
    steps = api.get(f"/api/v1/traces/{new_id}/steps").json()["items"]
    assert [(s["step"], s["n_groups"], s["n_samples"]) for s in steps] == [(0, 5, 15), (1, 5, 15), (2, 5, 15)]

    # the zip holds the files, and its packed rows are exactly the ingested samples
    r = api.get(f"{URL}/{job['id']}/download")
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    zf = zipfile.ZipFile(io.BytesIO(r.content))
    names = sorted(zf.namelist())
    assert (
        names
        == sorted(res["files"])
        == [
            "packed_lengths_step_0.jsonl",
            "packed_lengths_step_1.jsonl",
            "packed_lengths_step_2.jsonl",
            "workload_compact.json",
            "workload_model.json",
        ]
    )
    rows = [orjson.loads(line) for n in names if n.startswith("packed") for line in zf.read(n).splitlines()]
    from_zip = sorted((r["step"], r["input"], o) for r in rows for o in r["output"])
    stored = sorted((s["step"], s["prompt_len"], s["response_len"]) for s in all_samples(api, new_id))
    assert from_zip == stored
    compact = orjson.loads(zf.read("workload_compact.json"))
    assert sorted(compact) == ["0", "1", "2"] and all(len(compact[k]["input"]) == 5 for k in compact)
    assert "default" in orjson.loads(zf.read("workload_model.json"))
    listed = {j["id"]: j for j in api.get(URL).json()["items"]}
    assert listed[job["id"]]["result"] is None  # lists leave results out unless asked
    full = {j["id"]: j for j in api.get(URL, params={"include_result": "true"}).json()["items"]}
    assert full[job["id"]]["result"]["trace_id"] == new_id


def test_fit_only_reports_without_a_trace(api, worker, small_trace):
    r = api.post(URL, json={"trace_id": small_trace["id"], "steps": 0})
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    assert job["result"]["trace_id"] is None and job["result"]["steps"] == 0
    assert job["result"]["fit"]["default"]["n_samples"] == 144
    assert api.get("/api/v1/traces").json()["total"] == 1


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_generate_tool_calling_from_the_parameter_file(api, worker, shared_fixtures):
    params = orjson.loads((shared_fixtures / "polytrace" / "enhanced_task_distribution_parameters.json").read_bytes())
    r = api.post(
        URL,
        json={"parameters": params, "task": "tool_calling", "steps": 2, "groups": 4, "samples_per_group": 2, "seed": 5},
    )
    assert r.status_code == 202, r.text
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    res = job["result"]
    assert res["fit"] is None and res["multiturn"] is True
    assert res["ingested_files"] == ["multiturn_workload_step_0.jsonl", "multiturn_workload_step_1.jsonl"]
    trace = api.get(f"/api/v1/traces/{res['trace_id']}").json()
    assert trace["n_samples"] == 16 and trace["source_format"] == "polytrace-multiturn"
    zf = zipfile.ZipFile(io.BytesIO(api.get(f"{URL}/{job['id']}/download").content))
    turns = sum(
        len(orjson.loads(line)["turns"])
        for n in zf.namelist()
        if n.startswith("multiturn")
        for line in zf.read(n).splitlines()
    )
    assert trace["n_turns"] == turns and turns >= 16


@pytest.mark.parametrize(
    "body, field",
    [
        ({"formats": ["parquet"]}, "formats[0]"),
        ({"formats": ["multiturn"]}, "formats"),
        ({"steps": -1}, "steps"),
        ({"groups": 0, "steps": 2}, "groups"),
        ({"parameters": {}}, "trace_id"),
        ({"ingest": "yes"}, "ingest"),
        ({"speed": 3}, "speed"),
    ],
)
def test_bad_request_is_422_naming_the_field(api, small_trace, body, field):
    r = api.post(URL, json={"trace_id": small_trace["id"], **body})
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["field"] == field


def test_parameter_file_errors_name_the_field(api):
    r = api.post(URL, json={"parameters": {"math_task": {"input_distribution": {"type": "weibull"}}}, "steps": 1})
    assert r.status_code == 422 and r.json()["detail"]["field"] == "parameters"
    assert "math_task.input_distribution.type" in r.json()["detail"]["message"]


def test_other_team_sees_nothing(api, worker, small_trace):
    from backend.auth import create_team
    from backend.store.db import session_scope

    r = api.post(URL, json={"trace_id": small_trace["id"], "steps": 1, "groups": 2, "samples_per_group": 2})
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    own = api.headers["X-API-Key"]
    with session_scope() as session:
        api.headers["X-API-Key"] = create_team(session, f"other-{uuid.uuid4().hex[:8]}")[1]
    try:
        assert api.post(URL, json={"trace_id": small_trace["id"], "steps": 1}).status_code == 404
        assert api.get(f"{URL}/{job['id']}").status_code == 404
        assert api.get(f"{URL}/{job['id']}/download").status_code == 404
        assert api.get(URL).json()["items"] == []
        assert api.get(f"/api/v1/traces/{job['result']['trace_id']}").status_code == 404
    finally:
        api.headers["X-API-Key"] = own
    assert api.get(f"{URL}/{job['id']}/download").status_code == 200
