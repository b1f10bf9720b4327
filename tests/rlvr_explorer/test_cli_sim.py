"""`rlvr-explorer simulate` and `generate`: the pure code run in-process on a stored trace."""

from __future__ import annotations

import uuid
from dataclasses import asdict

import orjson
import pytest
from typer.testing import CliRunner

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, simulate, workload_from_columns
from core.simulator.policies import POLICIES
from core.workload.polytrace_rows import packed_rows_to_columns
from rlvr_explorer.cli import app
from tests.helpers import synthetic_rows, write_packed_dir

pytestmark = pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture()
def stored(team_key, tmp_path):
    per_step = synthetic_rows(steps=3, groups=8, n=4)
    r = invoke("ingest", write_packed_dir(tmp_path / "run", per_step), "--api-key", team_key, "--json")
    assert r.exit_code == 0, r.output
    return orjson.loads(r.stdout.strip().splitlines()[-1])["id"], per_step


def test_simulate_prints_the_replay(team_key, stored):
    trace_id, per_step = stored
    args = (
        "simulate",
        trace_id,
        "--gpus",
        16,
        "--replicas",
        2,
        "--tp",
        4,
        "--model",
        "qwen2.5-7b",
        "--compare",
        "one_step_off",
        "--api-key",
        team_key,
    )
    r = invoke(*args, "--json")
    assert r.exit_code == 0, r.output
    res = orjson.loads(r.stdout)
    steps = workload_from_columns(packed_rows_to_columns([row for rows in per_step for row in rows]))
    model = MODEL_PRESETS["Qwen2.5-7B"]
    # the same 16 GPUs: sync trains on all of them (colocated), one_step_off on the 8 left
    cluster_a, cluster_b = ClusterConfig(n_gpus=16, train_dp=16), ClusterConfig(n_gpus=16, train_dp=8)
    assert res["a"]["config"]["cluster"]["train_dp"] == 16 and res["b"]["config"]["cluster"]["train_dp"] == 8
    a = simulate(steps, cluster_a, model, EngineLimits(), Policy(kind="sync"))
    b = simulate(steps, cluster_b, model, EngineLimits(), Policy(kind="one_step_off"))
    assert [s["step_time"] for s in res["a"]["steps"]] == pytest.approx([s.step_time for s in a.steps], rel=1e-9)
    assert res["compare"]["total"]["speedup"] == pytest.approx(a.makespan / b.makespan, rel=1e-9)
    assert "timeline" not in res["a"]

    text = invoke(*args)
    assert text.exit_code == 0
    assert f"speedup of one_step_off over sync: {a.makespan / b.makespan:.3f}x" in text.stdout
    for s_a, s_b in zip(a.steps, b.steps):  # one row per step: step, rollout, A, B, speedup
        assert f"{s_a.step_time:.2f}" in text.stdout and f"{s_a.step_time / s_b.step_time:.3f}" in text.stdout


def test_the_default_comparison_runs_on_the_default_budget(team_key, stored):
    trace_id, _ = stored
    r = invoke("simulate", trace_id, "--compare", "one_step_off", "--api-key", team_key, "--json")
    assert r.exit_code == 0, r.output
    res = orjson.loads(r.stdout)
    for key in ("a", "b"):
        c = res[key]["config"]["cluster"]
        assert c["n_gpus"] == 8 and res[key]["unused_gpus"] == 0 and res[key]["warnings"] == []
    assert res["compare"]["total"]["speedup"] > 0


def test_the_speedup_band_is_printed_beside_the_speedup(team_key, stored):
    trace_id, _ = stored
    args = ["simulate", trace_id, "--compare", "one_step_off", "--deterministic", "--api-key", team_key]
    res = orjson.loads(invoke(*args, "--sensitivity", "--json").stdout)
    lo, hi = res["compare"]["total"]["speedup_band"]
    assert lo <= res["compare"]["total"]["speedup"] <= hi
    text = invoke(*args, "--sensitivity").stdout
    line = next(l for l in text.splitlines() if l.startswith("speedup of one_step_off over sync"))
    assert f"[{lo:.3f}-{hi:.3f} over the uncalibrated parameters' ranges" in line
    assert "[" not in next(l for l in invoke(*args).stdout.splitlines() if l.startswith("speedup of"))


def test_simulate_rejects_bad_options_and_other_teams(team_key, stored):
    trace_id, _ = stored
    r = runner.invoke(app, ["simulate", str(trace_id), "--tp", "0", "--api-key", team_key])
    assert r.exit_code == 2 and "cluster.rollout_tp" in r.output
    r = runner.invoke(
        app,
        ["simulate", str(trace_id), "--policy", "one_step_off", "--tp", "4", "--replicas", "2", "--train-dp", "8"]
        + ["--api-key", team_key],
    )
    assert r.exit_code == 2 and "cluster.n_gpus" in r.output  # 8 rollout + 8 training GPUs > 8
    from backend.auth import create_team
    from backend.store.db import session_scope

    with session_scope() as session:
        other = create_team(session, f"cli-other-{uuid.uuid4().hex[:8]}")[1]
    r = runner.invoke(app, ["simulate", str(trace_id), "--api-key", other])
    assert r.exit_code == 2 and "not found" in r.output


