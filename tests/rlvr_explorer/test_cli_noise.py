"""What the CLI says, as a new user meets it: one line for the analyses a GPU-only trace
has no data for, the speedup footnote only with a comparison, quota sizes with units,
errors naming the command's options and the file's real format, every error of an upload
and never an exception's class name, no "no worker" line from `serve`, and the data an
analysis actually lacks."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from backend.auth import team_for_key
from backend.formats.base import InputError
from backend.store.db import session_scope
from rlvr_explorer.cli import app
from rlvr_explorer.errors import error_lines
from tests.format_writers import kineto_rank_trace
from tests.helpers import synthetic_rows, write_packed_dir

sqlite_only = pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def ingest_json(*args) -> dict:
    r = invoke("ingest", *args, "--json")
    assert r.exit_code == 0, r.output
    return orjson.loads(r.stdout.strip().splitlines()[-1])


def team_name(key: str) -> str:
    with session_scope() as s:
        return team_for_key(s, key).name


@sqlite_only
def test_a_gpu_only_ingest_sums_up_what_does_not_apply_in_one_line(env, team_key, tmp_path):
    path = tmp_path / "rank-0.json"
    path.write_bytes(kineto_rank_trace(0, steps=2, ops_per_step=10, seed=5))
    r = invoke("ingest", path, "--api-key", team_key)
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stdout.splitlines() if "not applicable" in line or "not run" in line]
    assert len(lines) == 1, r.stdout
    assert lines[0].startswith("not applicable to a GPU-only trace: lengths, longtail, imbalance"), lines
    assert "reward_length" in lines[0] and "--into" in lines[0]
    assert "per-step lengths" not in r.stdout  # no list of what each would need
    # scripts still get each analysis with the files that would bring its data
    again = ingest_json(path, "--api-key", team_key)
    assert "reward_length" in again["not_applicable"] and "gpu_timeline" not in again["not_applicable"]


@sqlite_only
def test_reward_length_is_said_to_lack_rewards_on_a_trace_with_lengths(env, team_key, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2, seed=21))
    summary = ingest_json(folder, "--api-key", team_key)
    assert summary["samples"] == 16 and "lengths" in summary["queued_analyses"]
    needs = summary["not_applicable"]["reward_length"]
    assert "reward" in needs and "rollout dumps" in needs, needs
    assert "per-step lengths" not in needs, needs  # the trace has those
    text = invoke("ingest", folder, "--api-key", team_key).stdout
    assert "  reward_length: per-sample rewards" in text, text


@sqlite_only
def test_the_speedup_footnote_comes_only_with_a_comparison(env, team_key, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2, seed=22))
    trace_id = ingest_json(folder, "--api-key", team_key)["id"]
    alone = invoke("simulate", trace_id, "--deterministic", "--api-key", team_key)
    assert alone.exit_code == 0, alone.output
    assert "speedup" not in alone.stdout and "--json prints every number" in alone.stdout
    compared = invoke("simulate", trace_id, "--deterministic", "--compare", "one_step_off", "--api-key", team_key)
    assert compared.exit_code == 0, compared.output
    assert "(speedup = step time of A / step time of B" in compared.stdout


@pytest.fixture
def quota_restored(env, team_key):
    """The shared team's quota set back to the default after the test: a quota left at
    a few bytes would refuse every later test's upload."""
    yield
    r = invoke("quota", team_name(team_key), "--default")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("size", "shown", "stored"),
    [
        ("1k", "1.0 KiB", 1024),
        ("1KiB", "1.0 KiB", 1024),
        ("1KB", "1000 B", 1000),
        ("1.5G", "1.5 GiB", 3 * 1024**3 // 2),
        ("500MiB", "500.0 MiB", 500 * 1024**2),
        ("2 TB", "1.8 TiB", 2 * 1000**4),
        ("4096", "4.0 KiB", 4096),
    ],
)
@sqlite_only
def test_quota_takes_a_size_with_a_unit(env, team_key, size, shown, stored, quota_restored):
    team = team_name(team_key)
    r = invoke("quota", team, "--set", size)
    assert r.exit_code == 0, r.output
    assert f"quota {shown} (its own)" in r.stdout, r.stdout
    assert orjson.loads(invoke("quota", team, "--json").stdout)["quota_bytes"] == stored


