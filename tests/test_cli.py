"""The CLI: ingest (with stage timings from a verl log merged onto the steps), bad input,
demo, create-team, migrate; readable help, human summaries, bounds checked like the API."""

from __future__ import annotations

import orjson
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from backend.store.db import new_session
from backend.store.models import Step
from rlvr_explorer.cli import app
from tests.helpers import jsonl, synthetic_rows, write_packed_dir

runner = CliRunner()


def printed_json(output: str) -> dict:
    """The JSON summary line the command prints (the progress bar shares the output)."""
    return orjson.loads(output[output.rindex('{"id"') :].splitlines()[0])


def verl_log(steps: int) -> bytes:
    rows = [
        {
            "step": s,
            "data": {
                "timing_s/gen": 10.0 + s,
                "timing_s/update_actor": 4.0,
                "timing_s/step": 20.0 + s,
                "response_length/mean": 500.0,
            },
        }
        for s in range(steps)
    ]
    return jsonl(rows)


def test_ingest_merges_stage_timings_onto_steps(env, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=3, groups=8, n=4))
    (folder / "metrics.jsonl").write_bytes(verl_log(3))
    result = runner.invoke(app, ["ingest", str(folder), "--name", "with-timings", "--json"])
    assert result.exit_code == 0, result.output
    summary = printed_json(result.output)
    assert summary["status"] == "ready" and summary["samples"] == 3 * 8 * 4 and summary["steps"] == 3
    with new_session() as s:
        steps = s.scalars(select(Step).where(Step.trace_id == summary["id"]).order_by(Step.step)).all()
    assert [st.t_gen for st in steps] == [10.0, 11.0, 12.0]
    assert [st.t_step for st in steps] == [20.0, 21.0, 22.0]
    assert all(st.n_samples == 32 for st in steps)
    assert steps[0].metrics["response_length/mean"] == 500.0
    # Same content again: the existing trace.
    again = printed_json(runner.invoke(app, ["ingest", str(folder), "--json"]).output)
    assert again["id"] == summary["id"] and again["already_uploaded"]


def test_ingest_bad_file_exits_2_naming_line_and_field(env, tmp_path):
    bad = tmp_path / "packed_lengths_step_0.jsonl"
    bad.write_bytes(b'{"step": 0, "input": 5, "output": [1, 2]}\n{"step": 0, "input": 5, "output": "x"}\n')
    result = runner.invoke(app, ["ingest", str(bad)])
    assert result.exit_code == 2
    assert "packed_lengths_step_0.jsonl" in result.output and "line 2" in result.output and "output" in result.output


def test_demo_and_create_team(env):
    result = runner.invoke(app, ["demo", "--steps", "3", "--groups", "8", "--json"])
    assert result.exit_code == 0, result.output
    summary = printed_json(result.output)
    assert summary["samples"] == 3 * 8 * 8 and summary["status"] == "ready"
    key = runner.invoke(app, ["create-team", "cli-team-" + str(summary["id"]) + env["RLVR_DATABASE_URL"][-6:]])
    assert key.exit_code == 0 and key.output.strip().splitlines()[-1].startswith("rlvr_")
    assert "shown only now" in key.output  # says what the key is for
    as_json = orjson.loads(
        runner.invoke(
            app, ["create-team", "json-" + str(summary["id"]) + env["RLVR_DATABASE_URL"][-6:], "--json"]
        ).output
    )
    assert as_json["api_key"].startswith("rlvr_") and as_json["id"]
    assert runner.invoke(app, ["migrate"]).exit_code == 0
    assert orjson.loads(runner.invoke(app, ["migrate", "--json"]).output)["at_head"]


sqlite_only = pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
COMMANDS = ("migrate", "create-team", "ingest", "demo", "worker", "api", "serve", "simulate", "generate", "policies")


def test_help_names_values_readably():
    for args in ([], *([c] for c in COMMANDS)):
        out = runner.invoke(app, [*args, "--help"], terminal_width=200).output
        for raw in ("<bool>", "<int>", "<str>", "<Path>", "<list", "{paths}", "{trace_id}", "{name}"):
            assert raw not in out, (args, raw, out)
    ingest_help = runner.invoke(app, ["ingest", "--help"], terminal_width=200).output
    assert "PATHS..." in ingest_help and "TOKENS" in ingest_help
    # a flag takes no value: nothing between it and its help
    json_row = next(line for line in ingest_help.splitlines() if "--json" in line)
    assert json_row.split("--json", 1)[1].strip().startswith("Print")
    assert "TRACE_ID" in runner.invoke(app, ["simulate", "--help"], terminal_width=200).output


@sqlite_only
def test_ingest_says_what_it_skipped_and_what_happens_next(env, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=3, groups=4, n=2))
    (folder / "notes.txt").write_text("not a trace\n")
    result = runner.invoke(app, ["ingest", str(folder), "--name", "human"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.count("100%") <= 1  # no bar redraws when the output is not a terminal
    assert "ingested trace" in out and "human" in out
    assert "samples" in out and f"{3 * 4 * 2:,}" in out
    assert "skipped 1 file" in out and "notes.txt: unknown file format" in out
    assert "queued analyses: lengths" in out and "rlvr-explorer worker" in out
    # the analyses without their data say which columns they need and where to read how to add them
    assert "multiturn: needs turns.step + turns.group_idx" in out and "docs/formats.md" in out
    summary = printed_json(runner.invoke(app, ["ingest", str(folder), "--json"]).output)
    assert summary["already_uploaded"] and summary["skipped"] == ["skipped notes.txt: unknown file format"]
    assert "lengths" in summary["queued_analyses"] and "multiturn" in summary["not_applicable"]
    assert "already uploaded" in runner.invoke(app, ["ingest", str(folder)]).output


@sqlite_only
@pytest.mark.parametrize("value", ["-3", "0", "1e21", str(2**31), "99999999999999999999999"])
def test_ingest_rejects_out_of_range_max_response_len(env, tmp_path, value):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=1, groups=2, n=2))
    result = runner.invoke(app, ["ingest", str(folder), "--max-response-len", value])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "--max-response-len" in result.output and "Traceback" not in result.output


def test_calibration_cost_is_explained():
    from rlvr_explorer.cli.whatif import _simulation_summary

    class T:
        id, name = 7, "t"

    params = {
        "cluster": {
            "n_gpus": 8,
            "gpu": {"name": "H100"},
            "rollout_replicas": 2,
            "rollout_tp": 4,
            "train_dp": 8,
            "train_tp": 1,
        },
        "policy": {"kind": "sync"},
        "compare_policy": None,
        "model": {"name": "m"},
    }
    step = {"step": 0, "stages": {"rollout": 1.0}, "step_time": 2.0}
    a = {"steps": [step], "idle_fraction": 0.1, "makespan_s": 2.0, "throughput_tokens_per_s_per_gpu": 1.0}
    result = {
        "workload": {"steps": 1, "samples": 4, "multiturn": False},
        "a": a,
        "b": None,
        "calibration": {"method": "t_gen_scale", "fit_steps": [0], "cost": 15.4},
        "accuracy": None,
    }
    text = _simulation_summary(T, params, result)
    assert "fit residual 15.4 (half the sum of squared relative errors" in text and "cost 15.4" not in text