def test_generate_from_a_trace_and_ingest(team_key, stored, tmp_path):
    trace_id, _ = stored
    out = tmp_path / "gen"
    r = invoke(
        "generate",
        "--from-trace",
        trace_id,
        "--steps",
        2,
        "--groups",
        3,
        "--n",
        2,
        "--out",
        out,
        "--format",
        "packed",
        "--ingest",
        "--name",
        "cli twin",
        "--api-key",
        team_key,
        "--json",
    )
    assert r.exit_code == 0, r.output
    res = orjson.loads(r.stdout)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["packed_lengths_step_0.jsonl", "packed_lengths_step_1.jsonl", "workload_model.json"]
    rows = [orjson.loads(line) for f in files[:2] for line in (out / f).read_bytes().splitlines()]
    assert len(rows) == 2 * 3 and all(len(row["output"]) == 2 for row in rows)
    assert res["samples"] == 12 and res["fit"]["default"]["n_samples"] == 3 * 8 * 4

    from backend.store.db import session_scope
    from backend.store.models import Trace

    with session_scope() as session:
        trace = session.get(Trace, res["trace_id"])
        assert (trace.name, trace.status, trace.n_steps, trace.n_samples) == ("cli twin", "ready", 2, 12)


def test_generate_math_from_the_parameter_file(env, shared_fixtures, tmp_path):
    params = shared_fixtures / "polytrace" / "enhanced_task_distribution_parameters.json"
    out = tmp_path / "math"
    r = invoke(
        "generate",
        "--params",
        params,
        "--task",
        "math",
        "--steps",
        3,
        "--groups",
        4,
        "--n",
        5,
        "--format",
        "compact",
        "--out",
        out,
        "--seed",
        2,
        "--json",
    )
    assert r.exit_code == 0, r.output
    compact = orjson.loads((out / "workload_compact.json").read_bytes())
    assert sorted(compact, key=int) == ["0", "1", "2"]
    for step in compact.values():
        assert len(step["input"]) == 4 and [len(o) for o in step["output"]] == [5] * 4
        assert all(1 <= x <= 32000 for o in step["output"] for x in o)
    r = runner.invoke(app, ["generate", "--params", str(params), "--task", "vision", "--out", str(out)])
    assert r.exit_code == 2 and "task" in r.output


def test_simulate_and_generate_speak_human_by_default(team_key, stored, tmp_path):
    trace_id, _ = stored
    r = invoke("simulate", trace_id, "--api-key", team_key)
    assert r.exit_code == 0, r.output
    assert "rollout [s]" in r.stdout and "step [s] sync" in r.stdout
    assert "calibration: none (roofline" in r.stdout  # no measured timings: says so instead of a bare "cost"
    r = invoke(
        "generate",
        "--from-trace",
        trace_id,
        "--steps",
        1,
        "--groups",
        2,
        "--out",
        tmp_path / "g",
        "--api-key",
        team_key,
    )
    assert r.exit_code == 0, r.output
    assert not r.stdout.lstrip().startswith("{")
    assert "KS = largest gap between the fitted and the measured CDF" in r.stdout
    assert "prompt length" in r.stdout and "response length" in r.stdout
    assert "generated 1 step(s) of 2 groups" in r.stdout and "packed_lengths_step_0.jsonl" in r.stdout
    assert "rlvr-explorer ingest" in r.stdout  # what to do with the files


def test_simulate_rejects_values_the_database_cannot_hold(team_key, stored):
    trace_id, _ = stored
    for args in (["--gpus", str(2**31)], ["--replicas", "1e21"]):
        r = runner.invoke(app, ["simulate", str(trace_id), *args, "--api-key", team_key])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output


def test_simulate_refuses_a_cluster_that_cannot_hold_the_model(team_key, stored):
    trace_id, _ = stored
    r = runner.invoke(app, ["simulate", str(trace_id), "--model", "qwen2.5-72b", "--gpus", "4", "--api-key", team_key])
    assert r.exit_code == 1, r.output
    assert "error: cluster.n_gpus: training Qwen2.5-72B on DP4 × TP1" in r.output and "290.8 GB per GPU" in r.output
    assert "Traceback" not in r.output
    args = ["--model", "qwen2.5-72b", "--gpus", "32", "--train-dp", "4"]
    r = runner.invoke(app, ["simulate", str(trace_id), *args, "--api-key", team_key])
    assert r.exit_code == 1 and "error: cluster.train_dp: training Qwen2.5-72B" in r.output


