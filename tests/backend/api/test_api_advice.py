"""The configuration advisor over REST on a real worker, and `rlvr-explorer advise`."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from core.simulator.defaults import DEFAULT_MODEL
from core.simulator.policies import POLICIES
from rlvr_explorer.cli import app
from tests.conftest import wait_for_job
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder

URL = "/api/v1/advice"


@pytest.fixture()
def small_trace(api, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=3, groups=16, n=4))
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", zip_folder(folder), "application/zip"))])
    assert r.status_code == 201, r.text
    return r.json()


def test_advice_job_ranks_configurations(api, worker, small_trace):
    body = {"trace_id": small_trace["id"], "gpu": "h100", "n_gpus": 8, "model": "qwen2.5-7b"}
    r = api.post(URL, json=body)
    assert r.status_code == 202, r.text
    job = wait_for_job(api, r.json()["id"], timeout=180)
    assert job["status"] == "succeeded", job
    assert job["kind"] == "advice"
    res = job["result"]
    assert res["n_configurations"] >= 50 and res["calibration"] is None  # packed lengths: no timings
    means = [c["step_s"]["mean"] for c in res["ranking"]]
    assert means == sorted(means)
    # no noise model: no interval, never a zero-width one; no configuration twice
    assert all(c["step_s"]["p10"] is None and c["step_s"]["p90"] is None for c in res["ranking"])
    same = [
        (c["policy"], orjson.dumps(c["params"]), c["balancing"], c["rollout_replicas"], c["rollout_tp"], c["train_dp"])
        for c in res["ranking"]
    ]
    assert len(same) == len(set(same)) and res["n_swept_settings"] == 2 * res["n_configurations"]
    assert {c["policy"] for c in res["ranking"]} == set(POLICIES)
    assert [w["step"] for w in res["per_step"]] == [0, 1, 2] and res["ranges"]
    # swept parameters and the cause of each configuration's gain over the reference
    partial = [c for c in res["ranking"] if c["policy"] == "partial"]
    assert {c["params"]["over_provision"] for c in partial} == {2.0, 1.5}
    assert all(c["label"].startswith(f"partial(over_provision={c['params']['over_provision']:g})") for c in partial)
    assert res["reference"].startswith("sync") and all(
        c["gain"] is None or c["gain"]["verdict"] == "same" or c["gain"]["cause"] for c in res["ranking"]
    )
    assert job["params"]["policy_runs"] == 16
    assert api.post(URL, json=body).status_code == 200  # identical advice: the same job
    assert api.get(URL, params={"trace_id": small_trace["id"]}).json()["items"][0]["id"] == job["id"]


@pytest.mark.parametrize(
    "change, field",
    [
        ({"n_gpus": 0}, "n_gpus"),
        ({"gpu": "TPU9"}, "gpu"),
        ({"policies": ["eventually"]}, "policies[0]"),
        ({"model": "qwen2.5-72b", "n_gpus": 4}, "n_gpus"),  # no layout of 4 GPUs can train it
    ],
)
def test_bad_advice_is_422_naming_the_field(api, small_trace, change, field):
    r = api.post(URL, json={"trace_id": small_trace["id"], **change})
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["field"] == field and r.json()["detail"]["message"].startswith(f"{field}: ")


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_cli_advise(team_key, tmp_path):
    runner = CliRunner()
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=8, n=4))
    r = runner.invoke(app, ["ingest", str(folder), "--api-key", team_key, "--json"], catch_exceptions=False)
    trace_id = orjson.loads(r.stdout.strip().splitlines()[-1])["id"]
    args = ["advise", str(trace_id), "--gpus", "8", "--gpu", "H100", "--workers", "1", "--api-key", team_key]
    r = runner.invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "configurations ranked by predicted step time" in r.stdout and "who wins where" in r.stdout
    assert "largest cause" in r.stdout and "gains against sync" in r.stdout
    assert "uncalibrated: no interval" in r.stdout and "0.0% faster" not in r.stdout
    assert "(same as: max 256 running seqs)" in r.stdout
    out = orjson.loads(runner.invoke(app, [*args, "--json"], catch_exceptions=False).stdout)
    assert out["n_configurations"] >= 50
    assert all("params" in c and "gain" in c for c in out["ranking"]) and out["reference"]
    # a budget on which no layout can train the model: refused before any sweep
    r = runner.invoke(app, [*args[:3], "4", "--model", "qwen2.5-72b", "--api-key", team_key])
    assert r.exit_code == 1 and "error: n_gpus: training Qwen2.5-72B needs at least 17 H100 GPUs" in r.output


def test_presets_propose_the_model_a_trace_names(api, tmp_path):
    folder = write_packed_dir(tmp_path / "named", synthetic_rows(steps=2, groups=4, n=2, seed=3))
    files = [("files", ("run.zip", zip_folder(folder), "application/zip"))]
    named = api.post("/api/v1/traces", files=files, data={"name": "verl dapo 32b"}).json()
    got = api.get("/api/v1/simulations/presets", params={"trace_id": named["id"]}).json()
    assert got["proposed_model"]["model"] == "Qwen2.5-32B" and got["defaults"]["model"] == "Qwen2.5-32B"
    assert got["proposed_model"]["note"] == "proposed from the trace name ('verl dapo 32b')"
    plain = api.get("/api/v1/simulations/presets").json()
    assert "proposed_model" not in plain and plain["defaults"]["model"] == DEFAULT_MODEL
    assert api.get("/api/v1/simulations/presets", params={"trace_id": 999999}).status_code == 404


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_cli_advise_proposes_the_model_the_trace_names(team_key, tmp_path):
    runner = CliRunner()
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2, seed=4))
    r = runner.invoke(app, ["ingest", str(folder), "--name", "verl dapo 32b", "--api-key", team_key, "--json"])
    trace_id = orjson.loads(r.stdout.strip().splitlines()[-1])["id"]
    args = ["advise", str(trace_id), "--policy", "sync", "--workers", "1", "--api-key", team_key]
    r = runner.invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "model Qwen2.5-32B (proposed from the trace name ('verl dapo 32b'))" in r.stdout
    out = orjson.loads(runner.invoke(app, [*args, "--json"], catch_exceptions=False).stdout)
    assert out["proposed_model"]["model"] == "Qwen2.5-32B"
    chosen = orjson.loads(runner.invoke(app, [*args, "--model", "qwen2.5-7b", "--json"]).stdout)
    assert chosen["proposed_model"] is None  # a model given is the model used
    assert "proposed" not in runner.invoke(app, [*args, "--model", "qwen2.5-7b"]).stdout
