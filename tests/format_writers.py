"""Small files in the formats of other tools, written the way those tools write them
(TensorBoard's event format, written with tensorboardX's writer and protos, pyarrow / csv for W&B history, JSON lines
for AReaL and OTLP, Chrome-trace JSON for the PyTorch profiler), for the reader tests."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import orjson


def tensor_scalar(value: float, dtype: str = "float32", packed: bool = False):
    """A 0-d TensorProto as TF2's summary ops write scalars: in its typed field, or
    (`packed`) as raw `tensor_content` bytes."""
    from tensorboardX.proto import tensor_pb2, tensor_shape_pb2

    codes = {"float32": (1, "float_val"), "float64": (2, "double_val"), "int64": (9, "int64_val")}
    code, field = codes[dtype]
    proto = tensor_pb2.TensorProto(dtype=code, tensor_shape=tensor_shape_pb2.TensorShapeProto())
    if packed:
        proto.tensor_content = np.asarray(value, dtype=dtype).tobytes()
    else:
        getattr(proto, field).append(np.asarray(value, dtype=dtype).item())
    return proto


def tensorboard_bytes(steps: int = 3, tensor_scalars: bool = True) -> bytes:
    """An event file as tensorboardX's EventFileWriter (TensorBoard's format) writes it:
    file_version, TF1 simple_value scalars, TF2 tensor scalars (typed and packed), and a
    histogram (skipped)."""
    import tempfile

    from tensorboardX.event_file_writer import EventFileWriter
    from tensorboardX.proto import event_pb2, summary_pb2

    with tempfile.TemporaryDirectory() as folder:
        writer = EventFileWriter(folder)
        for s in range(steps):
            values = [
                summary_pb2.Summary.Value(tag="timing_s/gen", simple_value=10.0 + s),
                summary_pb2.Summary.Value(tag="timing_s/step", simple_value=20.0 + s),
                summary_pb2.Summary.Value(tag="actor/entropy", simple_value=0.5),
            ]
            if tensor_scalars:
                values.append(summary_pb2.Summary.Value(tag="critic/score/mean", tensor=tensor_scalar(0.25 * s)))
                values.append(
                    summary_pb2.Summary.Value(tag="perf/tokens", tensor=tensor_scalar(1000 * s, "float64", packed=True))
                )
            writer.add_event(event_pb2.Event(step=s, wall_time=1.0 + s, summary=summary_pb2.Summary(value=values)))
            histo = summary_pb2.HistogramProto(min=0, max=1, num=1, sum=1, sum_squares=1)
            writer.add_event(
                event_pb2.Event(
                    step=s, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="h", histo=histo)])
                )
            )
        writer.close()
        (path,) = Path(folder).iterdir()
        return path.read_bytes()


def wandb_rows(steps: int = 3) -> list[dict]:
    return [
        {
            "_step": s,
            "_runtime": 1.5 * s,
            "_timestamp": 1.7e9 + s,
            "timing_s/gen": 10.0 + s,
            "train/loss": 0.5 - 0.1 * s,
        }
        for s in range(steps)
    ]


def wandb_csv(steps: int = 3) -> bytes:
    out = io.StringIO()
    rows = wandb_rows(steps)
    w = csv.DictWriter(out, fieldnames=[*rows[0], "media"])
    w.writeheader()
    for r in rows:
        w.writerow({**r, "media": "{'_type': 'image-file'}"})
    w.writerow({"_step": steps, "train/loss": ""})  # a step that logged nothing numeric
    return out.getvalue().encode()


def wandb_parquet(steps: int = 3) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = wandb_rows(steps)
    table = pa.Table.from_pylist([*rows, {"_step": steps, "train/loss": None}])
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def jsonl(rows: list) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def areal_perf(rank: int = 0, steps: int = 2) -> bytes:
    """Chrome Trace events, one per line, as AReaL's perf_tracer writes them."""
    rows: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": f"rank{rank}"}}]
    t = 0.0
    for s in range(steps):
        rows.append(
            {"name": "train.rollout", "ph": "X", "ts": t, "dur": 2e6, "pid": 1, "tid": 1, "args": {"global_step": s}}
        )
        rows.append({"name": "fsdp_engine.train_batch", "ph": "B", "ts": t + 2e6, "pid": 1, "tid": 1, "args": {}})
        rows.append({"name": "fsdp_engine.train_batch", "ph": "E", "ts": t + 2.5e6, "pid": 1, "tid": 1})
        rows.append({"name": "fsdp_engine.train_batch", "ph": "X", "ts": t + 3e6, "dur": 0.5e6, "pid": 1, "tid": 1})
        rows.append({"name": "workflow_executor.wait", "ph": "i", "ts": t + 3.6e6, "pid": 1, "tid": 1, "args": {}})
        t += 4e6
    return jsonl(rows)