@sqlite_only
@pytest.mark.parametrize("size", ["1x", "-1k", "1e3", "k", "1.5.2G", "1kk", "99999999999999T"])
def test_quota_refuses_a_bad_size_naming_the_option(env, team_key, size):
    team = team_name(team_key)
    before = orjson.loads(invoke("quota", team, "--json").stdout)["quota_bytes"]
    r = invoke("quota", team, "--set", size)
    assert r.exit_code == 2, r.output
    assert "--set" in r.output and "Input should be a valid integer" not in r.output
    assert orjson.loads(invoke("quota", team, "--json").stdout)["quota_bytes"] == before  # unchanged


def test_quota_help_says_which_units_are_powers_of_1024():
    text = " ".join(runner.invoke(app, ["quota", "--help"], terminal_width=200).stdout.split())
    assert "KiB" in text and "powers of 1024" in text and "powers of 1000" in text


@sqlite_only
def test_generate_without_a_source_names_the_options(env, tmp_path):
    r = invoke("generate", "--out", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert "--from-trace" in r.output and "--params" in r.output, r.output
    assert "trace_id" not in r.output and "parameters" not in r.output, r.output


@sqlite_only
def test_the_quota_refusal_names_no_exception_class(env, team_key, tmp_path, quota_restored):
    invoke("quota", team_name(team_key), "--set", "100")
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=2, groups=4, n=2, seed=23))
    r = invoke("ingest", folder, "--api-key", team_key)
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("error: team storage quota of 100 B exceeded"), r.stderr
    assert "QuotaExceeded" not in r.output and "Error)" not in r.output and "Traceback" not in r.output


@sqlite_only
def test_an_unexpected_error_names_no_class_but_how_to_see_more(env, monkeypatch):
    import backend.store.migrate

    def broken(url):
        raise KeyError("alembic_version")

    monkeypatch.setattr(backend.store.migrate, "upgrade", broken)
    r = invoke("migrate")
    assert r.exit_code == 1
    assert r.stderr.startswith("error: 'alembic_version'") and "RLVR_DEBUG=1" in r.stderr, r.stderr
    assert "KeyError" not in r.output and "Traceback" not in r.output


