"""Benchmark: our Kineto import + GPU timeline analyses versus Holistic Trace Analysis.

For each Kineto fixture (../shared/fixtures/kineto; sampled_rank-0/1 form one 2-rank job)
and a generated multi-rank trace of >= 1M GPU events, time

  ours: read_kineto over every rank file (decompression included) + temporal_breakdown
        + idle_breakdown (all ranks);
  HTA:  TraceAnalysis(trace_dir) (parse + align + filter) + get_temporal_breakdown
        + get_idle_time_breakdown(ranks=all), HolisticTraceAnalysis 0.5.0 in its own venv
        (bench/out/hta-venv, created on first run), run in a subprocess that prints JSON;

then print both timings, the speed ratio and, per rank, the difference in idle %,
compute % and non-compute % (target <= 0.5 pp), plus the largest difference in the
idle-breakdown shares (host wait / kernel wait / other, per stream). Also per job:

  end to end: `rlvr-explorer ingest FILES` (a subprocess: decode, gpu_events rows into
        the embedded SQLite store, every event kept as columns, the analysis job queued)
        then the queued gpu_timeline job run by the worker's runner
        (`workers.runners.analyses.plan_and_run`, a second subprocess: read the store,
        every GPU analysis, result stored) -- wall and CPU time of both, the peak memory
        of each (all its processes: the ingest forks readers), against HTA's load +
        temporal + idle (target 20x) and HTA's peak memory (with its parsing pool);
  in-process: the reader + temporal + idle above (target 50x), its decode rate (MB/s of
        uncompressed JSON) and this process's peak RSS;
  floor: msgspec's typed decode alone of the fields the breakdowns need (MB/s of CPU
        time), and HTA's CPU time over it: the ceiling of the CPU-time ratio for any
        reader that decodes with msgspec.
Memory of a process tree is the peak of its summed Pss (a page shared after a fork counts
once), sampled every 50 ms.

    .venv/bin/python bench/kineto.py            # fixtures + generated 1M-event trace
    .venv/bin/python bench/kineto.py --quick    # fixtures only

Generated traces go to bench/out/ (gitignored); HTA needs one folder per job, one file
per rank, so the fixtures are symlinked into bench/out/hta-dirs/.

This file is also the HTA worker: `<hta-venv python> bench/kineto.py --hta-worker DIR`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
FIXTURES = ROOT.parent / "shared" / "fixtures" / "kineto"
HTA_VENV = OUT / "hta-venv"
HTA_PYTHON = HTA_VENV / "bin" / "python"
HTA_REQUIREMENTS = ["HolisticTraceAnalysis==0.5.0", "pandas<3"]

FIXTURE_JOBS = {
    "sampled (2 ranks)": ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"],
    "ns_resolution": ["ns_resolution_rank-0.json.gz"],
    "queue_length": ["queue_length_rank-0.json.gz"],
}
GENERATED = {"ranks": 8, "steps": 12, "gpu_events_per_rank": 131_072, "seed": 7, "format": 2}


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (worker pools), user + system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def peak_rss_mb() -> float:
    """This process's peak resident memory since start or the last `reset_peak_rss()`
    (Linux VmHWM: per address space, so neither a parent's pages nor an earlier
    measurement leak into it, as they do into getrusage's ru_maxrss)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _tree_pss_mb(pid: int) -> float:
    """Memory of a process and all its descendants now: the sum of their Pss (a page
    shared by n processes, e.g. after a fork, counts 1/n in each), in MB."""
    todo, total = [pid], 0
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration, ValueError):
            pass  # the process ended meanwhile
    return total / 1024