def areal_sessions(rank: int = 0, tasks: int = 2, per_task: int = 2) -> bytes:
    rows = []
    session = 0
    for task in range(tasks):
        for _ in range(per_task):
            t0 = 100.0 + session
            rows.append(
                {
                    "task_id": task,
                    "session_id": session,
                    "rank": rank,
                    "status": "accepted" if session % 3 else "rejected",
                    "submit_ts": t0,
                    "finalized_ts": t0 + 3.0,
                    "total_s": 3.0,
                    "generate_s": 2.0 + 0.1 * session,
                    "reward_s": 0.25,
                    "toolcall_s": 0.5,
                    "phases": {
                        "generate": [{"start_ts": t0, "end_ts": t0 + 1.0}, {"start_ts": t0 + 1.5, "end_ts": t0 + 2.5}],
                        "reward": [{"start_ts": t0 + 2.5, "end_ts": t0 + 2.75}],
                        "toolcall": [{"start_ts": t0 + 1.0, "end_ts": t0 + 1.5}],
                    },
                }
            )
            session += 1
    return jsonl(rows)


def _attr(key: str, value) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def otlp_request(worker: str = "worker-0", steps: int = 2, unstepped: bool = True) -> dict:
    """One ExportTraceServiceRequest in OTLP/JSON, spans as RL-Insight reports them."""
    spans = []
    t = 1_700_000_000_000_000_000
    for s in range(steps):
        spans.append(
            {
                "traceId": "5b8efff798038103d269b633813fc60c",
                "spanId": f"eee19b7ec3c1b17{s}",
                "name": "trace_state",
                "kind": 1,
                "startTimeUnixNano": str(t),
                "endTimeUnixNano": str(t + 3_000_000_000),
                "attributes": [_attr("state", "rollout"), _attr("step", s)],
            }
        )
        spans.append(
            {
                "name": "generate_sequences",
                "startTimeUnixNano": str(t),
                "endTimeUnixNano": str(t + 2_500_000_000),
                "attributes": [_attr("step", s), _attr("rl_insight.type", "op")],
            }
        )
        t += 4_000_000_000
    if unstepped:
        spans.append({"name": "setup", "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 10), "attributes": []})
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", "verl"), _attr("service.instance.id", worker)]},
                "scopeSpans": [{"scope": {"name": "rl_insight"}, "spans": spans}],
            }
        ]
    }


def kineto_rank_trace(
    rank: int, steps: int = 3, ops_per_step: int = 40, seed: int = 0, bad_event: bool = False
) -> bytes:
    """One rank's PyTorch-profiler trace with every event kind the reader keeps:
    ProfilerStep annotations, cpu_ops each launching a kernel (compute, NCCL or a copy,
    with its size and bandwidth) through a cuda_runtime call, ac2g flow arrows, a GPU user
    annotation and the process / thread metadata events. `bad_event`: one kernel has a
    negative duration (the reader refuses it, naming the event)."""
    rng = np.random.default_rng(seed * 100 + rank)
    pid, tid, events = 100 + rank, 200 + rank, []
    events += [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"rank {rank}"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]
    t, corr = 1000.0, 1
    for step in range(steps):
        start = t
        for op in range(ops_per_step):
            kind = op % 5
            name, cat, stream, extra = "sm90_gemm_bf16", "kernel", 7, {}
            if kind == 3:
                name, stream = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 9
            elif kind == 4:
                name, cat, stream = "Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 11
                extra = {"bytes": 4096, "memory bandwidth (GB/s)": 12.5}
            dur = float(rng.integers(5, 50))
            events += [
                {"ph": "X", "cat": "cpu_op", "name": f"aten::op{kind}", "pid": pid, "tid": tid, "ts": t, "dur": 6.0},
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": pid,
                    "tid": tid,
                    "ts": t + 1,
                    "dur": 3.0,
                    "args": {"correlation": corr, "External id": corr},
                },
                {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": pid, "tid": tid, "ts": t + 1},
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": t + 20,
                    "dur": -1.0 if bad_event and op == 7 else dur,
                    "args": {"device": 0, "stream": stream, "correlation": corr, "External id": corr, **extra},
                },
                {
                    "ph": "f",
                    "cat": "ac2g",
                    "name": "ac2g",
                    "id": corr,
                    "pid": 0,
                    "tid": stream,
                    "ts": t + 20,
                    "bp": "e",
                },
            ]
            t += dur + float(rng.integers(1, 10))
            corr += 1
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": pid,
                "tid": tid,
                "ts": start,
                "dur": t - start,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "forward",
                "pid": 0,
                "tid": 7,
                "ts": start + 20,
                "dur": (t - start) / 2,
            }
        )
        t += 100.0
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 4}, "traceEvents": events}
    return orjson.dumps(doc)
