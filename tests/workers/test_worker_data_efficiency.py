"""A synthetic DAPO run (packed lengths + dapo_filter_indices.jsonl) uploaded as a zip:
marks stored, the data_efficiency analysis queued by default and run on a real worker,
and groups=used accepted by lengths and imbalance."""

from __future__ import annotations

from helpers import dapo_run, write_dapo_dir, zip_folder

from tests.conftest import wait_for_job


def test_dapo_run_through_the_api(api, worker, tmp_path):
    packed, filt = dapo_run()
    folder = write_dapo_dir(tmp_path / "dapo_run", packed, filt)
    r = api.post("/api/v1/traces", files=[("files", ("dapo_run.zip", zip_folder(folder), "application/zip"))])
    assert r.status_code == 201, r.text
    trace = r.json()
    assert "data_efficiency" in trace["analyses"]
    jobs = {j["kind"]: j for j in api.get(f"/api/v1/traces/{trace['id']}/analyses").json()["items"]}
    assert "data_efficiency" in jobs
    job = wait_for_job(api, jobs["data_efficiency"]["id"])
    assert job["status"] == "succeeded", job["error"]
    res = job["result"]
    want_used = sum(len(line["used_prompt_indices"]) for line in filt)
    assert res["summary"]["groups_used"] == want_used
    assert res["summary"]["groups_generated"] == sum(len(rows) for rows in packed)
    assert [s["trainer_step"] for s in res["steps"]] == sorted({line["trainer_step"] for line in filt})
    for kind in ("lengths", "imbalance"):
        r = api.post(f"/api/v1/traces/{trace['id']}/analyses", json={"kind": kind, "params": {"groups": "used"}})
        assert r.status_code in (200, 202), r.text
        done = wait_for_job(api, r.json()["id"])
        assert done["status"] == "succeeded", done["error"]
        assert done["result"]["groups"] == "used"
    used_samples = sum(
        len(packed[line["workload_step"]][g]["output"]) for line in filt for g in line["used_prompt_indices"]
    )
    assert done["result"]["steps"] and sum(e["samples"] for e in done["result"]["steps"]) == used_samples
    detail = api.get(f"/api/v1/traces/{trace['id']}").json()
    assert [
        e["workload_step"] for e in (detail.get("meta") or detail.get("metadata") or {}).get("dapo_filter", [])
    ] == [line["workload_step"] for line in filt]
