"""The real-engine replay (engine/): a stored trace acted out on real vLLM engines under
sync, partial and a dispatch policy, beside the simulator's prediction from an engine
profile. The engine runs in the engine environment (RLVR_ENGINE_PYTHON, built by
`bash deploy/engine-venv.sh DIR`; .ci/run builds it); no mock engine anywhere.

Asserted: what cannot flake on a shared machine — the engine ran, every request decoded
exactly its target (aborted ones counted as such), the comparison was computed. The
error targets belong to the bench (timings on a loaded 2-core machine are noisy)."""

from __future__ import annotations

import os

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from core.simulator.policies import POLICIES
from engine.policies import ENGINE_RUNS
from rlvr_explorer.cli import app
from tests.helpers import synthetic_rows, write_packed_dir

runner = CliRunner()
sqlite = pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture()
def engine_python() -> str:
    """The engine environment's python; without one the test skips with the reason, and
    fails where services are required (CI builds it)."""
    python = os.environ.get("RLVR_ENGINE_PYTHON")
    if not python:
        reason = "RLVR_ENGINE_PYTHON is not set (build the engine with bash deploy/engine-venv.sh DIR)"
        if os.environ.get("RLVR_REQUIRE_SERVICES"):
            pytest.fail(reason)
        pytest.skip(reason)
    return python


def store_trace(key: str, folder) -> int:
    per_step = synthetic_rows(steps=2, groups=16, n=4)
    r = invoke("ingest", write_packed_dir(folder, per_step), "--api-key", key, "--json")
    assert r.exit_code == 0, r.output
    return orjson.loads(r.stdout.strip().splitlines()[-1])["id"]


@pytest.fixture()
def stored(team_key, tmp_path) -> int:
    return store_trace(team_key, tmp_path / "run")


_CALIBRATED: dict[str, tuple[str, dict]] = {}


@pytest.fixture()
def calibrated(engine_python, env) -> tuple[str, dict]:
    """A team and its tiny-architecture engine profile, calibrated once per test database:
    a sweep starts an engine and takes minutes on a loaded machine, and every engine test
    predicts from a profile made apart from the run it predicts, which one sweep gives."""
    if env["RLVR_DATABASE_URL"] not in _CALIBRATED:
        from backend.auth import create_team
        from backend.store.db import session_scope

        with session_scope() as session:
            key = create_team(session, "engine-tests")[1]
        r = invoke("calibrate-engine", "--arch", "tiny", "--json", "--api-key", key)
        assert r.exit_code == 0, r.output
        profile = orjson.loads(r.stdout)
        assert profile["engine"].startswith("vllm") and profile["arch"] == "tiny"
        assert all(v >= 0 for v in profile["coefficients"].values()) and profile["fit"]["decode_steps"] > 0
        _CALIBRATED[env["RLVR_DATABASE_URL"]] = (key, profile)
    return _CALIBRATED[env["RLVR_DATABASE_URL"]]


def test_each_policy_declares_whether_it_runs_on_an_engine():
    runnable = {kind for kind, spec in POLICIES.items() if spec.not_on_engine is None}
    assert runnable == set(ENGINE_RUNS)
    assert {"sync", "partial"} <= runnable and any(ENGINE_RUNS[k].engines > 1 for k in runnable)
    for spec in POLICIES.values():
        assert spec.not_on_engine is None or spec.not_on_engine.strip()


@sqlite
def test_no_engine_installed_says_how_to_install(team_key, stored, monkeypatch, tmp_path):
    monkeypatch.setenv("RLVR_ENGINE_PYTHON", str(tmp_path / "nowhere" / "python"))
    r = invoke("engine-replay", stored, "--policy", "sync", "--api-key", team_key)
    assert r.exit_code == 1
    assert "bash deploy/engine-venv.sh DIR" in r.stderr and "Traceback" not in r.output


@sqlite
def test_a_policy_that_cannot_run_on_an_engine_says_why(team_key, stored):
    r = invoke("engine-replay", stored, "--policy", "divided", "--api-key", team_key)
    assert r.exit_code == 2
    assert "does not run on an engine" in r.stderr and POLICIES["divided"].not_on_engine in r.stderr