def test_simulate_warns_of_gpus_the_layout_leaves_idle(team_key, stored):
    trace_id, _ = stored
    args = ["--gpu", "A100", "--model", "qwen2.5-32b", "--gpus", "9", "--no-calibrate", "--deterministic"]
    r = runner.invoke(app, ["simulate", str(trace_id), *args, "--api-key", team_key])
    assert r.exit_code == 0, r.output
    assert "rollout 4 x TP2, training DP9 x TP1" in r.output
    assert "warning (policy A): rollout uses 8 of the 9 GPUs (4 × TP2): 1 GPU idle during every rollout" in r.output


def test_policy_parameters_are_set_by_type_and_reported(team_key, stored):
    trace_id, per_step = stored
    args = ["simulate", trace_id, "--policy", "partial", "--policy-param", "over_provision=1.5"]
    args += ["--compare", "async", "--compare-param", "trigger_parameter_sync_step=2", "--deterministic"]
    args += ["--api-key", team_key]
    r = invoke(*args, "--json")
    assert r.exit_code == 0, r.output
    res = orjson.loads(r.stdout)
    used = res["policies"]  # every declared parameter, resolved: the given one and the defaults
    assert used["a"] == {
        "kind": "partial",
        "params": {**asdict(POLICIES["partial"].resolve({})), "over_provision": 1.5},
        "equivalent_to": None,
    }
    assert used["b"]["params"] == {**asdict(POLICIES["async"].resolve({})), "trigger_parameter_sync_step": 2}
    # the replay ran with them: the same as the simulator given them directly
    steps = workload_from_columns(packed_rows_to_columns([row for rows in per_step for row in rows]))
    cluster = ClusterConfig(
        **{k: res["a"]["config"]["cluster"][k] for k in ("n_gpus", "rollout_replicas", "rollout_tp", "train_dp")}
    )
    direct = simulate(
        steps,
        cluster,
        MODEL_PRESETS["Qwen2.5-7B"],
        EngineLimits(),
        Policy(kind="partial", params={"over_provision": 1.5}),
    )
    assert res["a"]["makespan_s"] == pytest.approx(direct.makespan, rel=1e-9)
    text = invoke(*args)
    assert "policy A: partial (finished_groups=null, over_provision=1.5, " in text.stdout
    assert "trigger_parameter_sync_step=2" in text.stdout


def test_parameters_that_make_a_policy_another_say_so(team_key, stored):
    trace_id, _ = stored
    base = ["simulate", trace_id, "--deterministic", "--api-key", team_key, "--compare", "partial"]
    r = invoke(*base, "--compare-param", "over_provision=1", "--compare-param", "finished_groups=null", "--json")
    assert r.exit_code == 0, r.output
    res = orjson.loads(r.stdout)
    assert res["policies"]["b"]["equivalent_to"] == "sync"
    assert res["b"]["makespan_s"] == pytest.approx(res["a"]["makespan_s"], rel=1e-12)  # A is sync
    text = invoke(*base, "--compare-param", "over_provision=1")
    assert (
        "policy B: partial (finished_groups=null, over_provision=1.0, partial_rollout=true); "
        "with these parameters it replays identically to sync" in text.stdout
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (["--policy", "partial", "--policy-param", "over_provision=abc"], "over_provision: must be a number >= 1"),
        (["--policy", "partial", "--policy-param", "over_provision=0.5"], "takes a number >= 1"),
        (["--policy", "partial", "--policy-param", "colour=1"], "finished_groups: an integer >= 1, or null"),
        (["--policy", "partial", "--policy-param", "over_provision"], "expected KEY=VALUE"),
        (
            ["--policy", "async", "--policy-param", "trigger_parameter_sync_step=1.5"],
            "trigger_parameter_sync_step: must be an integer",
        ),
        (
            ["--policy", "async", "--policy-param", "trigger_parameter_sync_step=null"],
            "trigger_parameter_sync_step: must be an integer >= 1",
        ),
        (
            ["--policy", "sync", "--policy-param", "staleness=1"],
            "not a parameter of policy sync (its parameters: none)",
        ),
        (["--compare-param", "staleness=1"], "--compare-param needs --compare"),
    ],
)
def test_bad_policy_parameters_exit_2_with_one_line(team_key, stored, args, says):
    trace_id, _ = stored
    r = runner.invoke(app, ["simulate", str(trace_id), *args, "--api-key", team_key])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.output.strip().count("\n") == 0, r.output
    assert says in r.output


def test_policies_lists_the_registry(env):
    from core.simulator.policies import POLICIES

    r = invoke("policies")
    assert r.exit_code == 0, r.output
    for kind, spec in POLICIES.items():
        assert f"{kind}: " in r.stdout and spec.help in r.stdout
        for info in spec.param_infos:
            assert (
                f"  {info.name}: {info.allowed()}; default {orjson.dumps(info.default).decode()}. {info.help}"
                in r.stdout
            )
    listing = orjson.loads(invoke("policies", "--json").stdout)
    assert list(listing) == list(POLICIES)
    assert listing["partial"]["params"] == [i.to_dict() for i in POLICIES["partial"].param_infos]