def run_sampled(cmd: list[str], **kwargs) -> tuple[str, float]:
    """Run `cmd` to completion (check=True); (its stdout, the peak of its process tree's
    memory, sampled every 50 ms)."""
    import threading

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _tree_pss_mb(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{err[-4000:]}")
    return out, peak[0]


# --- HTA side (runs inside the HTA venv) ----------------------------------------------


def hta_worker(trace_dir: str) -> None:
    """Run HTA on one folder and print timings and results as JSON on stdout."""
    import logging

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    c0, t0 = cpu_seconds(), time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=trace_dir)
    t1 = time.perf_counter()
    temporal = analyzer.get_temporal_breakdown(visualize=False)
    t2 = time.perf_counter()
    ranks = analyzer.t.get_ranks()
    idle, _ = analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False)
    t3, c3 = time.perf_counter(), cpu_seconds()
    unit = next(c for c in temporal.columns if c.startswith("kernel_time(")).split("(")[1].rstrip(")")
    print(
        json.dumps(
            {
                "seconds": {"parse": t1 - t0, "temporal": t2 - t1, "idle": t3 - t2, "total": t3 - t0, "cpu": c3 - c0},
                "temporal": [
                    {
                        "rank": int(r["rank"]),
                        "kernel_time": float(r[f"kernel_time({unit})"]),
                        "idle_pct": float(r["idle_time_pctg"]),
                        "compute_pct": float(r["compute_time_pctg"]),
                        "non_compute_pct": float(r["non_compute_time_pctg"]),
                    }
                    for _, r in temporal.iterrows()
                ],
                "idle": [
                    {
                        "rank": int(r["rank"]),
                        "stream": int(r["stream"]),
                        "category": str(r["idle_category"]),
                        "idle_time": float(r["idle_time"]),
                        "ratio": float(r["idle_time_ratio"]),
                    }
                    for _, r in idle.iterrows()
                ],
            }
        )
    )


