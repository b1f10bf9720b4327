"""What a folder upload holds: `rlvr-explorer generate`'s folder (and its zip) ingests as
its next step says — one representation of the run read, the others noted as skipped —;
several runs in one upload are refused naming the files that give the same rows; and an
upload with several bad files lists every file's error (API and CLI)."""

from __future__ import annotations

import io
import shutil
import zipfile

import orjson
import pytest
from typer.testing import CliRunner

from rlvr_explorer.cli import app
from tests.helpers import jsonl, synthetic_rows, write_packed_dir, zip_folder

runner = CliRunner()


def cli(*args) -> object:
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture()
def generated(env, shared_fixtures, tmp_path):
    """`generate`'s folder: packed per-step files and the compact JSON of the same run."""
    params = shared_fixtures / "polytrace" / "enhanced_task_distribution_parameters.json"
    out = tmp_path / "gen"
    r = cli("generate", "--params", params, "--task", "math", "--steps", 2, "--groups", 3, "--n", 2, "--out", out)
    assert r.exit_code == 0, r.output
    assert f"rlvr-explorer ingest {out}" in r.stdout
    assert {p.name for p in out.iterdir()} >= {"packed_lengths_step_0.jsonl", "workload_compact.json"}
    return out


def test_the_generated_folder_ingests_as_its_next_step_says(generated, team_key):
    r = cli("ingest", generated, "--api-key", team_key, "--json")
    assert r.exit_code == 0, r.output
    res = orjson.loads(r.stdout.strip().splitlines()[-1])
    assert (res["steps"], res["samples"], res["format"]) == (2, 12, "polytrace-packed")
    assert any("workload_compact.json" in note and "polytrace-packed" in note for note in res["skipped"])
    text = cli("ingest", generated, "--api-key", team_key)  # the same content: the same trace, said in words
    assert text.exit_code == 0, text.output


def test_the_generated_zip_ingests_the_same(generated, api):
    r = api.post("/api/v1/traces", files=[("files", ("gen.zip", zip_folder(generated), "application/zip"))])
    assert r.status_code == 201, r.text
    trace = r.json()
    assert (trace["n_steps"], trace["n_samples"]) == (2, 12)
    assert any("workload_compact.json" in note for note in trace["metadata"]["skipped"])


def test_a_compact_file_alone_is_still_read(generated, api):
    body = (generated / "workload_compact.json").read_bytes()
    r = api.post("/api/v1/traces", files=[("files", ("workload_compact.json", body, "application/json"))])
    assert r.status_code == 201, r.text
    assert r.json()["n_samples"] == 12


def _two_runs(tmp_path, shared_fixtures):
    runs = tmp_path / "runs"
    for run in ("rllm_deepcoder_14b_16k", "verl_dapo_qwen2_5_32b"):
        shutil.copytree(shared_fixtures / "polytrace" / run, runs / run)
    return runs


def test_a_folder_of_several_runs_names_the_files_that_collide(env, team_key, tmp_path, shared_fixtures):
    r = cli("ingest", _two_runs(tmp_path, shared_fixtures), "--api-key", team_key)
    assert r.exit_code != 0
    err = r.stderr if r.stderr_bytes is not None else r.output
    assert err.startswith("error: ") and "Traceback" not in r.output
    assert "packed_lengths_step_0.jsonl in rllm_deepcoder_14b_16k/ and verl_dapo_qwen2_5_32b/ both give it" in err, err
    assert "ingest each run's folder on its own" in err


def test_rows_given_twice_by_two_files_name_both(api, tmp_path):
    """Files without prompt-group ids (native CSV): the store's unique key refuses the
    second run's rows, and the error says which files give which key."""
    buf = io.BytesIO()
    csv = b"step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,5,6\n0,0,1,5,7\n"
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("runs/run_a/samples.csv", csv)
        zf.writestr("runs/run_b/samples.csv", csv)
    r = api.post("/api/v1/traces", files=[("files", ("runs.zip", buf.getvalue(), "application/zip"))])
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["message"] == (
        "samples.csv in runs.zip/runs/run_a/ and runs.zip/runs/run_b/ both give step 0 group 0 sample 0; "
        "an upload is one run: ingest each run's folder on its own"
    ), detail
    assert detail["file"] == "runs.zip/runs/run_b/samples.csv"
    assert api.get("/api/v1/traces").json()["total"] == 0


