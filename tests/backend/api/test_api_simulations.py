"""Simulator replays over REST on a real worker: queue, result, compare figures, Chrome
trace download, calibration accuracy on a real multi-turn trace, 422s and team scoping."""

from __future__ import annotations

import uuid

import orjson
import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, simulate, workload_from_columns
from core.simulator.policies import POLICIES
from core.workload.polytrace_rows import packed_rows_to_columns
from tests.conftest import wait_for_job
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder

URL = "/api/v1/simulations"
CLUSTER = {"gpu": "H100", "n_gpus": 16, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8}


def upload(api, folder, name="run.zip"):
    r = api.post("/api/v1/traces", files=[("files", (name, zip_folder(folder), "application/zip"))])
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture()
def small_trace(api, tmp_path):
    per_step = synthetic_rows(steps=4, groups=16, n=4)
    return upload(api, write_packed_dir(tmp_path / "run", per_step)), per_step


def other_team_key() -> str:
    from backend.auth import create_team
    from backend.store.db import session_scope

    with session_scope() as session:
        return create_team(session, f"other-{uuid.uuid4().hex[:8]}")[1]


def test_sync_vs_one_step_off_replay(api, worker, small_trace):
    trace, per_step = small_trace
    body = {
        "trace_id": trace["id"],
        "cluster": CLUSTER,
        "model": "qwen2.5-7b",
        "policy": "sync",
        "compare_policy": {"kind": "one_step_off"},
    }
    r = api.post(URL, json=body)
    assert r.status_code == 202, r.text
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    assert job["kind"] == "simulation" and job["trace_id"] == trace["id"]
    res = job["result"]
    a, b, cmp = res["a"], res["b"], res["compare"]

    # the same replay computed here, from the rows that were uploaded
    cols = packed_rows_to_columns([row for rows in per_step for row in rows])
    steps = workload_from_columns(cols)
    cluster = ClusterConfig.from_dict(CLUSTER)
    model, limits = MODEL_PRESETS["Qwen2.5-7B"], EngineLimits()
    direct_a = simulate(steps, cluster, model, limits, Policy(kind="sync"))
    direct_b = simulate(steps, cluster, model, limits, Policy(kind="one_step_off"))
    assert a["makespan_s"] == pytest.approx(direct_a.makespan, rel=1e-9)
    assert b["makespan_s"] == pytest.approx(direct_b.makespan, rel=1e-9)
    assert [s["step_time"] for s in a["steps"]] == pytest.approx([s.step_time for s in direct_a.steps], rel=1e-9)
    assert res["calibration"] is None and res["accuracy"] is None  # packed lengths carry no timings
    assert res["workload"] == {"steps": 4, "first_step": 0, "last_step": 3, "samples": 256, "multiturn": False}

    # the comparison agrees with the per-step results it summarises
    assert [p["step"] for p in cmp["per_step"]] == [0, 1, 2, 3]
    for p, sa, sb in zip(cmp["per_step"], a["steps"], b["steps"]):
        assert p["time_a_s"] == pytest.approx(sa["step_time"]) and p["time_b_s"] == pytest.approx(sb["step_time"])
        assert p["speedup"] == pytest.approx(sa["step_time"] / sb["step_time"])
        assert p["saved_s"] == pytest.approx(sa["step_time"] - sb["step_time"])
    assert sum(s["step_time"] for s in a["steps"]) == pytest.approx(a["makespan_s"])
    assert sum(s["step_time"] for s in b["steps"]) == pytest.approx(b["makespan_s"])
    assert cmp["total"]["speedup"] == pytest.approx(a["makespan_s"] / b["makespan_s"])
    assert cmp["total"]["saved_s"] == pytest.approx(sum(p["saved_s"] for p in cmp["per_step"]))
    # busy + idle GPU-seconds fill the cluster for the whole makespan
    assert a["busy_gpu_s"] + sum(a["idle_gpu_s"].values()) == pytest.approx(16 * a["makespan_s"], rel=1e-6)

    # stored timeline is complete for a run this small, and the download matches it
    assert a["timeline_truncated"] is None
    n_intervals = sum(len(lane["intervals"]) for lane in a["timeline"])
    r = api.get(f"{URL}/{job['id']}/chrome-trace")
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    events = r.json()["traceEvents"]
    assert sum(1 for e in events if e.get("cat") in ("busy", "idle")) == n_intervals
    assert sorted(e["name"] for e in events if e.get("cat") == "step") == [f"step {i}" for i in range(4)]
    r_b = api.get(f"{URL}/{job['id']}/chrome-trace", params={"policy": "b"}, headers={"Accept-Encoding": "identity"})
    assert r_b.status_code == 200
    ends = [e["ts"] + e["dur"] for e in orjson.loads(r_b.content)["traceEvents"] if e.get("cat") == "step"]
    assert max(ends) == pytest.approx(b["makespan_s"] * 1e6, rel=1e-6)

    # listed for the team, fetched by id; the identical request reuses the job
    assert job["id"] in [j["id"] for j in api.get(URL).json()["items"]]
    assert api.get(f"{URL}/{job['id']}").json()["result"]["compare"] == cmp
    again = api.post(URL, json=body)
    assert again.status_code == 200 and again.json()["id"] == job["id"]


