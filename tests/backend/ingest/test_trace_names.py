"""Trace names: an upload without a name is named after its run folder or archive (not
its first file), and a trace can be renamed (PATCH /traces/{id}, `rlvr-explorer rename`),
on SQLite and Postgres."""

from __future__ import annotations

from pathlib import PurePath

import orjson
import pytest
from typer.testing import CliRunner

from backend.ingest.naming import clean_trace_name, default_trace_name
from rlvr_explorer.cli import app
from tests.helpers import jsonl, synthetic_rows, write_packed_dir, zip_folder

runner = CliRunner()


def upload(api, files, **form):
    return api.post("/api/v1/traces", files=[("files", f) for f in files], data=form)


def packed_files(seed: int, steps: int = 2) -> list[tuple[str, bytes, str]]:
    per_step = synthetic_rows(steps=steps, groups=4, n=2, seed=seed)
    return [(f"packed_lengths_step_{rows[0]['step']}.jsonl", jsonl(rows), "application/json") for rows in per_step]


@pytest.fixture()
def trace(api) -> dict:
    r = upload(api, packed_files(seed=41), name="before")
    assert r.status_code == 201, r.text
    return r.json()


# -- default names ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("files", "given", "expected"),
    [
        (["u/run_7.tar.gz"], None, "run_7"),
        (["u/run_7.zip"], None, "run_7"),
        (["u/sampled_rank-0.json.gz"], None, "sampled_rank-0"),
        (["u/packed_lengths_step_0.jsonl", "u/packed_lengths_step_1.jsonl"], None, "packed_lengths"),
        (
            ["u/packed_lengths_step_0.jsonl", "u/packed_lengths_step_1.jsonl", "u/reward_timings_step_0.jsonl"],
            None,
            "packed_lengths + reward_timings",
        ),
        (["runs/dapo_32b/packed_lengths_step_0.jsonl"], ["runs/dapo_32b"], "dapo_32b"),
        (
            ["runs/dapo_32b/a.jsonl", "runs/dapo_32b/b.jsonl"],
            ["runs/dapo_32b/a.jsonl", "runs/dapo_32b/b.jsonl"],
            "dapo_32b",
        ),
    ],
)
def test_default_name_is_the_run_not_its_first_file(files, given, expected):
    paths = [PurePath(f) for f in files]
    assert default_trace_name(paths, [PurePath(g) for g in given] if given else None) == expected


def test_browser_like_upload_without_a_name_is_not_named_after_its_first_file(api):
    # the dashboard's upload of the rllm run's files: file names only, no folder
    r = upload(api, packed_files(seed=42))
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "packed_lengths"


def test_archive_upload_is_named_after_the_archive(api, tmp_path):
    folder = write_packed_dir(tmp_path / "dapo_run", synthetic_rows(steps=2, groups=4, n=2, seed=43))
    r = upload(api, [("dapo_run.zip", zip_folder(folder), "application/zip")])
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "dapo_run"


def test_rllm_fixture_folder_is_named_after_the_folder(env, shared_fixtures):
    folder = shared_fixtures / "polytrace" / "rllm_deepcoder_14b_16k"
    result = runner.invoke(app, ["ingest", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output.strip().splitlines()[-1])["name"] == "rllm_deepcoder_14b_16k"


# -- PATCH /traces/{id} -----------------------------------------------------------------
def test_rename_changes_the_name_everywhere(api, trace):
    r = api.patch(f"/api/v1/traces/{trace['id']}", json={"name": "  dapo 32B, run 7  "})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "dapo 32B, run 7" and r.json()["id"] == trace["id"]
    assert api.get(f"/api/v1/traces/{trace['id']}").json()["name"] == "dapo 32B, run 7"
    listed = api.get("/api/v1/traces", params={"q": "run 7"}).json()["items"]
    assert [t["id"] for t in listed] == [trace["id"]]
    assert r.json()["n_samples"] == trace["n_samples"]  # the content is unchanged


@pytest.mark.parametrize("bad", ["", "   ", "a\x00b", "x" * 301, None])
def test_rename_refuses_bad_names_with_422(api, trace, bad):
    r = api.patch(f"/api/v1/traces/{trace['id']}", json={"name": bad})
    assert r.status_code == 422, r.text
    assert "name" in r.text
    assert api.get(f"/api/v1/traces/{trace['id']}").json()["name"] == "before"


def test_rename_of_another_teams_trace_is_404(api, trace, client):
    from backend.auth import create_team
    from backend.store.db import session_scope

    with session_scope() as s:
        _team, other_key = create_team(s, f"other-{trace['id']}-{id(s)}")
    r = client.patch(f"/api/v1/traces/{trace['id']}", json={"name": "stolen"}, headers={"X-API-Key": other_key})
    assert r.status_code == 404
    assert api.patch("/api/v1/traces/999999", json={"name": "x"}).status_code == 404
    assert api.get(f"/api/v1/traces/{trace['id']}").json()["name"] == "before"


def test_rename_is_in_the_openapi_schema(client):
    op = client.get("/api/v1/openapi.json").json()["paths"]["/api/v1/traces/{trace_id}"]["patch"]
    assert {"200", "404", "422"} <= set(op["responses"])


# -- the CLI ------------------------------------------------------------------------------
def test_cli_rename(env, tmp_path):
    folder = write_packed_dir(tmp_path / "run_a", synthetic_rows(steps=2, groups=4, n=2, seed=44))
    made = orjson.loads(runner.invoke(app, ["ingest", str(folder), "--json"]).output.strip().splitlines()[-1])
    assert made["name"] == "run_a"
    result = runner.invoke(app, ["rename", str(made["id"]), "baseline", "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output) == {"id": made["id"], "name": "baseline", "previous_name": "run_a"}
    from backend.store.db import new_session
    from backend.store.models import Trace

    with new_session() as s:
        renamed = s.get(Trace, made["id"])
        assert renamed is not None and renamed.name == "baseline"


@pytest.mark.parametrize(("args", "said"), [(["999999", "x"], "not found"), (["1", "  "], "must not be empty")])
def test_cli_rename_errors_exit_1(env, args, said):
    result = runner.invoke(app, ["rename", *args])
    assert result.exit_code == 1
    assert "error: " in result.stderr and said in result.stderr
    assert "Traceback" not in result.output


def test_clean_trace_name():
    assert clean_trace_name(" a ") == "a"
    for bad in ("", " \t", "a\x00", "y" * 301):
        with pytest.raises(ValueError):
            clean_trace_name(bad)