def test_timings_given_twice_by_two_files_name_both(api, shared_fixtures):
    body = (shared_fixtures / "polytrace" / "rllm_deepcoder_14b_16k" / "reward_timings_step_0.jsonl").read_bytes()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a/reward_timings_step_0.jsonl", body)
        zf.writestr("b/reward_timings_step_0.jsonl", body)
    r = api.post("/api/v1/traces", files=[("files", ("runs.zip", buf.getvalue(), "application/zip"))])
    assert r.status_code == 422, r.text
    message = r.json()["detail"]["message"]
    assert message.startswith("reward_timings_step_0.jsonl in runs.zip/a/ and runs.zip/b/ both give step 0 rank "), (
        message
    )
    assert "phase reward of rank timings" in message


def _bad_files() -> list[tuple[str, bytes]]:
    good = synthetic_rows(steps=1, groups=2, n=2)[0]
    return [
        ("packed_lengths_step_0.jsonl", jsonl(good)),
        ("packed_lengths_step_1.jsonl", b'{"step": 1, "input": 5, "output": [-4]}\n'),
        ("packed_lengths_step_2.jsonl", b"not json\n"),
        ("packed_lengths_step_3.jsonl", b'{"step": 3, "input": "x", "output": [4]}\n'),
    ]


def test_every_bad_file_of_an_upload_is_listed_by_the_api(api):
    files = [("files", (name, body, "application/octet-stream")) for name, body in _bad_files()]
    r = api.post("/api/v1/traces", files=files)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert [e["file"] for e in detail["errors"]] == [f"packed_lengths_step_{i}.jsonl" for i in (1, 2, 3)]
    assert [e["line"] for e in detail["errors"]] == [1, 1, 1]
    assert detail["errors"][0]["field"] == "output[0]" and detail["errors"][2]["field"] == "input"
    assert detail["file"] == "packed_lengths_step_1.jsonl"  # the first, as a single error would say
    assert detail["message"].startswith("3 files of the upload have errors: packed_lengths_step_1.jsonl, line 1")
    assert "\n" not in detail["message"]
    assert api.get("/api/v1/traces").json()["total"] == 0


def test_the_listed_errors_are_bounded(api):
    from backend.formats.base import MAX_ERRORS_LISTED

    bad = [(f"packed_lengths_step_{i}.jsonl", b"not json\n") for i in range(MAX_ERRORS_LISTED + 5)]
    r = api.post("/api/v1/traces", files=[("files", (n, b, "application/octet-stream")) for n, b in bad])
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert len(detail["errors"]) == MAX_ERRORS_LISTED
    assert detail["message"].startswith(f"more than {MAX_ERRORS_LISTED} (the first {MAX_ERRORS_LISTED}) files")


def test_every_bad_file_is_listed_by_the_cli(env, team_key, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    for name, body in _bad_files():
        (folder / name).write_bytes(body)
    r = cli("ingest", folder, "--api-key", team_key)
    assert r.exit_code != 0
    lines = r.stderr.splitlines()  # one "error: ..." line per bad file
    assert [line.split(",")[0] for line in lines] == [f"error: packed_lengths_step_{i}.jsonl" for i in (1, 2, 3)], (
        r.stderr
    )
    assert "Traceback" not in r.output


def test_a_single_bad_file_keeps_its_own_message(api, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=2, n=2))
    (folder / "packed_lengths_step_1.jsonl").write_bytes(b"not json\n")
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", zip_folder(folder), "application/zip"))])
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["message"].startswith("run.zip/run/packed_lengths_step_1.jsonl, line 1: ")
    assert "errors" not in detail or detail["errors"] is None


def test_one_representation_per_run_folder():
    from backend.formats import one_representation
    from backend.formats.base import ReadResult, Source

    def src(name: str) -> Source:
        return Source(name, lambda: io.BytesIO(b""), 0)

    pairs = [
        (src("a/packed_lengths_step_0.jsonl"), "polytrace-packed"),
        (src("a/multiturn_workload_step_0.jsonl"), "polytrace-multiturn"),
        (src("a/workload_compact.json"), "polytrace-compact"),
        (src("a/reward_timings_step_0.jsonl"), "polytrace-reward"),
        (src("b/workload_compact.json"), "polytrace-compact"),
    ]
    result = ReadResult()
    kept = [s.name for s, _ in one_representation(pairs, result)]
    assert kept == [
        "a/multiturn_workload_step_0.jsonl",
        "a/reward_timings_step_0.jsonl",  # not a representation of the samples: read as well
        "b/workload_compact.json",  # another folder: its own run
    ]
    assert [n.split(":")[0] for n in result.skipped] == [
        "skipped a/packed_lengths_step_0.jsonl",
        "skipped a/workload_compact.json",
    ]