def test_a_comparison_asked_for_its_sensitivity_answers_with_the_band(api, worker, small_trace):
    trace, _ = small_trace
    body = {"trace_id": trace["id"], "cluster": CLUSTER, "compare_policy": "one_step_off", "uncertainty": False}
    plain = wait_for_job(api, api.post(URL, json=body).json()["id"])
    r = api.post(URL, json={**body, "sensitivity": True})
    assert r.status_code == 202, r.text  # another job: the band is part of the answer
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    assert job["params"]["sensitivity"] is True and "sensitivity" not in plain["params"]
    total, band = job["result"]["compare"]["total"], job["result"]["compare"]["sensitivity"]
    assert total["speedup"] == pytest.approx(plain["result"]["compare"]["total"]["speedup"])
    lo, hi = total["speedup_band"]
    assert lo <= total["speedup"] <= hi and band["band"] == [lo, hi]
    assert {row["parameter"] for row in band["parameters"]} >= {"train_serial_fraction", "colocation_overhead"}
    assert "speedup_band" not in plain["result"]["compare"]["total"]


def test_chrome_trace_rebuilt_from_stored_timeline_when_file_is_gone(api, worker, small_trace):
    from backend.jobs.contracts import chrome_trace_path

    trace, _ = small_trace
    r = api.post(URL, json={"trace_id": trace["id"], "cluster": CLUSTER, "policy": "partial", "steps": [1, 3]})
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    assert [s["step"] for s in job["result"]["a"]["steps"]] == [1, 2]
    stored = api.get(f"{URL}/{job['id']}/chrome-trace").content
    chrome_trace_path(job["id"], "a").unlink()
    rebuilt = api.get(f"{URL}/{job['id']}/chrome-trace")
    assert rebuilt.status_code == 200
    assert orjson.loads(rebuilt.content) == orjson.loads(stored)
    assert api.get(f"{URL}/{job['id']}/chrome-trace", params={"policy": "b"}).status_code == 404


@pytest.mark.parametrize(
    "change, field",
    [
        ({"cluster": {"rollout_tp": 0}}, "cluster.rollout_tp"),
        ({"cluster": {"gpu": "TPU9"}}, "cluster.gpu"),
        ({"model": "gpt-17"}, "model"),
        ({"policy": {"kind": "eventually"}}, "policy.kind"),
        ({"compare_policy": {"kind": "sync", "balancing": "perfect"}}, "compare_policy.balancing"),
        (
            {"cluster": {"n_gpus": 8, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8}, "policy": "one_step_off"},
            "cluster.n_gpus",
        ),
        ({"limits": {"max_running_seqs": -1}}, "limits.max_running_seqs"),
        ({"calibrate": {"fit_steps": ["first"]}}, "calibrate.fit_steps[0]"),
        ({"steps": [5, 2]}, "steps"),
        ({"colour": "blue"}, "colour"),
        # layouts that cannot hold the model (core/simulator/feasibility.py)
        ({"model": "qwen2.5-72b", "cluster": {"n_gpus": 4}}, "cluster.n_gpus"),
        ({"model": "qwen2.5-72b", "cluster": {"n_gpus": 32, "train_dp": 4}}, "cluster.train_dp"),
        ({"model": "qwen2.5-72b", "cluster": {"n_gpus": 32, "rollout_tp": 1}}, "cluster.rollout_tp"),
    ],
)
def test_bad_config_is_422_naming_the_field(api, small_trace, change, field):
    trace, _ = small_trace
    r = api.post(URL, json={"trace_id": trace["id"], "cluster": {"n_gpus": 16}, **change})
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["field"] == field
    assert r.json()["detail"]["message"].startswith(field)
    assert api.get(URL).json()["items"] == []  # nothing was queued


