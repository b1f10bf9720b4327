"""The CLI: ingest (with stage timings from a verl log merged onto the steps), bad input,
demo, create-team, migrate."""

from __future__ import annotations

import orjson
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
    result = runner.invoke(app, ["ingest", str(folder), "--name", "with-timings"])
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
    again = printed_json(runner.invoke(app, ["ingest", str(folder)]).output)
    assert again["id"] == summary["id"] and again["already_uploaded"]


def test_ingest_bad_file_exits_2_naming_line_and_field(env, tmp_path):
    bad = tmp_path / "packed_lengths_step_0.jsonl"
    bad.write_bytes(b'{"step": 0, "input": 5, "output": [1, 2]}\n{"step": 0, "input": 5, "output": "x"}\n')
    result = runner.invoke(app, ["ingest", str(bad)])
    assert result.exit_code == 2
    assert "packed_lengths_step_0.jsonl" in result.output and "line 2" in result.output and "output" in result.output


def test_demo_and_create_team(env):
    result = runner.invoke(app, ["demo", "--steps", "3", "--groups", "8"])
    assert result.exit_code == 0, result.output
    summary = printed_json(result.output)
    assert summary["samples"] == 3 * 8 * 8 and summary["status"] == "ready"
    key = runner.invoke(app, ["create-team", "cli-team-" + str(summary["id"]) + env["RLVR_DATABASE_URL"][-6:]])
    assert key.exit_code == 0 and key.output.strip().startswith("rlvr_")
    assert runner.invoke(app, ["migrate"]).exit_code == 0
