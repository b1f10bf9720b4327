"""A corpus of bad input, table-driven: each case is an upload or a request that must get
a 4xx whose detail (the ErrorResponse shape) names the file, line and field where they
apply; nothing is left behind (no trace row, no sample row, no upload folder); and the
server stays healthy. Both deployment shapes (SQLite, Postgres)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import uuid
import zipfile
from dataclasses import dataclass, field

import pytest
from sqlalchemy import func, select

from tests.helpers import jsonl, synthetic_rows

HEADER = b"step,group_idx,sample_idx,prompt_len,response_len"
BIG = 10**30


@dataclass
class Case:
    id: str
    # an upload: files [(name, bytes)] and form fields; else a request
    files: list | None = None
    form: dict = field(default_factory=dict)
    method: str = "GET"
    path: str = ""  # "{trace}": a ready trace of the team
    params: dict | None = None
    json: object = None
    content: bytes | None = None
    status: tuple = (422,)
    file: str | None = None  # the detail's file contains this
    line: int | None = None
    field: str | None = None  # the detail's field starts with this


def csv(*rows: str, header: bytes = HEADER) -> bytes:
    return header + b"\n" + b"".join(r.encode() + b"\n" for r in rows)


def packed(**override) -> bytes:
    rows = synthetic_rows(steps=1, groups=3, n=2)[0]
    rows[1] = {**rows[1], **override}
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)  # json: ints beyond 64 bits too


def kineto(*events) -> bytes:
    return json.dumps({"traceEvents": [{"cat": "cpu_op", "name": "x", "ts": 0, "dur": 1}, *events]}).encode()


def kernel(**kw) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 5, "args": {"stream": 7, "device": 0}, **kw}


def zipped(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def tarred(build) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        build(tf)
    return buf.getvalue()


def _symlink(tf):
    info = tarfile.TarInfo("run/link.csv")
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    tf.addfile(info)


def _traversal(tf):
    data = csv("0,0,0,5,6")
    info = tarfile.TarInfo("../escape.csv")
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


GOOD_CSV = csv("0,0,0,5,6", "0,0,1,5,7")


def upload_cases() -> list[Case]:
    c = []
    # native CSV
    c += [
        Case(
            "csv-missing-column",
            [("s.csv", b"step,group_idx,sample_idx,prompt_len\n0,0,0,5\n")],
            file="s.csv",
            line=1,
            field="response_len",
        ),
        Case("csv-empty", [("s.csv", b"")], file="s.csv", line=1),
        Case("csv-header-only", [("s.csv", HEADER + b"\n")], file="s.csv"),
        Case("csv-text-in-int", [("s.csv", csv("0,0,0,5,6", "abc,0,1,5,6"))], file="s.csv", line=3, field="step"),
        Case("csv-float-in-int", [("s.csv", csv("0,0,0,1.5,6"))], file="s.csv", line=2, field="prompt_len"),
        Case("csv-negative-group", [("s.csv", csv("0,-1,0,5,6"))], file="s.csv", line=2, field="group_idx"),
        Case("csv-negative-prompt", [("s.csv", csv("0,0,0,-1,6"))], file="s.csv", line=2, field="prompt_len"),
        Case("csv-absurd-length", [("s.csv", csv("0,0,0,5,1000000000"))], file="s.csv", line=2, field="response_len"),
        Case("csv-step-above-int32", [("s.csv", csv("2147483648,0,0,5,6"))], file="s.csv", line=2, field="step"),
        Case(
            "csv-step-above-int64", [("s.csv", csv("99999999999999999999,0,0,5,6"))], file="s.csv", line=2, field="step"
        ),
        Case("csv-missing-value", [("s.csv", csv("0,0,0,5,6", "0,0,,5,6"))], file="s.csv", line=3, field="sample_idx"),
        Case("csv-column-count", [("s.csv", csv("0,0,0,5,6", "0,0,1,5"))], file="s.csv", line=3),
        Case(
            "csv-duplicate-key",
            [("s.csv", csv("0,0,0,5,6", "0,0,1,5,6", "0,0,0,7,8"))],
            file="s.csv",
            line=4,
            field="sample_idx",
        ),
        Case(
            "csv-duplicate-key-later",
            [("s.csv", csv(*[f"0,0,{i},5,6" for i in range(50)], "0,0,7,1,1"))],
            file="s.csv",
            line=52,
            field="sample_idx",
        ),
        Case(
            "csv-bad-bool",
            [("s.csv", csv("0,0,0,5,6,maybe", header=HEADER + b",truncated"))],
            file="s.csv",
            line=2,
            field="truncated",
        ),
        Case(
            "csv-bad-float",
            [("s.csv", csv("0,0,0,5,6,abc", header=HEADER + b",reward"))],
            file="s.csv",
            line=2,
            field="reward",
        ),
        Case(
            "csv-negative-rank",
            [("s.csv", csv("0,0,0,5,6,-3", header=HEADER + b",dp_rank"))],
            file="s.csv",
            line=2,
            field="dp_rank",
        ),
        Case(
            "csv-rank-above-int32",
            [("s.csv", csv("0,0,0,5,6,4294967296", header=HEADER + b",rank"))],
            file="s.csv",
            line=2,
            field="rank",
        ),
        Case("csv-not-utf8", [("s.csv", HEADER + b"\n\xff\xfe,0,0,5,6\n")], file="s.csv"),
        Case("csv-duplicate-across-files", [("a.csv", GOOD_CSV), ("b.csv", csv("0,0,1,9,9"))]),
    ]
    # PolyTrace packed JSON lines
    name = "packed_lengths_step_0.jsonl"
    c += [
        Case(
            "packed-malformed-json",
            [(name, jsonl(synthetic_rows(1, 3, 2)[0][:2]) + b'{"step": 0, "input": 5,\n')],
            file=name,
            line=3,
        ),
        Case("packed-input-text", [(name, packed(input="abc"))], file=name, line=2, field="input"),
        Case("packed-input-negative", [(name, packed(input=-5))], file=name, line=2, field="input"),
        Case("packed-output-negative", [(name, packed(output=[10, -1]))], file=name, line=2, field="output"),
        Case("packed-output-absurd", [(name, packed(output=[10, 10**9]))], file=name, line=2, field="output"),
        Case("packed-output-huge", [(name, packed(output=[10, BIG]))], file=name, line=2, field="output"),
        Case("packed-output-float", [(name, packed(output=[10, 1.5]))], file=name, line=2, field="output"),
        Case("packed-output-not-list", [(name, packed(output="long"))], file=name, line=2, field="output"),
        Case("packed-output-missing", [(name, jsonl([{"step": 0, "input": 5}]))], file=name, line=1, field="output"),
        Case("packed-step-text", [(name, packed(step="zero"))], file=name, line=2, field="step"),
        Case("packed-not-object", [(name, b"[1, 2, 3]\n")], file=name, line=1),
        Case("packed-nul-byte", [(name, b'{"step": 0, "input": 5, "output": [1]}\n\x00\x00\n')], file=name, line=2),
        Case("packed-empty", [(name, b"")], file=name),
    ]
    # Kineto
    k = "rank0.pt.trace.json"
    c += [
        Case("kineto-malformed", [(k, b'{"traceEvents": [\n{"cat": "kernel", "ts": 1,\n "dur": }]}')], file=k, line=3),
        Case("kineto-no-events", [(k, b'{"schemaVersion": 1, "deviceProperties": []}')], file=k, field="traceEvents"),
        Case(
            "kineto-events-object", [(k, b'{"schemaVersion": 1, "traceEvents": {"a": 1}}')], file=k, field="traceEvents"
        ),
        Case("kineto-negative-dur", [(k, kineto(kernel(dur=-5)))], file=k, line=2, field="dur"),
        Case(
            "kineto-missing-dur",
            [(k, kineto({"cat": "kernel", "name": "k", "ts": 1, "args": {"stream": 7}}))],
            file=k,
            line=2,
            field="dur",
        ),
        Case("kineto-text-dur", [(k, kineto(kernel(dur="long")))], file=k, line=2, field="dur"),
        Case(
            "kineto-text-stream",
            [(k, kineto(kernel(args={"stream": "s7", "device": 0})))],
            file=k,
            line=2,
            field="args.stream",
        ),
        Case(
            "kineto-huge-stream",
            [(k, kineto(kernel(args={"stream": 2**40, "device": 0})))],
            file=k,
            line=2,
            field="stream",
        ),
        Case("kineto-text-ts", [(k, kineto(kernel(ts="soon")))], file=k, line=2, field="ts"),
        Case(
            "kineto-missing-ts",
            [(k, kineto({"cat": "kernel", "name": "k", "dur": 1, "args": {"stream": 7}}))],
            file=k,
            line=2,
            field="ts",
        ),
        Case(
            "kineto-bad-rank",
            [(k, b'{"distributedInfo": {"rank": "zero"}, "traceEvents": []}')],
            file=k,
            field="distributedInfo.rank",
        ),
        Case("kineto-gz-corrupt", [("rank0.pt.trace.json.gz", b"\x1f\x8b\x08\x00garbage")]),
    ]
    # archives
    c += [
        Case("zip-corrupt", [("run.zip", b"PK\x03\x04 not really a zip")], file="run.zip"),
        Case("zip-empty", [("run.zip", zipped({}))]),
        Case(
            "zip-bad-member",
            [("run.zip", zipped({"run/s.csv": csv("0,0,0,5,abc")}))],
            file="s.csv",
            line=2,
            field="response_len",
        ),
        Case(
            "zip-good-then-bad",
            [("run.zip", zipped({"run/a.csv": GOOD_CSV, "run/b.csv": csv("0,0,9,5,-6")}))],
            file="b.csv",
            line=2,
            field="response_len",
        ),
        Case("zip-traversal", [("run.zip", zipped({"../../etc/x.csv": GOOD_CSV}))]),
        Case("zip-only-junk", [("run.zip", zipped({"run/.DS_Store": b"x", "__MACOSX/a": b"y"}))]),
        Case(
            "tar-truncated",
            [("run.tar.gz", tarred(lambda tf: tf.addfile(tarfile.TarInfo("run/a.csv"), io.BytesIO(b"")))[:30])],
            file="run.tar.gz",
        ),
        Case("tar-symlink", [("run.tar.gz", tarred(_symlink))], file="link.csv"),
        Case("tar-traversal", [("run.tar.gz", tarred(_traversal))]),
        Case("gz-corrupt", [("s.csv.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage")], file="s.csv"),
        Case(
            "gz-bad-content", [("s.csv.gz", gzip.compress(csv("0,0,0,x,6")))], file="s.csv", line=2, field="prompt_len"
        ),
    ]
    # JSON nested deeper than any parser recurses, and NaN where a number must be finite
    deep = b"[" * 20000 + b"]" * 20000 + b"\n"
    c += [
        Case("verl-deep-nesting", [("metrics.jsonl", deep)], {"format": "verl-jsonl"}, file="metrics.jsonl", line=1),
        Case("detect-deep-nesting", [("metrics.jsonl", b'{"step": ' + deep)], file="metrics.jsonl"),
        Case("packed-deep-nesting", [(name, deep)], file=name, line=1),
        Case("native-jsonl-deep", [("s.jsonl", deep)], {"format": "native-jsonl"}, file="s.jsonl", line=1),
    ]
    # what no reader can take
    c += [
        Case("unknown-format", [("notes.txt", b"hello")], file="notes.txt"),
        Case("binary-blob", [("blob.bin", bytes(range(256)) * 4)], file="blob.bin"),
        Case("empty-unknown", [("empty.dat", b"")], file="empty.dat"),
    ]
    # form fields and file names
    c += [
        Case("name-too-long", [("s.csv", GOOD_CSV)], {"name": "n" * 301}, field="name"),
        Case("name-nul", [("s.csv", GOOD_CSV)], {"name": "a\x00b"}, field="name"),
        Case("format-unknown", [("s.csv", GOOD_CSV)], {"format": "excel"}, field="format"),
        Case("format-nul", [("s.csv", GOOD_CSV)], {"format": "native-csv\x00"}, field="format"),
        Case("format-too-long", [("s.csv", GOOD_CSV)], {"format": "x" * 400}, field="format"),
        Case("format-mismatch", [("s.csv", GOOD_CSV)], {"format": "kineto"}, file="s.csv"),
        Case("max-len-zero", [("s.csv", GOOD_CSV)], {"max_response_len": "0"}, field="max_response_len"),
        Case("max-len-negative", [("s.csv", GOOD_CSV)], {"max_response_len": "-1"}, field="max_response_len"),
        Case("max-len-1e30", [("s.csv", GOOD_CSV)], {"max_response_len": str(BIG)}, field="max_response_len"),
        Case("max-len-above-int32", [("s.csv", GOOD_CSV)], {"max_response_len": str(2**31)}, field="max_response_len"),
        Case("max-len-text", [("s.csv", GOOD_CSV)], {"max_response_len": "long"}, field="max_response_len"),
        Case("max-len-float", [("s.csv", GOOD_CSV)], {"max_response_len": "1.5"}, field="max_response_len"),
        Case("filename-256-bytes", [("x" * 252 + ".csv", GOOD_CSV)], field="files"),
        Case("filename-multibyte", [("é" * 130 + ".csv", GOOD_CSV)], field="files"),
        Case("filename-path-too-long", [("d/" * 10 + "y" * 300 + ".csv", GOOD_CSV)], field="files"),
    ]
    return c


def request_cases() -> list[Case]:
    t = "/api/v1/traces/{trace}"
    c = []
    for key, value, f in [
        ("offset", "-1", "offset"),
        ("offset", str(2**31), "offset"),
        ("offset", "1152921504606846977", "offset"),
        ("offset", str(BIG), "offset"),
        ("limit", "0", "limit"),
        ("limit", "501", "limit"),
        ("limit", "many", "limit"),
        ("status", "a\x00b", "status"),
        ("status", "s" * 21, "status"),
        ("q", "a\x00b", "q"),
        ("q", "q" * 301, "q"),
    ]:
        c.append(Case(f"traces-{key}-{value[:12]}", path="/api/v1/traces", params={key: value}, field=f))
    for path, key, value in [
        (f"{t}/samples", "step", str(2**31)),
        (f"{t}/samples", "step", str(-(2**31) - 1)),
        (f"{t}/samples", "step", "99999999999"),
        (f"{t}/samples", "step", "1.5"),
        (f"{t}/samples", "offset", str(2**63)),
        (f"{t}/samples", "offset", "-5"),
        (f"{t}/samples", "limit", "10001"),
        (f"{t}/rank-timings", "step", str(BIG)),
        (f"{t}/gpu-events", "rank", str(2**31)),
        (f"{t}/gpu-events", "step", "abc"),
        (f"{t}/gpu-events", "start_us", "nan"),
        (f"{t}/gpu-events", "end_us", "inf"),
        (f"{t}/gpu-events", "start_us", "1e400"),
        (f"{t}/gpu-events", "limit", "0"),
        (f"{t}/gpu-events/chrome-trace", "rank", str(2**40)),
        (f"{t}/gpu-events/chrome-trace", "rank", "r1"),
        (f"{t}/gpu-events/chrome-trace", "end_us", "-inf"),
        (f"{t}/summaries", "field", "latency"),
        (f"{t}/summaries", "task", "t" * 301),
        ("/api/v1/jobs", "trace_id", "1.0"),
        ("/api/v1/jobs", "trace_id", str(2**63)),
        ("/api/v1/jobs", "trace_id", "-1"),
        ("/api/v1/jobs", "kind", "a\x00"),
        ("/api/v1/jobs", "kind", "k" * 51),
        ("/api/v1/jobs", "status", "\x00"),
        ("/api/v1/jobs", "limit", str(BIG)),
        ("/api/v1/simulations", "trace_id", str(BIG)),
        ("/api/v1/simulations", "limit", "0"),
        ("/api/v1/workloads", "limit", "1000"),
        ("/api/v1/jobs", "include_result", "perhaps"),
    ]:
        c.append(Case(f"GET-{path.rsplit('/', 1)[-1]}-{key}-{value[:10]}", path=path, params={key: value}, field=key))
    for path in (
        "/api/v1/traces/2147483648",
        "/api/v1/traces/99999999999999999999",
        "/api/v1/traces/0",
        "/api/v1/traces/1.0",
        "/api/v1/jobs/-1",
        "/api/v1/jobs/abc",
        "/api/v1/simulations/9223372036854775808",
        "/api/v1/workloads/1e3/download",
        "/api/v1/traces/2147483648/samples",
    ):
        c.append(Case(f"GET-path-{path[8:40]}", path=path, field="trace_id" if "/traces/" in path else "job_id"))
    c.append(Case("analysis-unknown-kind-path", path=f"{t}/analyses/nope", status=(404,)))
    c.append(Case("summaries-nul-task", path=f"{t}/summaries", params={"task": "a\x00b"}, status=(422,), field="task"))

    sim = "/api/v1/simulations"
    for label, body, f in [
        ("trace-float", {"trace_id": 1.0}, "trace_id"),
        ("trace-string", {"trace_id": "1"}, "trace_id"),
        ("trace-huge", {"trace_id": BIG}, "trace_id"),
        ("trace-negative", {"trace_id": -1}, "trace_id"),
        ("n-gpus-1e300", {"trace_id": "{trace}", "cluster": {"n_gpus": 1e300}}, "cluster.n_gpus"),
        ("n-gpus-huge", {"trace_id": "{trace}", "cluster": {"n_gpus": BIG}}, "cluster.n_gpus"),
        ("n-gpus-zero", {"trace_id": "{trace}", "cluster": {"n_gpus": 0}}, "cluster.n_gpus"),
        ("n-gpus-text", {"trace_id": "{trace}", "cluster": {"n_gpus": "many"}}, "cluster.n_gpus"),
        ("gpu-unknown", {"trace_id": "{trace}", "cluster": {"gpu": "a\x00b"}}, "cluster.gpu"),
        ("steps-huge", {"trace_id": "{trace}", "steps": [0, BIG]}, "steps"),
        ("steps-1e300", {"trace_id": "{trace}", "steps": [0, 1e300]}, "steps"),
        ("steps-reversed", {"trace_id": "{trace}", "steps": [5, 1]}, "steps"),
        ("steps-text", {"trace_id": "{trace}", "steps": "all"}, "steps"),
        ("calibrate-text", {"trace_id": "{trace}", "calibrate": "x"}, "calibrate"),
        ("fit-steps-negative", {"trace_id": "{trace}", "calibrate": {"fit_steps": [-1]}}, "calibrate.fit_steps"),
        ("policy-unknown", {"trace_id": "{trace}", "policy": {"kind": "nope"}}, "policy"),
        ("model-unknown", {"trace_id": "{trace}", "model": "m" * 5000}, "model"),
        ("limits-1e300", {"trace_id": "{trace}", "limits": {"max_running_seqs": 1e300}}, "limits.max_running_seqs"),
        ("unknown-field", {"trace_id": "{trace}", "colour": "red"}, "colour"),
        ("both-sources", {"trace_id": "{trace}", "workload": {}}, "trace_id"),
        ("no-source", {}, "trace_id"),
        ("workload-no-parameters", {"workload": {"task": "math"}}, "workload.parameters"),
    ]:
        c.append(Case(f"POST-simulations-{label}", method="POST", path=sim, json=body, field=f))
    c.append(Case("POST-simulations-body-list", method="POST", path=sim, json=[1, 2], field=None))
    c.append(Case("POST-simulations-bad-json", method="POST", path=sim, content=b"{not json", field="body"))

    wl = "/api/v1/workloads"
    for label, body, f in [
        ("trace-float", {"trace_id": 1.0, "steps": 2}, "trace_id"),
        ("trace-bool", {"trace_id": True}, "trace_id"),
        ("seed-1e300", {"trace_id": "{trace}", "seed": 1e300}, "seed"),
        ("seed-above-int32", {"trace_id": "{trace}", "seed": 2**31}, "seed"),
        ("dp-size-zero", {"trace_id": "{trace}", "dp_size": 0}, "dp_size"),
        ("groups-1e300", {"trace_id": "{trace}", "steps": 1, "groups": 1e300}, "groups"),
        ("steps-negative", {"trace_id": "{trace}", "steps": -1}, "steps"),
        (
            "steps-too-many",
            {"trace_id": "{trace}", "steps": 100000, "groups": 1000, "samples_per_group": 1000},
            "steps",
        ),
        ("name-too-long", {"trace_id": "{trace}", "name": "n" * 301}, "name"),
        ("name-nul", {"trace_id": "{trace}", "name": "a\x00b"}, "name"),
        ("name-number", {"trace_id": "{trace}", "name": 5}, "name"),
        ("task-nul", {"trace_id": "{trace}", "task": "\x00"}, "task"),
        ("formats-empty", {"trace_id": "{trace}", "formats": []}, "formats"),
        ("formats-unknown", {"trace_id": "{trace}", "formats": ["xlsx"]}, "formats"),
        ("formats-text", {"trace_id": "{trace}", "formats": "packed"}, "formats"),
        ("ingest-text", {"trace_id": "{trace}", "ingest": "yes"}, "ingest"),
        ("no-source", {"steps": 1}, "trace_id"),
        ("unknown-field", {"trace_id": "{trace}", "colour": 1}, "colour"),
        ("parameters-garbage", {"parameters": {"x": 1}}, None),
    ]:
        c.append(Case(f"POST-workloads-{label}", method="POST", path=wl, json=body, field=f))

    an = f"{t}/analyses"
    for label, body, f in [
        ("kind-unknown", {"kind": "nope"}, "kind"),
        ("kind-nul", {"kind": "lengths\x00"}, "kind"),
        ("kind-missing", {"params": {}}, "kind"),
        ("kind-number", {"kind": 5}, "kind"),
        ("params-unknown", {"kind": "lengths", "params": {"colour": 1}}, "params"),
        ("params-list", {"kind": "lengths", "params": [1]}, "params"),
        ("tail-fraction-text", {"kind": "longtail", "params": {"tail_fraction": "abc"}}, "params"),
        ("max-len-zero", {"kind": "lengths", "params": {"max_response_len": 0}}, "params"),
        ("max-len-huge", {"kind": "lengths", "params": {"max_response_len": BIG}}, "params"),
        ("by-task-text", {"kind": "lengths", "params": {"by_task": "x"}}, "params"),
        ("dp-size-1e300", {"kind": "imbalance", "params": {"dp_size": 1e300}}, "params"),
        ("engine-key-long", {"kind": "longtail", "params": {"engine_key": "e" * 1000}}, "params"),
        ("not-applicable", {"kind": "gpu_timeline"}, "kind"),
    ]:
        c.append(Case(f"POST-analyses-{label}", method="POST", path=an, json=body, field=f))
    c.append(
        Case(
            "POST-analyses-tail-fraction-inf",
            method="POST",
            path=an,
            content=b'{"kind": "longtail", "params": {"tail_fraction": 1e400}}',
            field="params",
        )
    )
    c.append(Case("DELETE-trace-huge", method="DELETE", path="/api/v1/traces/99999999999", field="trace_id"))
    return c


CASES = upload_cases() + request_cases()


def test_corpus_is_large_enough():
    assert len(CASES) >= 100, len(CASES)
    assert len({c.id for c in CASES}) == len(CASES), "case ids repeat"


@pytest.fixture(scope="module")
def deployment(backend_env):
    """One app, team and ready trace per deployment shape for the whole corpus (each case
    checks that it changed nothing, so they can share them)."""
    from fastapi.testclient import TestClient

    from backend.api import create_app
    from backend.auth import create_team
    from backend.store.db import reset_caches, session_scope

    with pytest.MonkeyPatch.context() as mp:
        for key, value in backend_env.items():
            mp.setenv(key, value)
        mp.delenv("DATABASE_URL", raising=False)
        mp.delenv("CELERY_BROKER_URL", raising=False)
        reset_caches()
        with session_scope() as session:
            _team, key = create_team(session, f"corpus-{uuid.uuid4().hex[:8]}")
        with TestClient(create_app(), raise_server_exceptions=False) as client:
            client.headers["X-API-Key"] = key
            rows = synthetic_rows(steps=2, groups=3, n=2)
            body = jsonl(rows[0]) + jsonl(rows[1])
            r = client.post(
                "/api/v1/traces", files=[("files", ("packed_lengths_step_0.jsonl", body, "application/octet-stream"))]
            )
            assert r.status_code == 201, r.text
            yield client, r.json()["id"]
        reset_caches()


def snapshot():
    """(traces, samples) rows and the upload folders on disk."""
    from backend.settings import get_settings
    from backend.store.db import new_session
    from backend.store.models import Sample, Trace

    upload_dir = get_settings().upload_dir
    with new_session() as s:
        counts = (s.scalar(select(func.count()).select_from(Trace)), s.scalar(select(func.count()).select_from(Sample)))
    return counts, sorted(p.name for p in upload_dir.iterdir()) if upload_dir.exists() else []


def _fill(value, trace_id):
    if isinstance(value, str):
        return value.replace("{trace}", str(trace_id))
    if isinstance(value, dict):
        return {k: (trace_id if v == "{trace}" else _fill(v, trace_id)) for k, v in value.items()}
    return value


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(deployment, case):
    api, trace_id = deployment  # a 5xx is a finding to report, not a crash of the test
    before = snapshot()
    if case.files is not None:
        r = api.post(
            "/api/v1/traces",
            files=[("files", (name, data, "application/octet-stream")) for name, data in case.files],
            data=case.form,
        )
    else:
        kwargs = {}
        if case.content is not None:
            kwargs = {"content": case.content, "headers": {"content-type": "application/json"}}
        elif case.json is not None:
            kwargs = {"json": _fill(case.json, trace_id)}
        r = api.request(case.method, _fill(case.path, trace_id), params=case.params, **kwargs)
    assert r.status_code in case.status, (r.status_code, r.text[:400])
    detail = r.json()["detail"]
    assert isinstance(detail, dict) and isinstance(detail.get("message"), str), detail  # ErrorResponse
    assert set(detail) <= {"message", "file", "line", "field"}, detail
    if case.file is not None:
        assert case.file in (detail.get("file") or ""), detail
        assert case.file.split("/")[-1] in detail["message"], detail
    if case.line is not None:
        assert detail.get("line") == case.line, detail
    if case.field is not None:
        assert (detail.get("field") or "").startswith(case.field), detail
    # nothing left behind, and the server goes on
    assert snapshot() == before
    assert api.get("/api/v1/health").status_code == 200
    assert api.get("/api/v1/traces").status_code == 200