def test_an_impossible_cluster_is_refused_with_the_memory_it_needs(api, small_trace):
    trace, _ = small_trace
    body = {"trace_id": trace["id"], "model": "qwen2.5-72b", "cluster": {"n_gpus": 4}}
    r = api.post(URL, json=body)
    assert r.status_code == 422, r.text
    msg = r.json()["detail"]["message"]
    assert "training Qwen2.5-72B on DP4 × TP1" in msg and "290.8 GB per GPU" in msg and "72.0 GB" in msg
    assert "at least 17 GPUs" in msg
    body["cluster"] = {"n_gpus": 20}  # enough GPUs: accepted
    assert api.post(URL, json=body).status_code == 202
    r = api.post(URL, json={**body, "compare_policy": "one_step_off", "cluster": {"n_gpus": 17}})
    assert r.status_code == 422 and r.json()["detail"]["message"].endswith("(for compare_policy one_step_off)")


def test_other_team_sees_nothing(api, worker, small_trace):
    trace, _ = small_trace
    r = api.post(URL, json={"trace_id": trace["id"], "cluster": CLUSTER})
    job = wait_for_job(api, r.json()["id"])
    own_key = api.headers["X-API-Key"]
    api.headers["X-API-Key"] = other_team_key()
    try:
        r = api.post(URL, json={"trace_id": trace["id"], "cluster": CLUSTER})
        assert r.status_code == 404 and f"trace {trace['id']}" in r.json()["detail"]["message"]
        assert api.get(f"{URL}/{job['id']}").status_code == 404
        assert api.get(f"{URL}/{job['id']}/chrome-trace").status_code == 404
        assert api.get(URL).json()["items"] == []
    finally:
        api.headers["X-API-Key"] = own_key
    assert api.get(f"{URL}/{job['id']}").status_code == 200