@pytest.mark.engine
@pytest.mark.timeout(1800)  # engine starts, a calibration sweep and three replays: ~6 min on a loaded 2-core machine
@sqlite
def test_replay_on_real_engines_under_sync_partial_and_dispatch(calibrated, client, tmp_path):
    team_key, profile = calibrated
    stored = store_trace(team_key, tmp_path / "run")
    runs = {
        "sync": (),
        "partial": ("--policy-param", "finished_groups=8"),
        "length_ranked": (),
    }
    recorded: list[int] = []
    for policy, extra in runs.items():
        args = ("engine-replay", stored, "--policy", policy, *extra, "--max-requests", 64, "--length-scale", 0.05)
        r = invoke(*args, "--profile", profile["id"], "--json", "--api-key", team_key)
        assert r.exit_code == 0, (policy, r.output)
        out = orjson.loads(r.stdout)
        assert out["policy"] == policy and out["profile_id"] == profile["id"] and out["warnings"] == []
        assert out["lengths_exact"], (policy, out)
        assert out["finished"] + out["aborted"] == out["requests"] >= 64
        assert out["engines"] == (2 if policy == "length_ranked" else 1) == len(out["cpu_share"])
        assert all(share > 0 for share in out["cpu_share"])  # the engines stepped, and say how loaded
        if policy == "partial":  # 16 groups launched per step, aborted at the 8th finished
            assert out["aborted"] > 0
        else:
            assert out["aborted"] == 0 and out["requests"] == 128
        for side in ("measured", "predicted"):
            assert out[side]["makespan_s"] > 0 and out[side]["p90_completion_s"] >= out[side]["p50_completion_s"] > 0
        assert out["measured"]["decoded_tokens"] > 0 and out["predicted"]["decoded_tokens"] > 0
        expected = (out["predicted"]["makespan_s"] - out["measured"]["makespan_s"]) / out["measured"]["makespan_s"]
        assert out["error"]["makespan"] == pytest.approx(expected)
        recorded.append(out["job_id"])
    # each run kept as a finished engine-replay job of its trace, in the API newest first
    listed = client.get(f"/api/v1/traces/{stored}/engine-replays", headers={"X-API-Key": team_key}).json()["items"]
    assert [r["job_id"] for r in listed] == recorded[::-1] and [r["policy"] for r in listed] == list(runs)[::-1]
    assert all(r["profile"]["id"] == profile["id"] and r["lengths_exact"] for r in listed)


@sqlite
def test_an_engine_replay_job_goes_to_the_engine_queue_and_says_when_no_engine(team_key, stored, monkeypatch, tmp_path):
    from backend.auth import team_for_key
    from backend.jobs.contracts import ENGINE_QUEUE, ENGINE_REPLAY_KIND, task_name
    from backend.jobs.engine_replay import create_engine_replay_job, engine_replay_params
    from backend.store.db import session_scope
    from backend.store.models import Job, JobStatus
    from workers.runners.engine_replay import run_engine_replay_job

    with pytest.raises(ValueError, match="does not run on an engine"):
        engine_replay_params(stored, "divided")
    with session_scope() as session:
        team = team_for_key(session, team_key)
        assert team is not None
        params = engine_replay_params(stored, "partial", {"finished_groups": 4}, max_requests=64, length_scale=0.05)
        job_id = create_engine_replay_job(session, team.id, params).id
    monkeypatch.setenv("RLVR_ENGINE_PYTHON", str(tmp_path / "nowhere" / "python"))
    run_engine_replay_job(job_id)
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.queue == ENGINE_QUEUE
        assert task_name(ENGINE_REPLAY_KIND) == "workers.tasks.run_engine_replay"
        assert job.status == JobStatus.FAILED and "bash deploy/engine-venv.sh DIR" in (job.error or "")


@pytest.mark.engine
@pytest.mark.timeout(1200)  # two engine starts, a calibration sweep and a 128-request replay
@sqlite
def test_a_calibrated_profile_predicts_a_held_out_engine_run_better_than_the_roofline(calibrated, tmp_path):
    """The profile comes from its own engine process's batch x context sweep; the replay it
    predicts is another engine's run of the trace's work, never part of the fit."""
    from core.simulator import ClusterConfig, roofline_coefficients
    from engine.models import arch_of
    from engine.replay import model_config, predict
    from engine.runs import resolve_model
    from engine.workload import engine_workload
    from rlvr_explorer.cli.whatif import team_trace, trace_workload

    team_key, profile = calibrated
    stored = store_trace(team_key, tmp_path / "run")
    args = ("engine-replay", stored, "--policy", "sync", "--max-requests", 64, "--length-scale", 0.05)
    r = invoke(*args, "--profile", profile["id"], "--json", "--api-key", team_key)
    assert r.exit_code == 0, r.output
    run = orjson.loads(r.stdout)
    assert run["lengths_exact"] and run["requests"] == 128 and run["profile_id"] == profile["id"]

    # the replayed workload rebuilt, and predicted from either set of coefficients
    shape = arch_of("tiny")
    model = model_config(shape.name, shape.__dict__, shape.params)
    trace = team_trace(stored, team_of(team_key))
    workload = engine_workload(
        trace_workload(trace, None, "replay"),
        max_requests=64,
        length_scale=0.05,
        max_len=resolve_model("tiny", None)[0]["max_model_len"],
    )

    def makespan(coefficients: dict) -> float:
        return predict(workload, "sync", {}, coefficients, profile["limits"], 1, model)["makespan_s"]

    calibrated = makespan(profile["coefficients"])
    assert calibrated == pytest.approx(run["predicted"]["makespan_s"], rel=1e-9)  # the very workload replayed
    roofline = makespan(roofline_coefficients(ClusterConfig(n_gpus=1, rollout_replicas=1, train_dp=1), model).to_dict())
    measured = run["measured"]["makespan_s"]
    errors = {"profile": abs(calibrated - measured) / measured, "roofline": abs(roofline - measured) / measured}
    assert errors["profile"] < errors["roofline"], (errors, measured, calibrated, roofline)