@sqlite_only
def test_a_forced_format_that_does_not_fit_says_what_the_file_is(env, team_key, tmp_path):
    folder = write_packed_dir(tmp_path / "run", synthetic_rows(steps=1, groups=4, n=2, seed=24))
    r = invoke("ingest", folder / "packed_lengths_step_0.jsonl", "--format", "kineto", "--api-key", team_key)
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: packed_lengths_step_0.jsonl: not a Kineto trace (one Chrome-trace JSON object")
    assert "it looks like JSON lines" in line and "detected format polytrace-packed" in line, line
    assert "trailing characters" not in line
    # a real Kineto file with a fault keeps the reader's own words (file, line, field)
    broken = tmp_path / "rank-0.json"
    broken.write_bytes(kineto_rank_trace(0, steps=1, ops_per_step=4)[:-40])
    bad = invoke("ingest", broken, "--format", "kineto", "--api-key", team_key)
    assert bad.exit_code == 2 and "rank-0.json, line" in bad.stderr and "not a Kineto" not in bad.stderr, bad.stderr


@sqlite_only
def test_every_error_of_a_bad_upload_is_printed(env, team_key, tmp_path, monkeypatch):
    """Whatever the ingest reports (one error, or one per bad file), each on its own line."""
    import backend.ingest.service

    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "packed_lengths_step_0.jsonl").write_bytes(b'{"step": 0, "input": 5, "output": "x"}\n')
    (folder / "packed_lengths_step_1.jsonl").write_bytes(b'{"step": 1, "input": -5, "output": [1]}\n')
    real = backend.ingest.service.accept_upload
    raised: list[Exception] = []

    def recording(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except InputError as exc:
            raised.append(exc)
            raise

    monkeypatch.setattr(backend.ingest.service, "accept_upload", recording)
    r = invoke("ingest", folder, "--api-key", team_key)
    assert r.exit_code == 2 and raised, r.output
    printed = r.stderr.strip().splitlines()
    assert printed == [f"error: {line}" for line in error_lines(raised[0])], r.stderr
    assert "packed_lengths_step_0.jsonl, line 1" in printed[0]

    # an ingest reporting each bad file: every one printed, in either shape
    first = InputError("a.jsonl", "not valid JSON", line=2)
    second = InputError("b.jsonl", "must be >= 0", line=1, field="input")
    several = InputError("upload", "2 files could not be read")
    several.errors = [first, second]  # type: ignore[attr-defined]
    joined = InputError("upload", f"{first}\n{second}")
    for exc, lines in ((several, [str(first), str(second)]), (joined, [f"upload: {first}", str(second)])):

        def refusing(*args, exc=exc, **kwargs):
            raise exc

        monkeypatch.setattr(backend.ingest.service, "accept_upload", refusing)
        r = invoke("ingest", folder, "--api-key", team_key)
        assert r.exit_code == 2, r.output
        assert r.stderr.strip().splitlines() == [f"error: {line}" for line in lines], r.stderr


def test_api_error_details_become_one_line_each():
    one = {"file": "a.jsonl", "line": 2, "field": None, "message": "a.jsonl, line 2: not valid JSON"}
    two = {"file": "b.jsonl", "line": 1, "field": "input", "message": "b.jsonl, line 1, field 'input': negative"}
    assert error_lines(one) == [one["message"]]
    assert error_lines([one, two]) == [one["message"], two["message"]]
    assert error_lines({"message": "2 files", "errors": [one, two]}) == [one["message"], two["message"]]
    assert error_lines([{"loc": ["body", "name"], "msg": "field required"}]) == ["name: field required"]
    assert error_lines("plain text") == ["plain text"]


@sqlite_only
def test_serve_says_its_own_worker_runs_the_demo_analyses(env, monkeypatch):
    """`serve` ingests the demo before it starts its worker: no "no worker seen" then."""
    import signal
    import socket

    import typer

    import rlvr_explorer.cli.lifecycle as lifecycle
    import rlvr_explorer.cli.main as main

    def stop_here(concurrency):
        raise typer.Exit(0)  # the demo is ingested: the worker would start now

    small_demo = main.write_demo_trace
    monkeypatch.setattr(main, "write_demo_trace", lambda folder, *sizes: small_demo(folder, 2, 4, 2))
    monkeypatch.setattr(lifecycle, "start_worker", stop_here)
    monkeypatch.setattr(main, "_live_workers", lambda: 0)
    monkeypatch.setattr(main, "local_team_key", _empty_team)
    # serve points this process's clients at itself (RLVR_API_URL): gone with the test,
    # or every server a later test starts would send its dashboard's calls to this port
    monkeypatch.setenv("RLVR_API_URL", "unset")  # recorded as absent before: removed again on undo
    monkeypatch.delenv("RLVR_API_URL")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sigterm = signal.getsignal(signal.SIGTERM)  # serve sets its own
    try:
        r = runner.invoke(app, ["serve", "--port", str(port)])
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert r.exit_code == 0, r.output
    assert "ingested trace" in r.stdout and "queued analyses" in r.stdout, r.stdout
    assert "no worker seen" not in r.stdout and "the worker `serve` starts" in r.stdout, r.stdout
    # an ingest of its own still says when no worker runs
    assert "no worker seen" in main._worker_line(0)


def _empty_team() -> tuple[int, str]:
    """A team with no trace yet (so `serve` seeds the demo into it), and its key."""
    import uuid

    from backend.auth import create_team

    with session_scope() as s:
        team, key = create_team(s, f"serve-{uuid.uuid4().hex[:8]}")
        return team.id, key