def test_presets_describe_the_form(api):
    p = api.get(f"{URL}/presets").json()
    assert p["gpus"]["H100"]["peak_flops"] == 989e12
    assert p["models"]["Qwen2.5-7B"]["layers"] == 28
    assert p["policies"] == list(POLICIES)
    assert set(p["disaggregated_policies"]) == {k for k, spec in POLICIES.items() if spec.disaggregated}
    assert p["defaults"]["cluster"]["gpu"] == "H100" and p["defaults"]["cluster"]["n_gpus"] == 8
    assert p["defaults"]["limits"]["max_running_seqs"] == 256 and p["defaults"]["model"] in p["models"]


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_calibrated_replay_of_search_r1_predicts_the_next_step(api, worker, shared_fixtures):
    folder = shared_fixtures / "polytrace" / "search_r1_qwen2_5_7b"
    trace = upload(api, folder, "search_r1.zip")
    assert trace["n_turns"] > 0
    r = api.post(
        URL,
        json={
            "trace_id": trace["id"],
            "steps": [0, 2],
            "calibrate": {"fit_steps": [0]},
            "cluster": {"n_gpus": 8, "rollout_replicas": 1, "rollout_tp": 1, "train_dp": 8},
            "model": "Qwen2.5-7B",
        },
    )
    assert r.status_code == 202, r.text
    job = wait_for_job(api, r.json()["id"], timeout=180)
    assert job["status"] == "succeeded", job
    res = job["result"]
    assert res["calibration"]["method"] == "turn_latency" and res["calibration"]["fit_steps"] == [0]
    (row,) = res["accuracy"]["steps"]
    assert row["step"] == 1

    # measured rollout of a step: its slowest trajectory, summed engine + tool latencies
    def slowest(step):
        best = 0.0
        for line in (folder / f"multiturn_workload_step_{step}.jsonl").read_bytes().splitlines():
            t = orjson.loads(line)
            best = max(
                best, sum(x["engine_latency_s"] for x in t["turns"]) + sum(c["latency_s"] for c in t["tool_calls"])
            )
        return best

    roll = row["rollout_s"]
    assert roll["measured"] == pytest.approx(slowest(1))
    assert roll["naive"] == pytest.approx(slowest(0))
    assert roll["accuracy"] >= 0.95 and roll["accuracy"] > roll["naive_accuracy"]
    assert roll["accuracy"] == pytest.approx(1 - abs(roll["predicted"] - roll["measured"]) / roll["measured"])
    # the replay uses the calibrated engine: its step-1 rollout is the deterministic
    # prediction; the prediction is the Monte-Carlo mean of the calibrated noise
    assert res["a"]["steps"][1]["stages"]["rollout"] == pytest.approx(roll["deterministic"], rel=1e-6)
    unc = {s["step"]: s for s in res["uncertainty"]["steps"]}
    assert res["accuracy"]["predictor"] == "mc_mean"
    assert unc[1]["rollout_s"]["mean"] == pytest.approx(roll["predicted"]) and roll["predicted"] > roll["deterministic"]
    assert unc[1]["rollout_s"]["p10"] < roll["predicted"] < unc[1]["rollout_s"]["p90"]
    assert res["a"]["config"]["coefficients"] == res["calibration"]["coefficients"]
    # done: drop the trace so the worker skips its queued default analyses
    assert api.delete(f"/api/v1/traces/{trace['id']}").status_code == 204


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_replay_of_a_synthetic_workload_from_the_parameter_file(api, worker, shared_fixtures):
    params = orjson.loads((shared_fixtures / "polytrace" / "enhanced_task_distribution_parameters.json").read_bytes())
    r = api.post(
        URL,
        json={
            "workload": {
                "parameters": params,
                "task": "math",
                "steps": 2,
                "groups": 8,
                "samples_per_group": 4,
                "seed": 3,
            },
            "cluster": CLUSTER,
            "compare_policy": "one_step_off",
        },
    )
    assert r.status_code == 202, r.text
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    assert job["trace_id"] is None
    assert job["result"]["workload"]["samples"] == 2 * 8 * 4
    assert len(job["result"]["compare"]["per_step"]) == 2
    bad = api.post(URL, json={"workload": {"parameters": params, "task": "vision"}})
    assert bad.status_code == 422 and bad.json()["detail"]["field"] == "workload.task"


def test_stored_timeline_keeps_whole_first_steps_when_too_long():
    from core.simulator.replay import sim_dict

    steps = workload_from_columns(
        packed_rows_to_columns([r for rows in synthetic_rows(steps=5, groups=8, n=2) for r in rows])
    )
    result = simulate(steps, ClusterConfig(n_gpus=16), MODEL_PRESETS["Qwen2.5-7B"], EngineLimits(), Policy())
    every = [iv for lane in result.lanes for iv in lane.intervals]
    per_step = {s: sum(1 for iv in every if iv[4] == s) for s in range(5)}
    cap = per_step[0] + per_step[1] + per_step[2] // 2  # room for steps 0 and 1, not all of 2
    d = sim_dict(result, max_intervals=cap)
    kept = [iv for lane in d["timeline"] for iv in lane["intervals"]]
    assert d["timeline_truncated"] == {"last_step": 1, "intervals_total": len(every)}
    assert len(kept) == per_step[0] + per_step[1] and all(iv[4] <= 1 for iv in kept)
    assert sim_dict(result, max_intervals=len(every))["timeline_truncated"] is None
