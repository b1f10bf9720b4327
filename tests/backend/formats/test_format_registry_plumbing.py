"""One registration is all a trace format needs: a throwaway format put in the registry
(one `FormatSpec`: its reader and its file-name rule) is detected by name in
an upload, can be forced with `format`, is listed in the API's refusal of an unknown
format, and is taken by the CLI's `ingest --format`; its bad input is refused naming
file, line and field."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from backend.formats import registry
from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.spec import FormatSpec

COLUMNS = ("step", "group_idx", "sample_idx", "prompt_len", "response_len")
CONTENT = b"".join(f"{s} {g} {i} 10 {5 + s + g + i}\n".encode() for s in range(2) for g in range(3) for i in range(2))


def read_toy(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """Lines of five integers: step, group, sample, prompt and response lengths."""
    with source.open() as stream:
        rows = []
        for n, line in enumerate(stream, 1):
            parts = line.split()
            bad = next((i for i, p in enumerate(parts) if not p.isdigit()), len(parts))
            if bad < len(COLUMNS) or len(parts) != len(COLUMNS):
                raise InputError(source.name, "expected five non-negative integers", n, COLUMNS[min(bad, 4)])
            rows.append([int(p) for p in parts])
    table = np.array(rows, dtype=np.int32).reshape(-1, len(COLUMNS))
    yield TableBatch("samples", {c: table[:, i] for i, c in enumerate(COLUMNS)})


@pytest.fixture()
def toy(monkeypatch):
    spec = FormatSpec("toy-lengths", read_toy, "``lengths.toy``", names=(r"^lengths\.toy$",))
    monkeypatch.setitem(registry.SPECS, spec.name, spec)


def test_the_api_detects_forces_and_lists_it(toy, api):
    r = api.post("/api/v1/traces", files=[("files", ("lengths.toy", CONTENT, "text/plain"))])
    assert r.status_code == 201, r.text
    trace = r.json()
    assert (trace["n_samples"], trace["n_steps"], trace["source_format"]) == (12, 2, "toy-lengths")

    forced = api.post(
        "/api/v1/traces",
        data={"format": "toy-lengths", "name": "forced"},
        files=[("files", ("run.txt", CONTENT + b"2 0 0 10 7\n", "text/plain"))],
    )
    assert forced.status_code == 201 and forced.json()["n_samples"] == 13, forced.text

    bad = api.post("/api/v1/traces", files=[("files", ("lengths.toy", b"0 0 0 10 5\n0 0 x\n", "text/plain"))])
    assert bad.status_code == 422, bad.text
    assert "lengths.toy, line 2, field 'sample_idx'" in bad.text

    unknown = api.post("/api/v1/traces", data={"format": "nosuch"}, files=[("files", ("a.toy", CONTENT, "text/plain"))])
    assert unknown.status_code == 422 and "toy-lengths" in unknown.json()["detail"]["message"], unknown.text


@pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)
def test_the_cli_ingests_it(toy, team_key, tmp_path):
    from rlvr_explorer.cli import app

    path = tmp_path / "run.txt"
    path.write_bytes(CONTENT)
    r = CliRunner().invoke(
        app, ["ingest", str(path), "--format", "toy-lengths", "--api-key", team_key, "--json"], catch_exceptions=False
    )
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.stdout.strip().splitlines()[-1])
    assert (out["samples"], out["steps"], out["format"]) == (12, 2, "toy-lengths")
