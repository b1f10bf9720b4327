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
    assert "queued analyses: lengths" in out
    from backend.jobs.presence import live_workers
    from backend.settings import get_settings

    if live_workers(get_settings()):  # another test's worker shares this data folder
        assert "a worker is running" in out
    else:
        assert "no worker seen" in out and "rlvr-explorer worker" in out
    # the analyses without their data say which files of which format would bring it
    assert "multiturn: multiturn_workload_step_N.jsonl (PolyTrace multi-turn)" in out
    assert "turns.step" not in out and "--into" in out
    assert "truncation unknown: the trace records no stop reason and no cap" in out  # its one definition
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
    from backend.jobs.simulations import simulation_request
    from rlvr_explorer.cli.whatif import _simulation_summary

    class T:
        id, name = 7, "t"

    request = simulation_request(
        {"trace_id": 7, "cluster": {"n_gpus": 8, "rollout_replicas": 2, "rollout_tp": 4, "train_dp": 8}}
    )
    step = {"step": 0, "stages": {"rollout": 1.0}, "step_time": 2.0}
    a = {"steps": [step], "idle_fraction": 0.1, "makespan_s": 2.0, "throughput_tokens_per_s_per_gpu": 1.0}
    result = {
        "workload": {"steps": 1, "samples": 4, "multiturn": False},
        "a": a,
        "b": None,
        "calibration": {"method": "t_gen_scale", "fit_steps": [0], "cost": 15.4},
        "accuracy": None,
    }
    text = _simulation_summary(T, request, result)
    assert "fit residual 15.4 (half the sum of squared relative errors" in text and "cost 15.4" not in text


def _stdout_json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith(("{", "["))]


@sqlite_only
def test_piped_output_is_a_summary_and_json_only_with_the_flag(env, tmp_path):
    """Every command: a readable summary when piped; one JSON object (one line, nothing
    else on stdout) with --json. A real process with its output piped, as scripts run it."""
    import os
    import subprocess
    import sys

    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2))
    proc_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")} | env

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "rlvr_explorer", *args], env=proc_env, capture_output=True, text=True, timeout=300
        )

    piped = cli("ingest", str(folder), "--name", "piped")
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert "ingested trace" in piped.stdout and _stdout_json_lines(piped.stdout) == []
    trace_id = int(piped.stdout.split("ingested trace ", 1)[1].split()[0])
    extra = write_packed_dir(tmp_path / "more", [synthetic_rows(steps=3, groups=4, n=2, seed=3)[2]])
    into = cli("ingest", str(extra), "--into", str(trace_id))
    assert into.returncode == 0, into.stderr[-2000:]
    assert f"attached to trace {trace_id}" in into.stdout and _stdout_json_lines(into.stdout) == []
    for args in (["ingest", str(folder)], ["simulate", str(trace_id), "--deterministic"], ["migrate"]):
        out = cli(*args, "--json")
        assert out.returncode == 0, (args, out.stderr[-2000:])
        lines = out.stdout.strip().splitlines()
        assert len(lines) == 1 and isinstance(orjson.loads(lines[0]), dict), (args, out.stdout[:500])


@sqlite_only
def test_reingest_with_changed_options_says_what_they_would_change(env, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2, seed=77))
    first = runner.invoke(app, ["ingest", str(folder), "--name", "original", "--json"])
    assert first.exit_code == 0, first.output
    same = runner.invoke(app, ["ingest", str(folder), "--name", "original"])
    assert same.exit_code == 0 and "already uploaded" in same.output and "differ" not in same.output
    for args, words in (
        (["--name", "renamed"], "named 'renamed' instead of 'original'"),
        (["--max-response-len", "16384"], "16,384-token cap"),
        (["--format", "kineto"], "files read as kineto instead of polytrace-packed"),
    ):
        r = runner.invoke(app, ["ingest", str(folder), *args])
        assert r.exit_code == 1, (args, r.output)
        assert "already uploaded" in r.output and words in r.output and "not applied" in r.output, r.output
        as_json = orjson.loads(
            _stdout_json_lines(runner.invoke(app, ["ingest", str(folder), *args, "--json"]).stdout)[0]
        )
        assert args[0] in as_json["changed_options"]
    bad = runner.invoke(app, ["ingest", str(folder), "--format", "nosuch"])
    assert bad.exit_code == 2 and "unknown format 'nosuch'" in bad.output and "already uploaded" not in bad.output


@sqlite_only
def test_no_command_prints_a_traceback_for_a_bad_argument(env, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=1, groups=2, n=2))
    params = tmp_path / "params.json"
    params.write_text("{not json")
    bad = [
        ["simulate", "999999"],
        ["simulate", "abc"],
        ["simulate", "1", "--steps", "5:x"],
        ["advise", "999999"],
        ["ingest", str(tmp_path / "missing")],
        ["ingest", str(folder), "--format", "nosuch"],
        ["ingest", str(folder), "--into", "999999"],
        ["ingest", str(folder), "--api-key", "rlvr_not_a_key"],
        ["generate", "--out", str(tmp_path / "out"), "--params", str(params), "--steps", "1"],
        ["generate", "--out", str(tmp_path / "out2"), "--from-trace", "999999"],
        ["watch", str(folder), "--server", "http://127.0.0.1:9", "--api-key", "k"],
        ["create-team"],
        ["nosuch-command"],
    ]
    for args in bad:
        r = runner.invoke(app, args)
        assert r.exit_code not in (0, None), (args, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
        assert "Traceback" not in r.output and ("error" in r.output.lower() or "usage" in r.output.lower()), (
            args,
            r.output,
        )