def ensure_hta_venv() -> None:
    if HTA_PYTHON.exists():
        probe = subprocess.run([str(HTA_PYTHON), "-c", "import hta, pandas"], capture_output=True)
        if probe.returncode == 0:
            return
    print(f"installing HolisticTraceAnalysis 0.5.0 into {HTA_VENV} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
    subprocess.run([str(HTA_PYTHON), "-m", "pip", "install", "-q", *HTA_REQUIREMENTS], check=True)


def run_hta(trace_dir: Path) -> dict:
    c0 = os.times()
    stdout, peak = run_sampled([str(HTA_PYTHON), str(Path(__file__).resolve()), "--hta-worker", str(trace_dir)])
    c1 = os.times()
    out = json.loads(stdout.strip().splitlines()[-1])
    out["peak_mb"] = peak  # its whole process tree's, parsing pool included
    # HTA parses ranks in a multiprocessing pool whose workers its own os.times() may not
    # count; the CPU of the whole subprocess tree, seen from here, is the honest figure
    # (it also includes HTA's imports, which the inner timer leaves out)
    outer = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    out["seconds"]["cpu_inner"] = out["seconds"]["cpu"]
    out["seconds"]["cpu"] = max(out["seconds"]["cpu"], outer)
    return out


# --- our side --------------------------------------------------------------------------


def read_one(path: Path) -> tuple[dict, dict]:
    """Read one rank file with our reader: (columns, metadata["kineto"])."""
    from backend.formats.base import ReadResult, Source
    from backend.formats.kineto import read_kineto

    opener = (lambda: gzip.open(path, "rb")) if path.suffix == ".gz" else (lambda: open(path, "rb"))
    result = ReadResult()
    parts: dict[str, list] = {}
    for batch in read_kineto(Source(path.name, opener, path.stat().st_size), result):
        for key, values in batch.columns.items():
            parts.setdefault(key, []).append(values)
    return parts, result.info.metadata.get("kineto", {})


def run_ours(files: list[Path], processes: int = 1) -> dict:
    """Import every file (in `processes` worker processes, one file per task, as HTA
    parses ranks in parallel), then the temporal and idle breakdowns of all ranks."""
    import numpy as np

    from core.analysis.gpu_timeline import idle_breakdown, temporal_breakdown

    reset_peak_rss()
    c0, t0 = cpu_seconds(), time.perf_counter()
    if processes > 1 and len(files) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as pool:
            per_file = list(pool.map(read_one, files))
    else:
        per_file = [read_one(path) for path in files]
    parts: dict[str, list] = {}
    windows: dict = {}
    for file_parts, meta in per_file:
        for key, chunks in file_parts.items():
            parts.setdefault(key, []).extend(chunks)
        windows.update(meta.get("steps", {}))
    events = {k: ([x for chunk in v for x in chunk] if k == "name" else np.concatenate(v)) for k, v in parts.items()}
    t1 = time.perf_counter()
    temporal = temporal_breakdown(events, windows)
    t2 = time.perf_counter()
    idle = idle_breakdown(events, windows)
    t3, c3 = time.perf_counter(), cpu_seconds()
    return {
        "seconds": {"read": t1 - t0, "temporal": t2 - t1, "idle": t3 - t2, "total": t3 - t0, "cpu": c3 - c0},
        "n_events": int(len(events["rank"])),
        "peak_rss_mb": peak_rss_mb(),  # this process's (the readers' pool, if any, not counted)
        "temporal": temporal,
        "idle": idle,
    }


def decode_floor_cpu(files: list[Path]) -> float:
    """CPU seconds msgspec takes only to decode the files into structs holding the fields
    the temporal and idle breakdowns need (no column built, no other field): the least
    any reader decoding with it spends. The bytes are read before the clock starts."""
    import msgspec

    # defstruct: this module's annotations are strings, which local classes cannot resolve
    args = msgspec.defstruct("Args", [(k, int | None, None) for k in ("stream", "device", "correlation")], gc=False)
    fields = [("cat", str | None, None), ("name", str | None, None), ("ts", float | None, None)]
    event = msgspec.defstruct("Event", [*fields, ("dur", float | None, None), ("args", args | None, None)], gc=False)
    decoder = msgspec.json.Decoder(msgspec.defstruct("Document", [("traceEvents", list[event], [])]))
    cpu = 0.0
    for path in files:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        c0 = time.process_time()
        decoder.decode(raw)
        cpu += time.process_time() - c0
    return cpu


def compare(ours: dict, hta: dict) -> dict:
    """Per-rank percentage differences and the largest idle-share difference (pp)."""
    t = ours["temporal"]
    by_rank = {int(r): i for i, r in enumerate(t["rank"])}
    rows = []
    for h in hta["temporal"]:
        i = by_rank[h["rank"]]
        rows.append(
            {
                "rank": h["rank"],
                "idle_pct": (float(t["idle_pct"][i]), h["idle_pct"]),
                "compute_pct": (float(t["compute_pct"][i]), h["compute_pct"]),
                "non_compute_pct": (float(t["non_compute_pct"][i]), h["non_compute_pct"]),
            }
        )
    idle = ours["idle"]
    ours_ratio = {}
    for i in range(len(idle["rank"])):
        key = (int(idle["rank"][i]), int(idle["stream"][i]))
        for cat in ("host_wait", "kernel_wait", "other"):
            ours_ratio[key + (cat,)] = float(idle[f"{cat}_ratio"][i])
    # HTA rounds its ratios to 2 decimals (1 pp steps), so shares are recomputed from its
    # idle times (rounded to 0.01 us only).
    hta_total: dict[tuple, float] = {}
    for h in hta["idle"]:
        key = (h["rank"], h["stream"])
        hta_total[key] = hta_total.get(key, 0.0) + (h["idle_time"] if h["idle_time"] == h["idle_time"] else 0.0)
    worst = 0.0
    for h in hta["idle"]:
        total = hta_total[(h["rank"], h["stream"])]
        if not total or h["idle_time"] != h["idle_time"]:
            continue  # a stream without gaps
        mine = ours_ratio.get((h["rank"], h["stream"], h["category"]), 0.0)
        worst = max(worst, abs(100 * mine - 100 * h["idle_time"] / total))
    return {"ranks": rows, "idle_share_max_diff_pp": worst}


# --- end to end: CLI ingest, then the worker's runner on the queued job ---------------------

_JOBS = """
import json, sys, time
from sqlalchemy import select
from backend.store.db import new_session
from backend.store.models import Job
with new_session() as s:
    ids = [j.id for j in s.scalars(select(Job).where(Job.kind != "ingest").order_by(Job.id))]
"""
# the analysis jobs' outcome, as JSON on the last line
JOB_STATUS = (
    _JOBS
    + """
with new_session() as s:
    jobs = list(s.scalars(select(Job).where(Job.id.in_(ids))))
    out = {j.kind: {"status": j.status, "keys": sorted((j.result or {}).keys()), "error": j.error} for j in jobs}
print(json.dumps(out))
"""
)
# the queued analysis jobs run as the worker's runner runs them, then JOB_STATUS
RUN_QUEUED = (
    _JOBS
    + """
from workers.runners.analyses import plan_and_run
plan_and_run(ids, send_part=lambda *a, **k: None)
"""
    + JOB_STATUS.removeprefix(_JOBS)
)


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def run_end_to_end(files: list[Path]) -> dict:
    """`rlvr-explorer ingest FILES` then the queued analyses, in fresh subprocesses on a
    scratch embedded store; wall / CPU seconds of each and the peak memory of each one's
    processes together (the ingest forks readers)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kineto-e2e-") as tmp:
        env = {**os.environ, "RLVR_DATA_DIR": str(Path(tmp) / "data"), "PYTHONPATH": str(ROOT)}
        env.pop("RLVR_DATABASE_URL", None)
        env.pop("DATABASE_URL", None)
        # the schema is made once per install (not timed)
        subprocess.run(
            [sys.executable, "-m", "rlvr_explorer", "migrate"], env=env, cwd=tmp, check=True, capture_output=True
        )
        c0, t0 = _children_cpu(), time.perf_counter()
        summary, ingest_peak = run_sampled(
            [sys.executable, "-m", "rlvr_explorer", "ingest", "--json", *map(str, files)], env=env, cwd=tmp
        )
        t1, c1 = time.perf_counter(), _children_cpu()
        # a small trace's analyses ran in the ingest's own process (no second process)
        here = "gpu_timeline" in json.loads(summary.strip().splitlines()[-1]).get("analysed_here", [])
        analyses_peak = 0.0
        if not here:
            out, analyses_peak = run_sampled([sys.executable, "-c", RUN_QUEUED], env=env, cwd=tmp)
        t2, c2 = time.perf_counter(), _children_cpu()
        if here:  # checked outside the timed span: the stored result is there
            out, _ = run_sampled([sys.executable, "-c", JOB_STATUS], env=env, cwd=tmp)
        jobs = json.loads(out.strip().splitlines()[-1])
        kept = sum(f.stat().st_size for f in (Path(tmp) / "data" / "kineto").rglob("*") if f.is_file())
    gpu = jobs.get("gpu_timeline", {})
    if gpu.get("status") != "succeeded":
        raise RuntimeError(f"gpu_timeline job did not succeed: {gpu}")
    return {
        "in_ingest_process": here,
        "seconds": {"ingest": t1 - t0, "analyses": t2 - t1, "total": t2 - t0},
        "cpu": {"ingest": c1 - c0, "analyses": c2 - c1, "total": c2 - c0},
        "peak_mb": {"ingest": ingest_peak, "analyses": analyses_peak},
        "result_fields": gpu.get("keys"),
        "kept_events_mb": kept / 1e6,
    }


def uncompressed_mb(files: list[Path]) -> float:
    total = 0
    for f in files:
        if f.suffix == ".gz":
            with gzip.open(f, "rb") as fh:
                while chunk := fh.read(1 << 24):
                    total += len(chunk)
        else:
            total += f.stat().st_size
    return total / 1e6


# --- generated multi-rank trace --------------------------------------------------------

COMPUTE_KERNELS = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >(flash::Flash_fwd_params)",
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t> >(flash::Flash_bwd_params)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)",
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, float, float, float, float, adamMode_t, float, int, int, int>(int, int volatile*, TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, float, float, float, float, adamMode_t, float, int, int, int)",
]
COMPUTE_OPS = [
    "aten::add",
    "aten::mm",
    "aten::_flash_attention_forward",
    "aten::_flash_attention_backward",
    "aten::_softmax",
    "triton_red_fused",
    "aten::sum",
    "Optimizer.step#AdamW.step",
]
NCCL_KERNELS = [
    "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
]
MEMCPY_NAMES = ["Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoD (Device -> Device)"]
STREAM_COMPUTE, STREAM_COPY, STREAM_NCCL = 7, 13, 20


def generate_rank_trace(path: Path, rank: int, world: int, steps: int, n_gpu: int, seed: int) -> None:
    """Write one rank's Kineto trace: per step a ProfilerStep#N annotation, a data-loading
    pause, then ops (cpu_op with record_shapes args) that each launch one GPU event through
    a cuda_runtime call (correlation ids, ac2g flow arrows), on a compute, a copy and an
    NCCL stream (collectives wait for the compute stream), closed by cudaDeviceSynchronize;
    the last rank's compute kernels run 15 % longer (a straggler)."""
    import numpy as np
    import orjson

    rng = np.random.default_rng(seed * 1000 + rank)
    pid, tid, device = 1000 + rank, 1000 + rank, rank % 8
    per_step = n_gpu // steps
    counts = [per_step + (1 if i < n_gpu - per_step * steps else 0) for i in range(steps)]
    # Event type per launch: 0 compute, 1 memcpy, 2 memset, 3 nccl.
    kinds = rng.choice(4, size=n_gpu, p=[0.86, 0.05, 0.01, 0.08])
    durs = np.where(kinds == 0, rng.lognormal(2.6, 1.1, n_gpu), 0.0)
    durs = np.where(kinds == 1, rng.lognormal(1.5, 0.8, n_gpu), durs)
    durs = np.where(kinds == 2, rng.uniform(1, 4, n_gpu), durs)
    durs = np.where(kinds == 3, rng.lognormal(4.2, 0.9, n_gpu), durs)
    durs = np.maximum(1, np.round(durs)).astype(np.int64)
    host_gap = rng.choice([4, 6, 9, 25, 120], size=n_gpu, p=[0.5, 0.3, 0.15, 0.04, 0.01])
    which = rng.integers(0, len(COMPUTE_KERNELS), n_gpu)
    which_nccl = rng.integers(0, len(NCCL_KERNELS), n_gpu)
    which_copy = rng.integers(0, len(MEMCPY_NAMES), n_gpu)
    slow_rank = 1.0 + (0.15 if rank == world - 1 else 0.0)  # one straggler rank

    events: list[bytes] = [
        orjson.dumps({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"python {pid}"}}),
        orjson.dumps(
            {"ph": "M", "name": "process_labels", "pid": device, "tid": 0, "args": {"labels": f"GPU {device}"}}
        ),
        orjson.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "thread 1 (python)"}}),
    ]
    dumps = orjson.dumps
    t_cpu = 1_700_000_000_000_000 + rank * 37
    free = {STREAM_COMPUTE: t_cpu, STREAM_COPY: t_cpu, STREAM_NCCL: t_cpu}
    corr = 1
    i = 0
    for step in range(steps):
        step_start = t_cpu
        t_cpu += int(rng.integers(800, 3000))  # data loading: the GPU waits for the host
        for _ in range(counts[step]):
            kind = kinds[i]
            t_cpu += int(host_gap[i])
            op_dur = 14
            if kind == 3:
                stream, cat = STREAM_NCCL, "kernel"
                name, op, rt = NCCL_KERNELS[which_nccl[i]], "nccl:all_gather", "cudaLaunchKernel"
            elif kind == 1:
                stream, cat = STREAM_COPY, "gpu_memcpy"
                name, op, rt = MEMCPY_NAMES[which_copy[i]], "aten::copy_", "cudaMemcpyAsync"
            elif kind == 2:
                stream, cat = STREAM_COMPUTE, "gpu_memset"
                name, op, rt = "Memset (Device)", "aten::zero_", "cudaMemsetAsync"
            else:
                stream, cat = STREAM_COMPUTE, "kernel"
                name, op, rt = COMPUTE_KERNELS[which[i]], COMPUTE_OPS[which[i]], "cudaLaunchKernel"
            launch = t_cpu + 3
            dur = int(durs[i] * slow_rank) if kind == 0 else int(durs[i])
            ready = launch + 5
            if kind == 3:  # collectives wait for the compute stream's work so far
                ready = max(ready, free[STREAM_COMPUTE])
            start = max(ready, free[stream])
            free[stream] = start + dur
            # record_shapes-style op args and ac2g flow arrows, as real profiler traces have
            events.append(
                dumps(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": op,
                        "pid": pid,
                        "tid": tid,
                        "ts": t_cpu,
                        "dur": op_dur,
                        "args": {
                            "External id": corr,
                            "Ev Idx": corr - 1,
                            "Input Dims": [[8, 4096, 1024], [1024, 1024], []],
                            "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"],
                        },
                    }
                )
            )
            events.append(
                dumps(
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": rt,
                        "pid": pid,
                        "tid": tid,
                        "ts": launch,
                        "dur": 6,
                        "args": {"External id": corr, "cbid": 211, "correlation": corr},
                    }
                )
            )
            events.append(
                dumps({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": launch, "cat": "ac2g", "name": "ac2g"})
            )
            args = {
                "External id": corr,
                "queued": 0,
                "device": device,
                "context": 1,
                "stream": stream,
                "correlation": corr,
            }
            if cat == "kernel":
                args.update({"registers per thread": 32, "shared memory": 0, "grid": [128, 1, 1], "block": [256, 1, 1]})
            else:
                args["bytes"] = int(dur * 4096)
            events.append(
                dumps(
                    {
                        "ph": "X",
                        "cat": cat,
                        "name": name,
                        "pid": device,
                        "tid": stream,
                        "ts": start,
                        "dur": dur,
                        "args": args,
                    }
                )
            )
            events.append(
                dumps(
                    {
                        "ph": "f",
                        "id": corr,
                        "pid": device,
                        "tid": stream,
                        "ts": start,
                        "cat": "ac2g",
                        "name": "ac2g",
                        "bp": "e",
                    }
                )
            )
            t_cpu += op_dur
            corr += 1
            i += 1
        # the host blocks until the device drains, then the step ends
        sync_start = t_cpu + 2
        t_cpu = max(sync_start + 3, max(free.values()) + 2)
        events.append(
            dumps(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaDeviceSynchronize",
                    "pid": pid,
                    "tid": tid,
                    "ts": sync_start,
                    "dur": t_cpu - sync_start,
                    "args": {"cbid": 165, "correlation": corr},
                }
            )
        )
        corr += 1
        t_cpu += 5
        events.append(
            dumps(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{100 + step}",
                    "pid": pid,
                    "tid": tid,
                    "ts": step_start,
                    "dur": t_cpu - step_start,
                    "args": {"External id": corr},
                }
            )
        )
        t_cpu += 20
    head = (
        f'{{\n  "schemaVersion": 1,\n  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}}},\n'
        f'  "deviceProperties": [{{"id": {device}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045379072}}],\n'
        '  "traceEvents": [\n'
    ).encode()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(head)
        fh.write(b",\n".join(events))
        fh.write(b'\n  ],\n  "displayTimeUnit": "ms"\n}\n')
    tmp.replace(path)


