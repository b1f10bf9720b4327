"""Synthetic GPU activity written two ways: as an Nsight Systems SQLite export (the tables
and columns of NVIDIA's documented export schema, "SQLite Export Schema Reference", as
nsys 2024-2025 creates them) and as the PyTorch profiler's Kineto JSON, so the two
readers can be checked against each other on the same events.

Times are integer nanoseconds from the session start. A rank's events: ProfilerStep#N
NVTX ranges (user annotations in Kineto), one CUDA runtime call per GPU event (its
launch; correlation ids restart at 1 in every process, as CUPTI numbers them), compute
kernels, NCCL kernels on another stream, memcpy and memset with bytes, and a "forward"
range inside every step.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

SESSION_START_NS = 1_767_718_840_395_831_670  # 2026-01-06, as TARGET_INFO_SESSION_START_TIME has it
EPOCH_NS = 1_577_836_800 * 10**9  # the reader's epoch (2020-01-01 UTC)

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
    cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
    gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
    staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
    localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
    sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER,
    srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER,
    graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER,
    color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER,
    uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
    floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT NOT NULL);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
"""
MEMCPY_OPER = [(1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host")]
MEM_KIND = [(0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned")]
MEM_KIND += [(2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device")]


@dataclass
class GpuOp:
    kind: str  # kernel, memcpy, memset
    name: str  # the kernel name; memcpy / memset get Kineto's names from their kinds
    stream: int
    start: int  # ns
    end: int
    launch: int  # start of the runtime call (ns)
    corr: int
    bytes: int = 0


@dataclass
class RankActivity:
    rank: int
    device: int
    pid: int
    tid: int
    ops: list[GpuOp] = field(default_factory=list)
    ranges: list[tuple[str, int, int]] = field(default_factory=list)  # NVTX (text, start, end)


def synthetic_activity(rank: int, steps: int = 3, ops_per_step: int = 30, seed: int = 0, device=None) -> RankActivity:
    """One rank's activity: streams overlap each other, a stream's work follows in
    order; gaps of every kind and sub-microsecond times on purpose."""
    rng = np.random.default_rng(seed * 100 + rank)
    act = RankActivity(rank=rank, device=rank if device is None else device, pid=4000 + rank, tid=4000 + rank)
    t, corr = 5_000_123, 1
    free: dict[int, int] = {}
    for step in range(steps):
        start = t
        for op in range(ops_per_step):
            kind, name, stream, size = "kernel", "void sm90_gemm_bf16_kernel(float*)", 7, 0
            if op % 6 == 3:
                name, stream = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)", 13
            elif op % 6 == 4:
                kind, stream, size = "memcpy", 11, int(rng.integers(1, 64)) * 4096
            elif op % 6 == 5:
                kind, stream, size = "memset", 7, 8192
            launch = t + int(rng.integers(100, 900))
            # a stream runs its work in order: a kernel waits for the one before it
            wait = int(rng.integers(40_000, 80_000)) if op % 7 == 6 else int(rng.integers(0, 3_000))  # e.g. on an event
            begin = max(launch + int(rng.integers(2_000, 9_000)), free.get(stream, 0) + wait)
            end = begin + int(rng.integers(1_500, 40_000))
            free[stream] = end
            act.ops.append(GpuOp(kind, name, stream, begin, end, launch, corr, size))
            t = launch + int(rng.integers(3_000, 30_000))
            corr += 1
        act.ranges.append((f"ProfilerStep#{step}", start, t))
        act.ranges.append(("forward", start + 10, start + (t - start) // 2))
        t += int(rng.integers(50_000, 200_000))
    return act


LAUNCH_NAME = {"kernel": "cudaLaunchKernel_v7000", "memcpy": "cudaMemcpyAsync_v3020", "memset": "cudaMemsetAsync_v3020"}
COPY_NAME = "Memcpy HtoD (Pinned -> Device)"
SET_NAME = "Memset (Device)"


def _global_pid(pid: int) -> int:
    return (1 << 48) | (pid << 24)


# launch configuration and memory columns of a kernel row after its name ids
KERNEL_REST = (None, 1, 0, 32, 128, 1, 1, 256, 1, 1, 0, 0, 0, 0, 1, 0, None, 0)


def _write_op(db: sqlite3.Connection, act: RankActivity, op: GpuOp, sid) -> None:
    gpid = _global_pid(act.pid)
    db.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
        (op.launch, op.launch + 1_800, gpid | act.tid, op.corr, sid(LAUNCH_NAME[op.kind])),
    )
    ids = (op.start, op.end, act.device, 1, None, op.stream, op.corr, gpid)
    if op.kind == "kernel":
        row = (*ids, sid(op.name), sid(op.name.split("(")[0]), *KERNEL_REST)
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + ", ".join("?" * 28) + ")", row)
    elif op.kind == "memcpy":
        row = (*ids, op.bytes, 1, None, 1, 2, None, None, None, None, None, None, None, 1)
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (" + ", ".join("?" * 21) + ")", row)
    else:
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, NULL, 2)", (*ids, op.bytes)
        )


def _write_rank(db: sqlite3.Connection, act: RankActivity, sid) -> None:
    for op in act.ops:
        _write_op(db, act, op, sid)
    for i, (text, start, end) in enumerate(act.ranges):
        # registered strings (textId) and plain text both occur in real exports
        text_col, text_id = (None, sid(text)) if i % 2 else (text, None)
        db.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?, ?, 59, ?, ?, ?)",
            (start, end, text_col, _global_pid(act.pid) | act.tid, text_id),
        )
    db.execute("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, ?)", (1 << 48, act.device, "NVIDIA H100 80GB HBM3", "0"))


def write_nsys(path: Path, ranks: list[RankActivity], *, session_start: int | None = SESSION_START_NS) -> Path:
    """An export holding these ranks' processes and devices."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    strings: dict[str, int] = {}

    def sid(value: str) -> int:
        if value not in strings:
            strings[value] = len(strings) + 1
            db.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[value], value))
        return strings[value]

    for act in ranks:
        _write_rank(db, act, sid)
    db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (1, NULL, 34, 'a mark', 1)")
    if session_start is not None:
        db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (session_start,))
    db.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", MEMCPY_OPER)
    db.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", MEM_KIND)
    db.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [("EXPORT_SCHEMA_VERSION", "3.24.0")])
    db.commit()
    db.close()
    return path


def kineto_us(ns: int, session_start: int = SESSION_START_NS) -> float:
    """The microseconds the nsys reader stores for a session time (Python's int division
    rounds once, as the reader does)."""
    return (ns + session_start - EPOCH_NS) / 1000


def kineto_doc(act: RankActivity, world_size: int = 2) -> bytes:
    """The same activity as one rank's PyTorch-profiler trace."""
    events: list[dict] = []
    for op in act.ops:
        args = {"correlation": op.corr, "External id": op.corr}
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": LAUNCH_NAME[op.kind].rsplit("_v", 1)[0],
                "pid": act.pid,
                "tid": act.tid,
                "ts": kineto_us(op.launch),
                "dur": 1.8,
                "args": args,
            }
        )
        name = {"kernel": op.name, "memcpy": COPY_NAME, "memset": SET_NAME}[op.kind]
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[op.kind]
        gpu_args = {**args, "device": act.device, "stream": op.stream}
        if op.kind != "kernel":
            gpu_args["bytes"] = op.bytes
            gpu_args["memory bandwidth (GB/s)"] = op.bytes / (op.end - op.start)
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": act.device,
                "tid": op.stream,
                "ts": kineto_us(op.start),
                "dur": (op.end - op.start) / 1000,
                "args": gpu_args,
            }
        )
    for text, start, end in act.ranges:
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": text,
                "pid": act.pid,
                "tid": act.tid,
                "ts": kineto_us(start),
                "dur": (end - start) / 1000,
            }
        )
        # Kineto's mirror on the GPU: the span of the work launched inside the range
        inside = [op for op in act.ops if start <= op.launch < end]
        if inside:
            first = min(inside, key=lambda op: op.launch)
            lo, hi = min(op.start for op in inside), max(op.end for op in inside)
            events.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": text,
                    "pid": act.device,
                    "tid": first.stream,
                    "ts": kineto_us(lo),
                    "dur": (hi - lo) / 1000,
                    "args": {"device": act.device, "stream": first.stream},
                }
            )
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": act.rank, "world_size": world_size}, "traceEvents": events}
    return orjson.dumps(doc)