def team_of(key: str) -> int:
    from backend.auth import team_for_key
    from backend.store.db import session_scope

    with session_scope() as session:
        team = team_for_key(session, key)
        assert team is not None
        return team.id


def multiturn_rows(groups: int = 6, n: int = 2, seed: int = 4) -> list[dict]:
    """One step of PolyTrace multi-turn rows: 1-3 turns a trajectory, a tool call (its
    latency and response tokens) after every turn but the last."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(groups):
        prompt = int(rng.integers(120, 200))
        for i in range(n):
            context, turns, calls = prompt, [], []
            k = int(rng.integers(1, 4))
            for t in range(k):
                completion = int(rng.integers(10, 40))
                turns.append({"turn": t, "prompt_tokens": context, "cached_tokens": 0, "completion_tokens": completion})
                context += completion
                if t + 1 < k:
                    tool = int(rng.integers(20, 60))
                    calls.append({"turn": t, "latency_s": float(rng.uniform(0.1, 0.4)), "response_token_len": tool})
                    context += tool
            rows.append(
                {
                    "step": 0,
                    "prompt_len": prompt,
                    "turns": turns,
                    "tool_calls": calls,
                    "final_response_len": context - prompt,
                    "prompt_group_id": g,
                    "sample_id": i,
                }
            )
    return rows


def store_multiturn(key: str, folder) -> tuple[int, list[dict]]:
    rows = multiturn_rows()
    folder.mkdir()
    (folder / "multiturn_workload_step_0.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    r = invoke("ingest", folder, "--api-key", key, "--json")
    assert r.exit_code == 0, r.output
    return orjson.loads(r.stdout.strip().splitlines()[-1])["id"], rows


@sqlite
def test_multiturn_trajectories_run_on_an_engine_under_sync_only(team_key, tmp_path):
    trace_id = store_multiturn(team_key, tmp_path / "multiturn")[0]
    r = invoke("engine-replay", trace_id, "--policy", "partial", "--api-key", team_key)
    assert r.exit_code == 2 and "multi-turn trajectories are replayed on an engine under sync only" in r.stderr


@pytest.mark.engine
@pytest.mark.timeout(1200)  # an engine start and a dozen trajectories with tool waits
@sqlite
def test_multiturn_trajectories_replayed_turn_by_turn_on_a_real_engine(calibrated, tmp_path):
    """Without --profile: the latest profile of this engine, device and architecture."""
    team_key, profile = calibrated
    trace_id, rows = store_multiturn(team_key, tmp_path / "multiturn")
    r = invoke("engine-replay", trace_id, "--policy", "sync", "--json", "--api-key", team_key)
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.stdout)
    turns = sum(len(row["turns"]) for row in rows)
    assert out["requests"] == out["finished"] == turns and out["aborted"] == 0 and out["lengths_exact"], out
    assert out["profile_id"] == profile["id"]  # found, not made again
    # every turn decoded its recorded completion: the turns, not the trajectories, were the requests
    decoded = sum(t["completion_tokens"] for row in rows for t in row["turns"])
    assert out["measured"]["decoded_tokens"] == decoded
    # (the simulator counts a request's first token with its prefill, not as decoded)
    assert out["predicted"]["decoded_tokens"] == decoded - turns
    # the tool calls were waited out: no trajectory ends before its tool latencies have passed
    waits = max(sum(c["latency_s"] for c in row["tool_calls"]) for row in rows)
    assert out["measured"]["makespan_s"] > waits and out["predicted"]["makespan_s"] > waits
    # each later turn continued the previous context: the prefix cache served it
    cached = out["cached_prompt_tokens"]
    assert cached["predicted"] > 0 and cached["measured"] == cached["predicted"], cached