def generated_job(spec: dict) -> Path:
    folder = OUT / "generated_{ranks}r_{gpu_events_per_rank}".format(**spec)
    marker = folder / "params.txt"
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(spec["ranks"]):
        print(f"  generating rank {rank} ...", flush=True)
        generate_rank_trace(
            folder / f"rank-{rank}.json", rank, spec["ranks"], spec["steps"], spec["gpu_events_per_rank"], spec["seed"]
        )
    marker.write_text(json.dumps(spec))
    return folder


def fixture_job(label: str, names: list[str]) -> Path:
    folder = OUT / "hta-dirs" / label.split(" ")[0]
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        link = folder / name
        if not link.exists():
            link.symlink_to(FIXTURES / name)
    return folder


# --- report ----------------------------------------------------------------------------


def report(label: str, ours: dict, ours_parallel: dict | None, hta: dict) -> dict:
    cmp = compare(ours, hta)
    o, h = ours["seconds"], hta["seconds"]
    ratio = h["total"] / o["total"]
    print(f"\n== {label}: {ours['n_events']:,} GPU events")
    print(
        f"  ours : read {o['read']:.3f}s  temporal {o['temporal']:.4f}s  idle {o['idle']:.4f}s  total {o['total']:.3f}s"
        f"  cpu {o['cpu']:.2f}s  (1 process)"
    )
    ratio_par = None
    if ours_parallel is not None:
        p = ours_parallel["seconds"]
        ratio_par = h["total"] / p["total"]
        print(
            f"  ours : read {p['read']:.3f}s  temporal {p['temporal']:.4f}s  idle {p['idle']:.4f}s  total {p['total']:.3f}s"
            f"  cpu {p['cpu']:.2f}s  (2 processes)"
        )
    print(
        f"  HTA  : parse {h['parse']:.3f}s  temporal {h['temporal']:.4f}s  idle {h['idle']:.4f}s  total {h['total']:.3f}s"
        f"  cpu {h['cpu']:.2f}s"
    )
    print(f"  speed-up: {ratio:.1f}x" + (f" (1 process), {ratio_par:.1f}x (2 processes)" if ratio_par else ""))
    worst = 0.0
    for row in cmp["ranks"]:
        diffs = {k: row[k][0] - row[k][1] for k in ("idle_pct", "compute_pct", "non_compute_pct")}
        worst = max(worst, *(abs(v) for v in diffs.values()))
        print(
            f"  rank {row['rank']}: idle {row['idle_pct'][0]:.2f}% vs {row['idle_pct'][1]:.2f}% "
            f"(diff {diffs['idle_pct']:+.2f} pp); compute {row['compute_pct'][0]:.2f}% vs "
            f"{row['compute_pct'][1]:.2f}% ({diffs['compute_pct']:+.2f} pp); non-compute "
            f"{row['non_compute_pct'][0]:.2f}% vs {row['non_compute_pct'][1]:.2f}% ({diffs['non_compute_pct']:+.2f} pp)"
        )
    print(f"  idle breakdown: largest share difference {cmp['idle_share_max_diff_pp']:.2f} pp")
    cpu_ratio = h["cpu"] / o["cpu"] if o["cpu"] else float("inf")
    print(f"  CPU-time ratio (robust to other load on the machine): {cpu_ratio:.1f}x")
    return {
        "label": label,
        "ratio": ratio,
        "ratio_par": ratio_par,
        "cpu_ratio": cpu_ratio,
        "worst_pp": worst,
        "idle_pp": cmp["idle_share_max_diff_pp"],
        "ours_s": o["total"],
        "ours_par_s": ours_parallel["seconds"]["total"] if ours_parallel else None,
        "hta_s": h["total"],
        "events": ours["n_events"],
    }


