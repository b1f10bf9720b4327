"""One registration is all a policy needs: a throwaway policy put in the registry (an
integer, a number, a boolean and a choice parameter; it runs as sync) is served by the
presets and the OpenAPI policy union, its parameters are accepted and checked by
POST /simulations, read by their declared type by the CLI's --policy-param and listed by
`rlvr-explorer policies`, and its form fields render from the presets."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest
from typer.testing import CliRunner

from core.simulator.policies import POLICIES, PolicySpec, param
from tests.helpers import synthetic_rows, write_packed_dir, zip_folder


@dataclass(frozen=True)
class ToyParams:
    rounds: int = param(3, "rounds per step", ge=1, le=64)
    share: float = param(0.25, "share of the budget", gt=0.0, le=1.0)
    greedy: bool = param(False, "take the longest first")
    order: str = param("fifo", "queue order", choices=("fifo", "lifo"))


TOY = PolicySpec(
    kind="toy",
    disaggregated=False,
    help="a throwaway policy of the registry test",
    run=POLICIES["sync"].run,
    params=ToyParams,
    batch_rollouts=True,
    paper="none (a test)",
)
GIVEN = {"rounds": 5, "share": 0.5, "greedy": True, "order": "lifo"}
SIM = "/api/v1/simulations"


@pytest.fixture()
def toy(monkeypatch):
    """The toy policy registered (before any app is made)."""
    monkeypatch.setitem(POLICIES, "toy", TOY)
    return TOY


def test_openapi_serves_it(toy, client):
    doc = client.get("/api/v1/openapi.json").json()
    schemas = doc["components"]["schemas"]
    union = next(a for a in schemas["SimulationRequest"]["properties"]["policy"]["anyOf"] if "discriminator" in a)
    assert union["discriminator"]["mapping"]["toy"] == "#/components/schemas/ToyPolicy"
    props = schemas["ToyParams"]["properties"]
    assert (props["rounds"]["type"], props["rounds"]["minimum"], props["rounds"]["maximum"]) == ("integer", 1, 64)
    assert props["rounds"]["default"] == 3 and props["rounds"]["description"] == "rounds per step"
    assert (props["share"]["exclusiveMinimum"], props["share"]["maximum"], props["share"]["type"]) == (0, 1, "number")
    assert (props["greedy"]["type"], props["greedy"]["default"]) == ("boolean", False)
    assert props["order"]["enum"] == ["fifo", "lifo"] and props["order"]["default"] == "fifo"
    assert "toy" in schemas["AdviceRequest"]["properties"]["policies"]["anyOf"][0]["items"]["enum"]


def test_the_api_takes_its_parameters_and_checks_them(toy, api, tmp_path):
    p = api.get(f"{SIM}/presets").json()
    assert p["policies"][-1] == "toy" and p["policy_help"]["toy"] == TOY.help
    assert [(d["name"], d["type"], d["allowed"]) for d in p["policy_params"]["toy"]] == [
        ("rounds", "integer", "an integer >= 1 and <= 64"),
        ("share", "number", "a number > 0 and <= 1"),
        ("greedy", "boolean", "true or false"),
        ("order", "string", "one of fifo, lifo"),
    ]
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2))
    trace = api.post("/api/v1/traces", files=[("files", ("run.zip", zip_folder(folder), "application/zip"))]).json()
    try:
        for bad, says in [
            ({"rounds": 0}, "policy.params.rounds: must be >= 1, got 0"),
            ({"rounds": 2.5}, "policy.params.rounds: must be an integer, got 2.5"),
            ({"share": 0}, "policy.params.share: must be > 0, got 0"),
            ({"greedy": "yes"}, "policy.params.greedy: must be true or false, got 'yes'"),
            ({"order": "random"}, "policy.params.order: must be one of fifo, lifo, got 'random'"),
            ({"colour": 1}, "policy.params.colour: not a parameter of policy toy"),
        ]:
            r = api.post(SIM, json={"trace_id": trace["id"], "policy": {"kind": "toy", "params": bad}})
            assert r.status_code == 422 and r.json()["detail"]["message"].startswith(says), r.text
            assert r.json()["detail"]["field"] == f"policy.params.{next(iter(bad))}"
        assert api.get(SIM).json()["items"] == []  # nothing was queued
        r = api.post(SIM, json={"trace_id": trace["id"], "compare_policy": {"kind": "toy", "params": GIVEN}})
        assert r.status_code == 202, r.text
        stored = r.json()["params"]["compare_policy"]
        assert stored["kind"] == "toy" and stored["params"] == GIVEN
    finally:  # the worker processes know no toy policy: leave them nothing to run
        api.delete(f"/api/v1/traces/{trace['id']}")


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_the_cli_reads_its_parameters_by_type(toy, team_key, tmp_path):
    from rlvr_explorer.cli import app

    runner = CliRunner()
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2))
    r = runner.invoke(app, ["ingest", str(folder), "--api-key", team_key, "--json"], catch_exceptions=False)
    trace_id = str(orjson.loads(r.stdout.strip().splitlines()[-1])["id"])
    pairs = [
        x
        for k, v in (("rounds", "5"), ("share", "0.5"), ("greedy", "true"), ("order", "lifo"))
        for x in ("--policy-param", f"{k}={v}")
    ]
    args = [
        "simulate",
        trace_id,
        "--policy",
        "toy",
        *pairs,
        "--compare",
        "sync",
        "--deterministic",
        "--api-key",
        team_key,
    ]
    r = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    res = orjson.loads(r.stdout)
    assert res["policies"]["a"] == {"kind": "toy", "params": GIVEN, "equivalent_to": None}
    assert res["a"]["makespan_s"] == pytest.approx(res["b"]["makespan_s"], rel=1e-12)  # it runs as sync
    for pair, says in [
        ("rounds=2.5", "rounds: must be an integer >= 1 and <= 64, got '2.5'"),
        ("rounds=65", "rounds: must be <= 64, got 65"),
        ("greedy=maybe", "greedy: must be true or false, got 'maybe'"),
        ("order=random", "order: must be one of fifo, lifo, got 'random'"),
    ]:
        r = runner.invoke(app, ["simulate", trace_id, "--policy", "toy", "--policy-param", pair, "--api-key", team_key])
        assert r.exit_code == 2 and says in r.output and r.output.strip().count("\n") == 0, r.output
    advice = ["advise", trace_id, "--policy", "toy", "--policy", "sync", "--workers", "1", "--api-key", team_key]
    r = runner.invoke(app, [*advice, "--no-calibrate", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert {c["policy"] for c in orjson.loads(r.stdout)["ranking"]} == {"toy", "sync"}  # the advisor sweeps it
    listed = runner.invoke(app, ["policies"]).stdout
    assert "toy: colocated; a throwaway policy of the registry test" in listed
    assert '  order: one of fifo, lifo; default "fifo". queue order' in listed


def test_the_form_builder_renders_its_fields(toy):
    from backend.jobs.simulations import presets
    from dashboard.views.policy_params import PARAM, param_inputs, params_from_inputs, read_params

    infos = orjson.loads(orjson.dumps(presets()))["policy_params"]["toy"]
    fields, takes = {}, {}
    for label in param_inputs(infos, "sim", "a"):
        for child in label.children:
            for box in [child, *(getattr(child, "children", None) or [])]:  # a number field: its input's span
                if getattr(box, "id", {}) and isinstance(box.id, dict) and box.id.get("type") == PARAM:
                    fields[box.id["name"]], takes[box.id["name"]] = box, getattr(child, "title", None)
    assert list(fields) == ["rounds", "share", "greedy", "order"]
    rounds, share = fields["rounds"], fields["share"]
    assert (rounds.type, rounds.value, takes["rounds"]) == ("text", 3, "a whole number >= 1 and <= 64")
    assert (share.type, share.value, takes["share"]) == ("text", 0.25, "a number > 0 and <= 1")
    bad = [{"type": PARAM, "form": "sim", "policy": "a", "name": n} for n in ("rounds", "share")]
    assert read_params(infos, bad, ["65", "1.5"])[1] == {
        "rounds": "65 is out of range: a whole number >= 1 and <= 64",
        "share": "1.5 is out of range: a number > 0 and <= 1",
    }
    assert [o["value"] for o in fields["greedy"].options] == ["true", "false"] and fields["greedy"].value == "false"
    assert [o["value"] for o in fields["order"].options] == ["fifo", "lifo"] and fields["order"].value == "fifo"
    ids = [{"type": PARAM, "form": "sim", "policy": "a", "name": n} for n in fields]
    assert params_from_inputs(infos, ids, [5.0, 0.5, "true", "lifo"]) == GIVEN


def test_step_time_intervals_follow_the_registry(toy):
    """A colocated batch-rollout policy's step is its rollout then training on the same
    GPUs: its step time gets the rollout's Monte-Carlo interval, shifted (the toy policy
    too, being declared so); a disaggregated or streaming one does not."""
    from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, simulate, workload_from_columns
    from core.simulator.replay import Replay, uncertainty_dict
    from core.simulator.uncertainty import FIGURES
    from core.workload.polytrace_rows import packed_rows_to_columns

    steps = workload_from_columns(packed_rows_to_columns([r for rows in synthetic_rows(2, 4, 2) for r in rows]))
    cluster, model = ClusterConfig(n_gpus=16), MODEL_PRESETS["Qwen2.5-7B"]
    figures = {k: {"mean": 2.0, "p10": 1.0, "p90": 3.0} for k in FIGURES}
    mc = {w.step: {"n_runs": 10, **figures, "deterministic": dict.fromkeys(FIGURES, 2.0)} for w in steps}

    def rows(a_kind: str, b_kind: str) -> list[dict]:
        a, b = (simulate(steps, cluster, model, EngineLimits(), Policy(kind=k)) for k in (a_kind, b_kind))
        unc = {"noise": {"sd": [0.1]}, "steps": mc}
        return uncertainty_dict(Replay(steps, a, b, None, None, unc))["steps"], a

    out, a = rows("toy", "one_step_off")
    for row, s in zip(out, a.steps):
        shift = s.step_time - s.stages["rollout"]
        assert row["step_s_a"] == {
            "mean": 2.0 + shift,
            "p10": 1.0 + shift,
            "p90": 3.0 + shift,
            "deterministic": s.step_time,
        }
        assert "step_s_b" not in row
    out, _ = rows("partial", "toy")
    assert all("step_s_a" not in row and "step_s_b" in row for row in out)
