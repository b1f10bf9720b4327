"""Readers for other RL tools' files: TensorBoard event files, W&B history exports,
AReaL perf and session traces, OTLP/JSON trace exports. Every file is written here by
the tool's own writer (TensorBoard) or in the tool's documented shape."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import orjson
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from backend.formats import detect_format, read_sources
from backend.formats.archive import expand_upload
from backend.formats.base import InputError, ReadResult, Source
from backend.formats.step_metrics import StepMetrics
from tests import format_writers as fw


def write(path: Path, data: bytes) -> Source:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Source(path.name, lambda: path.open("rb"), path.stat().st_size)


def tables(sources: list[Source], result: ReadResult | None = None) -> dict[str, dict[str, list]]:
    out: dict[str, dict[str, list]] = {}
    for batch in read_sources(sources, None, result if result is not None else ReadResult()):
        cols = out.setdefault(batch.table, {})
        for k, v in batch.columns.items():
            cols.setdefault(k, []).extend(list(v))
    return out


def merged_steps(steps: dict[str, list]) -> dict[int, dict]:
    """Steps batches folded on step, as the pipeline does."""
    rows: dict[int, dict] = {}
    for i, s in enumerate(steps["step"]):
        row = rows.setdefault(int(s), {})
        for k, v in steps.items():
            if k == "metrics":
                row.setdefault("metrics", {}).update(v[i])
            elif k != "step" and not (isinstance(v[i], float) and np.isnan(v[i])):
                row[k] = float(v[i])
    return rows


# --------------------------------------------------------------------------- TensorBoard


def test_tensorboard_scalars_and_stage_timings(tmp_path):
    src = write(tmp_path / "events.out.tfevents.1700000000.host.42.0", fw.tensorboard_bytes(3))
    assert detect_format(src) == "tensorboard"
    rows = merged_steps(tables([src])["steps"])
    assert sorted(rows) == [0, 1, 2]
    assert [rows[s]["t_gen"] for s in range(3)] == [10.0, 11.0, 12.0]
    assert [rows[s]["t_step"] for s in range(3)] == [20.0, 21.0, 22.0]
    assert rows[2]["metrics"]["critic/score/mean"] == pytest.approx(0.5)  # a TF2 tensor scalar
    assert rows[2]["metrics"]["perf/tokens"] == 2000.0  # ... packed as tensor_content bytes
    assert rows[1]["metrics"]["actor/entropy"] == 0.5
    assert "h" not in rows[0]["metrics"]  # histograms are not scalars


def test_tensorboard_detected_by_content_when_renamed(tmp_path):
    assert detect_format(write(tmp_path / "run0.bin", fw.tensorboard_bytes(1))) == "tensorboard"


def test_tensorboard_truncated_file_names_the_record(tmp_path):
    data = fw.tensorboard_bytes(3)
    src = write(tmp_path / "events.out.tfevents.1.h", data[:-7])
    with pytest.raises(InputError) as err:
        tables([src])
    assert err.value.file == src.name and err.value.field == "record" and err.value.line == 7


def test_tensorboard_in_a_zip(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("run/logs/events.out.tfevents.1700000000.host.1.0", fw.tensorboard_bytes(2))
    archive = tmp_path / "tb.zip"
    archive.write_bytes(buf.getvalue())
    rows = merged_steps(tables(expand_upload(archive, archive.name))["steps"])
    assert [rows[s]["t_gen"] for s in (0, 1)] == [10.0, 11.0]


def test_step_metrics_bounded_and_merged():
    buf = StepMetrics(max_steps=8)
    batches = []
    for s in range(100):
        for k in ("a", "b"):
            out = buf.add(s, k, float(s))
            if out is not None:
                batches.append(out)
        assert len(buf.merged) <= 9
    batches.append(buf.finish())
    steps = [int(x) for b in batches for x in b.columns["step"]]
    assert sorted(steps) == list(range(100))


# --------------------------------------------------------------------------- W&B


@pytest.mark.parametrize("name,data", [("history.csv", fw.wandb_csv(3)), ("run-history.parquet", fw.wandb_parquet(3))])
def test_wandb_history(tmp_path, name, data):
    src = write(tmp_path / name, data)
    assert detect_format(src) == ("wandb-csv" if name.endswith(".csv") else "wandb-parquet")
    rows = merged_steps(tables([src])["steps"])
    assert sorted(rows) == [0, 1, 2]
    assert [rows[s]["t_gen"] for s in range(3)] == [10.0, 11.0, 12.0]
    assert rows[1]["metrics"]["train/loss"] == pytest.approx(0.4)
    assert rows[2]["metrics"]["_runtime"] == 3.0
    assert "_timestamp" not in rows[0]["metrics"] and "media" not in rows[0]["metrics"]


def test_native_csv_still_native(tmp_path):
    src = write(tmp_path / "s.csv", b"step,group_idx,sample_idx,prompt_len,response_len\n0,0,0,5,1\n")
    assert detect_format(src) == "native-csv"


def test_wandb_csv_bad_step(tmp_path):
    src = write(tmp_path / "h.csv", b"_step,loss\n0,1.0\nx,2.0\n")
    with pytest.raises(InputError) as err:
        tables([src])
    assert (err.value.line, err.value.field) == (3, "_step")


def test_wandb_offline_run_is_skipped_with_advice(tmp_path):
    run = write(tmp_path / "run-abc123.wandb", b"\x00binary")
    hist = write(tmp_path / "history.csv", fw.wandb_csv(1))
    result = ReadResult()
    tables([run, hist], result)
    assert any("wandb sync" in note for note in result.skipped)


# --------------------------------------------------------------------------- AReaL


def test_areal_perf_spans_per_step_and_rank(tmp_path):
    srcs = [write(tmp_path / f"perf_tracer/traces-r{r}.jsonl", fw.areal_perf(r, 2)) for r in (0, 1)]
    assert {detect_format(s) for s in srcs} == {"areal-perf"}
    rt = tables(srcs)["rank_timings"]
    got = {
        (int(s), int(r), p): round(float(x), 6)
        for s, r, p, x in zip(rt["step"], rt["rank"], rt["phase"], rt["seconds"])
    }
    assert got[(1, 1, "train.rollout")] == 2.0
    # B/E (0.5 s) + X (0.5 s), no step arg: the step of the train.rollout before them
    assert got[(0, 0, "fsdp_engine.train_batch")] == 1.0
    assert len(got) == 8


def test_areal_perf_end_without_begin(tmp_path):
    src = write(
        tmp_path / "traces-r0.jsonl",
        fw.jsonl([{"name": "a", "ph": "X", "ts": 0, "dur": 1, "args": {"step": 0}}, {"name": "a", "ph": "E", "ts": 5}]),
    )
    with pytest.raises(InputError) as err:
        tables([src])
    assert (err.value.line, err.value.field) == (2, "ph")


def test_areal_sessions_to_samples_turns_tool_calls(tmp_path):
    srcs = [write(tmp_path / f"session_tracer/sessions-r{r}.jsonl", fw.areal_sessions(r, 2, 2)) for r in (0, 1)]
    assert {detect_format(s) for s in srcs} == {"areal-sessions"}
    t = tables(srcs)
    s = t["samples"]
    assert len(s["step"]) == 8
    keys = set(zip(s["step"], s["group_idx"], s["sample_idx"]))
    assert len(keys) == 8  # ranks do not collide
    assert s["latency_s"][3] == pytest.approx(2.3)
    assert set(s["num_turns"]) == {2} and set(s["num_tool_calls"]) == {1}
    assert len(t["turns"]["turn"]) == 16 and t["turns"]["engine_latency_s"][0] == pytest.approx(1.0)
    assert t["tool_calls"]["latency_s"][0] == pytest.approx(0.5) and t["tool_calls"]["status"][0] == "rejected"


def test_areal_sessions_bad_field(tmp_path):
    src = write(tmp_path / "sessions-r0.jsonl", fw.jsonl([{"task_id": 0, "session_id": 0, "generate_s": "slow"}]))
    with pytest.raises(InputError) as err:
        tables([src])
    assert (err.value.line, err.value.field) == (1, "generate_s")


# --------------------------------------------------------------------------- OTLP


def test_otlp_lines_two_workers(tmp_path):
    data = orjson.dumps(fw.otlp_request("w0")) + b"\n" + orjson.dumps(fw.otlp_request("w1")) + b"\n"
    src = write(tmp_path / "otel_traces.jsonl", data)
    assert detect_format(src) == "otlp-json"
    result = ReadResult()
    rt = tables([src], result)["rank_timings"]
    got = {
        (int(s), int(r), p): round(float(x), 6)
        for s, r, p, x in zip(rt["step"], rt["rank"], rt["phase"], rt["seconds"])
    }
    assert got[(1, 1, "state:rollout")] == 3.0
    assert got[(0, 0, "generate_sequences")] == 2.5
    assert len(got) == 8
    assert any("no step attribute" in n for n in result.skipped)


def test_otlp_pretty_document(tmp_path):
    src = write(tmp_path / "trace.json", orjson.dumps(fw.otlp_request(), option=orjson.OPT_INDENT_2))
    assert detect_format(src) == "otlp-json"
    assert len(tables([src])["rank_timings"]["step"]) == 4


def test_otlp_bad_time(tmp_path):
    req = fw.otlp_request()
    req["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["endTimeUnixNano"] = "soon"
    src = write(tmp_path / "t.jsonl", orjson.dumps(req) + b"\n")
    with pytest.raises(InputError) as err:
        tables([src])
    assert err.value.line == 1 and err.value.field.endswith("spans[1].endTimeUnixNano")


# --------------------------------------------------------------------------- ingestion


def run_folder(root: Path) -> Path:
    """A run folder with every format, the way the tools lay them out."""
    (root / "tb").mkdir(parents=True)
    (root / "tb" / "events.out.tfevents.1700000000.host.1.0").write_bytes(fw.tensorboard_bytes(3))
    (root / "wandb").mkdir()
    (root / "wandb" / "history.csv").write_bytes(fw.wandb_csv(3))
    (root / "wandb" / "history-eval.parquet").write_bytes(fw.wandb_parquet(3))
    (root / "otel").mkdir()
    (root / "otel" / "traces.jsonl").write_bytes(orjson.dumps(fw.otlp_request("w0", unstepped=False)) + b"\n")
    (root / "perf_tracer").mkdir()
    (root / "perf_tracer" / "traces-r0.jsonl").write_bytes(fw.areal_perf(0, 2))
    (root / "session_tracer").mkdir()
    (root / "session_tracer" / "sessions-r0.jsonl").write_bytes(fw.areal_sessions(0, 2, 2))
    return root


def test_cli_ingests_every_format_without_format_flag(env, tmp_path):
    from backend.store.db import new_session
    from backend.store.models import RankTiming, Sample, Step
    from rlvr_explorer.cli import app

    folder = run_folder(tmp_path / "run")
    result = CliRunner().invoke(app, ["ingest", str(folder), "--name", "rl-tools", "--json"])
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.output[result.output.rindex('{"id"') :].splitlines()[0])
    assert summary["status"] == "ready" and summary["samples"] == 4
    with new_session() as s:
        steps = {st.step: st for st in s.scalars(select(Step).where(Step.trace_id == summary["id"]))}
        timings = s.scalars(select(RankTiming).where(RankTiming.trace_id == summary["id"])).all()
        samples = s.scalars(select(Sample).where(Sample.trace_id == summary["id"])).all()
    assert steps[1].t_gen == 11.0 and steps[2].metrics["train/loss"] == pytest.approx(0.3)
    assert {t.phase for t in timings} == {
        "train.rollout",
        "fsdp_engine.train_batch",
        "state:rollout",
        "generate_sequences",
    }
    assert sorted(round(x.latency_s, 3) for x in samples) == [2.0, 2.1, 2.2, 2.3]


def test_upload_zip_of_otlp_and_tensorboard(api, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("run/events.out.tfevents.1700000000.host.1.0", fw.tensorboard_bytes(2))
        z.writestr("run/otel/traces.jsonl", orjson.dumps(fw.otlp_request("w0")) + b"\n")
    r = api.post(
        "/api/v1/traces", files=[("files", ("run.zip", buf.getvalue(), "application/zip"))], data={"name": "otlp"}
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["status"] == "ready" and body["n_rank_timings"] == 4
    timings = api.get(f"/api/v1/traces/{body['id']}/rank-timings").json()["items"]
    assert {t["phase"] for t in timings} == {"state:rollout", "generate_sequences"}
    steps = api.get(f"/api/v1/traces/{body['id']}/steps").json()["items"]
    assert [s["t_gen"] for s in steps] == [10.0, 11.0]