def mean_of(runs: list[dict]) -> dict:
    """The first run's results with its timings ("seconds", "cpu") replaced by the mean
    over all runs and its memory figures by the largest."""
    out = dict(runs[0])
    for key in ("seconds", "cpu"):
        if isinstance(out.get(key), dict):
            out[key] = {k: sum(r[key][k] for r in runs) / len(runs) for k in out[key]}
    for key in ("peak_mb", "peak_rss_mb"):
        if isinstance(out.get(key), dict):
            out[key] = {k: max(r[key][k] for r in runs) for k in out[key]}
        elif key in out:
            out[key] = max(r[key] for r in runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the generated 1M-event trace")
    parser.add_argument("--hta-worker", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--no-parallel", action="store_true", help="skip the 2-process reader run")
    args = parser.parse_args()
    if args.hta_worker:
        hta_worker(args.hta_worker)
        return

    sys.path.insert(0, str(ROOT))
    OUT.mkdir(parents=True, exist_ok=True)
    ensure_hta_venv()
    jobs: list[tuple[str, Path]] = []
    if FIXTURES.is_dir():
        jobs += [(label, fixture_job(label, names)) for label, names in FIXTURE_JOBS.items()]
    else:
        print(f"fixtures not found at {FIXTURES}; only the generated trace is measured")
    if not args.quick:
        print("generated trace: {ranks} ranks x {gpu_events_per_rank:,} GPU events".format(**GENERATED), flush=True)
        jobs.append((f"generated ({GENERATED['ranks']} ranks)", generated_job(GENERATED)))

    summary = []
    e2e_rows = []
    for label, folder in jobs:
        files = sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
        repeats = 3 if sum(p.stat().st_size for p in files) < 50e6 else 1  # the mean of 3 on small inputs
        ours = mean_of([run_ours(files) for _ in range(repeats)])
        parallel = None
        if len(files) > 1 and not args.no_parallel:
            parallel = mean_of([run_ours(files, processes=2) for _ in range(repeats)])
        print(f"end to end (CLI ingest + queued analyses) on {label} ...", flush=True)
        e2e = mean_of([run_end_to_end(files) for _ in range(repeats)])
        print(f"running HTA on {label} ...", flush=True)
        hta = run_hta(folder)
        summary.append(report(label, ours, parallel, hta))
        mb = uncompressed_mb(files)
        # the least of the runs: a ceiling on our ratio errs towards the generous side
        floor = min(decode_floor_cpu(files) for _ in range(repeats))
        e2e_rows.append(
            {
                "label": label,
                "mb": mb,
                "e2e": e2e,
                "hta": hta,
                "ours": ours,
                "decode_mb_s": mb / ours["seconds"]["read"],
                "floor_cpu": floor,
                "ours_peak_mb": ours["peak_rss_mb"],
            }
        )
        print(
            f"  end to end: ingest {e2e['seconds']['ingest']:.2f}s + analyses {e2e['seconds']['analyses']:.2f}s = "
            f"{e2e['seconds']['total']:.2f}s wall, {e2e['cpu']['total']:.2f}s CPU, peak {e2e['peak_mb']['ingest']:.0f} MB ingest / "
            + (
                "analyses in the ingest's own process (a small trace), "
                if e2e["in_ingest_process"]
                else f"{e2e['peak_mb']['analyses']:.0f} MB analyses, "
            )
            + f"kept events {e2e['kept_events_mb']:.1f} MB; vs HTA {hta['seconds']['total']:.2f}s wall / "
            f"{hta['seconds']['cpu']:.2f}s CPU incl. its pool and imports, {hta['seconds']['cpu_inner']:.2f}s by its own timer (peak {hta['peak_mb']:.0f} MB): "
            f"{hta['seconds']['total'] / e2e['seconds']['total']:.1f}x wall, "
            f"{hta['seconds']['cpu'] / e2e['cpu']['total']:.1f}x CPU"
        )

    print("\n== summary (targets: >= 10x faster, <= 0.5 pp; HTA parses ranks in parallel, 2 processes here)")
    print(
        f"  {'trace':<22}{'GPU events':>12}{'ours 1p s':>11}{'ours 2p s':>11}{'HTA s':>9}{'ratio 1p':>10}"
        f"{'ratio 2p':>10}{'cpu ratio':>11}{'max pp':>8}{'idle pp':>9}"
    )
    for s in summary:
        par_s = f"{s['ours_par_s']:>11.3f}" if s["ours_par_s"] is not None else f"{'-':>11}"
        par_r = f"{s['ratio_par']:>9.1f}x" if s["ratio_par"] is not None else f"{'-':>10}"
        print(
            f"  {s['label']:<22}{s['events']:>12,}{s['ours_s']:>11.3f}{par_s}{s['hta_s']:>9.2f}"
            f"{s['ratio']:>9.1f}x{par_r}{s['cpu_ratio']:>10.1f}x{s['worst_pp']:>8.2f}{s['idle_pp']:>9.2f}"
        )
    print(
        "\n== end to end (targets: 20x end to end, 50x in-process; wall and CPU; the machine is shared, "
        f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"  {'trace':<22}{'JSON MB':>9}{'e2e s':>8}{'e2e cpu':>9}{'HTA s':>8}{'HTA cpu':>9}{'e2e x':>7}{'cpu x':>7}"
        f"{'in-proc x':>10}{'cpu x':>7}{'MB/s':>7}{'floor MB/s':>11}{'floor cpu x':>12}{'peak MB ours/e2e/HTA':>22}"
    )
    for r in e2e_rows:
        e, h, o = r["e2e"], r["hta"], r["ours"]
        print(
            f"  {r['label']:<22}{r['mb']:>9.1f}{e['seconds']['total']:>8.2f}{e['cpu']['total']:>9.2f}"
            f"{h['seconds']['total']:>8.2f}{h['seconds']['cpu']:>9.2f}"
            f"{h['seconds']['total'] / e['seconds']['total']:>6.1f}x{h['seconds']['cpu'] / e['cpu']['total']:>6.1f}x"
            f"{h['seconds']['total'] / o['seconds']['total']:>9.1f}x{h['seconds']['cpu'] / o['seconds']['cpu']:>6.1f}x"
            f"{r['decode_mb_s']:>7.0f}{r['mb'] / r['floor_cpu']:>11.0f}{h['seconds']['cpu'] / r['floor_cpu']:>11.1f}x"
            f"{r['ours_peak_mb']:>8.0f}/{max(e['peak_mb'].values()):.0f}/{h['peak_mb']:.0f}"
        )
    print(
        "  floor: msgspec's typed decode alone of the fields the breakdowns need, CPU time; 'floor cpu x' is "
        "HTA's CPU time over it, the most any reader decoding with msgspec could reach"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
