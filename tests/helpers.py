"""Small traces written by the project's own code, for tests that must always run."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import time
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import orjson

from core.analysis.gpu_kinds import GpuKind
from core.workload.polytrace_rows import TURN_COLUMNS
from core.workload.synthetic import packed_length_rows


def synthetic_rows(steps: int = 4, groups: int = 16, n: int = 4, seed: int = 1) -> list[list[dict]]:
    return list(packed_length_rows(steps, groups, n, dp_size=4, seed=seed, max_response_len=4096))


def jsonl(rows: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def write_packed_dir(folder: Path, per_step: list[list[dict]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rows in per_step:
        (folder / f"packed_lengths_step_{rows[0]['step']}.jsonl").write_bytes(jsonl(rows))
    return folder


def zip_folder(folder: Path) -> bytes:
    """The folder as a zip whose bytes depend on the content only (fixed entry times, so
    the same files zipped twice hash the same, whatever the clock says)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                info = zipfile.ZipInfo(f"{folder.name}/{f.relative_to(folder)}", date_time=(2024, 1, 1, 0, 0, 0))
                zf.writestr(info, f.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def responses_of(per_step: list[list[dict]], step: int) -> np.ndarray:
    return np.array([o for r in per_step[step] for o in r["output"]])


SYNTHETIC_MAX_RESPONSE_LEN = 600
SYNTHETIC_GPU_NAMES = ["gemm_kernel", "ncclDevKernel_AllReduce", "Memcpy HtoD", "softmax_kernel"]


def synthetic_trace_tables(seed: int = 3) -> dict[str, dict[str, np.ndarray]]:
    """{table: {column: array}} of a small trace with every table and every column the readers can produce: 4 steps
    (the last one validation), 4 prompt groups of 4 samples on 2 DP ranks (2 TP each),
    2 tasks, multi-turn trajectories with tool calls, per-rank reward timings, stage
    timings and two ranks of GPU events."""
    rng = np.random.default_rng(seed)
    s: dict[str, list] = {k: [] for k in ("step", "group_idx", "sample_idx", "prompt_len", "response_len")}
    for k in ("dp_rank", "rank", "tp_rank", "task_id", "validate", "truncated", "num_turns", "num_tool_calls"):
        s[k] = []
    s["latency_s"] = []
    t: dict[str, list] = {k: [] for k in (*TURN_COLUMNS, "finish_reason")}
    c: dict[str, list] = {
        k: []
        for k in (
            "step",
            "group_idx",
            "sample_idx",
            "latency_s",
            "tool_name",
            "call_idx",
            "turn",
            "response_tokens",
            "status",
        )
    }
    for step in range(4):
        for g in range(4):
            prompt = int(rng.integers(20, 200))
            dp = g % 2
            for i in range(4):
                n_turns = int(rng.integers(1, 4))
                context, response, n_calls, latency = prompt, 0, 0, 0.0
                for turn in range(n_turns):
                    out = int(rng.integers(5, 150))
                    calls = int(rng.integers(1, 3)) if turn < n_turns - 1 else 0
                    lat = float(rng.uniform(0.05, 2.0))
                    t["step"].append(step)
                    t["group_idx"].append(g)
                    t["sample_idx"].append(i)
                    t["turn"].append(turn)
                    t["prompt_tokens"].append(context)
                    t["cached_tokens"].append(int(context * rng.uniform(0.2, 0.9)) if turn else 0)
                    t["completion_tokens"].append(out)
                    t["engine_latency_s"].append(lat)
                    t["tool_call_count"].append(calls)
                    t["finish_reason"].append("tool_calls" if calls else "stop")
                    context += out
                    response += out
                    latency += lat
                    for k in range(calls):
                        tool = float(rng.uniform(0.1, 3.0))
                        tokens = int(rng.integers(3, 40))
                        c["step"].append(step)
                        c["group_idx"].append(g)
                        c["sample_idx"].append(i)
                        c["latency_s"].append(tool)
                        c["tool_name"].append(("search", "python")[k % 2])
                        c["call_idx"].append(n_calls)
                        c["turn"].append(turn)
                        c["response_tokens"].append(tokens)
                        c["status"].append("success" if rng.random() < 0.8 else "error")
                        context += tokens
                        response += tokens
                        latency += tool
                        n_calls += 1
                response = min(response, SYNTHETIC_MAX_RESPONSE_LEN)
                s["step"].append(step)
                s["group_idx"].append(g)
                s["sample_idx"].append(i)
                s["prompt_len"].append(prompt)
                s["response_len"].append(response)
                s["dp_rank"].append(dp)
                s["rank"].append(2 * dp + i % 2)
                s["tp_rank"].append(i % 2)
                s["task_id"].append(g % 2)
                s["validate"].append(step == 3)
                s["truncated"].append(response >= SYNTHETIC_MAX_RESPONSE_LEN)
                s["num_turns"].append(n_turns)
                s["num_tool_calls"].append(n_calls)
                s["latency_s"].append(latency)
    r: dict[str, list] = {
        k: [] for k in ("step", "rank", "phase", "seconds", "dp_rank", "tp_rank", "batch_size", "validate")
    }
    for step in range(4):
        for rank in range(4):
            for phase in ("reward", "old_log_prob"):
                r["step"].append(step)
                r["rank"].append(rank)
                r["phase"].append(phase)
                r["seconds"].append(float(rng.uniform(0.5, 4.0)))
                r["dp_rank"].append(rank // 2)
                r["tp_rank"].append(rank % 2)
                r["batch_size"].append(8)
                r["validate"].append(step == 3)
    timing = ("t_gen", "t_reward", "t_old_log_prob", "t_ref", "t_adv", "t_update_actor", "t_step")
    steps = {"step": np.arange(4), "validate": np.arange(4) == 3}
    steps.update({k: rng.uniform(1.0, 30.0, 4) for k in timing})
    e: dict[str, list] = {
        k: [] for k in ("rank", "stream", "step", "kind", "name_id", "start_us", "dur_us", "launch_us")
    }
    kinds = [GpuKind.COMPUTE, GpuKind.COMMUNICATION, GpuKind.MEMORY, GpuKind.COMPUTE]
    for rank in range(2):
        clock = 1000.0 * rank
        for step in range(3):
            for _ in range(12):
                name_id = int(rng.integers(0, len(SYNTHETIC_GPU_NAMES)))
                dur = float(rng.uniform(5, 80)) * (1.5 if rank else 1.0)
                e["rank"].append(rank)
                e["stream"].append(7 if kinds[name_id] != GpuKind.COMMUNICATION else 13)
                e["step"].append(step)
                e["kind"].append(int(kinds[name_id]))
                e["name_id"].append(name_id)
                e["start_us"].append(clock)
                e["dur_us"].append(dur)
                e["launch_us"].append(clock - float(rng.uniform(1, 20)))
                clock += dur + float(rng.uniform(0, 30))
    samples = {k: np.asarray(v) for k, v in s.items()}
    # DAPO marks per prompt group (0 filtered out, 1 kept, 2 used), two generation steps
    # per trainer step
    samples["filter_mark"] = (samples["group_idx"] + samples["step"]) % 3
    samples["trainer_step"] = samples["step"] // 2 + 1
    # rollout dumps: a reward per sample, and the last sample of each group ends in a loop
    samples["reward"] = ((samples["group_idx"] + samples["sample_idx"] + samples["step"]) % 2).astype(np.float64)
    samples["repeat_period"] = np.where(samples["sample_idx"] == 3, 24, 0)
    return {
        "samples": samples,
        "turns": {k: np.asarray(v) for k, v in t.items()},
        "tool_calls": {k: np.asarray(v) for k, v in c.items()},
        "rank_timings": {k: np.asarray(v) for k, v in r.items()},
        "steps": steps,
        "gpu_events": {k: np.asarray(v) for k, v in e.items()},
    }


def dapo_run(
    gen_steps: int = 5, prompts: int = 8, n: int = 4, train_batch_size: int = 6, seed: int = 3
) -> tuple[list[list[dict]], list[dict]]:
    """A synthetic verl DAPO run: per generation step the packed-length lines (one prompt
    group per line, 2 DP ranks) and the ``dapo_filter_indices.jsonl`` lines. Each trainer
    step fills its batch of `train_batch_size` prompts from as many generation batches as
    it takes (kept = groups whose fake rewards differ), the last cut at the batch size."""
    rng = np.random.default_rng(seed)
    packed, filt = [], []
    trainer, have = 0, 0
    gen_index = 0
    for step in range(gen_steps):
        rows = []
        for g in range(prompts):
            rows.append(
                {
                    "step": step,
                    "rank": g % 2,
                    "dp_rank": g % 2,
                    "tp_rank": 0,
                    "local_index": g // 2,
                    "input": int(rng.integers(20, 200)),
                    "output": [int(x) for x in rng.integers(1, 3000, size=n)],
                    "n_sampling": n,
                    "validate": False,
                }
            )
        packed.append(rows)
        kept = sorted(int(i) for i in rng.choice(prompts, size=int(rng.integers(1, prompts)), replace=False))
        take = min(len(kept), train_batch_size - have)
        used = kept[:take]
        filt.append(
            {
                "workload_step": step,
                "trainer_step": trainer,
                "gen_batch_index": gen_index,
                "prompt_count": prompts,
                "n_sampling": n,
                "train_batch_size": train_batch_size,
                "num_prompt_in_batch_before": have,
                "kept_prompt_count": len(kept),
                "used_prompt_count": len(used),
                "kept_prompt_indices": kept,
                "used_prompt_indices": used,
            }
        )
        have += take
        gen_index += 1
        if have >= train_batch_size:
            trainer, have, gen_index = trainer + 1, 0, 0
    return packed, filt


def write_dapo_dir(folder: Path, packed: list[list[dict]], filt: list[dict]) -> Path:
    write_packed_dir(folder, packed)
    (folder / "dapo_filter_indices.jsonl").write_bytes(jsonl(filt))
    return folder


def health(port: int, proc: subprocess.Popen, what: str, timeout: float = 60, log: Path | None = None) -> bytes:
    """The health answer of the server `proc` started on `port`, waiting for it; fails
    naming `what` (and the tail of `log`) when `proc` exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None or time.monotonic() >= deadline:
            tail = log.read_text()[-2000:] if log is not None else ""
            raise AssertionError(f"{what}\n{tail}")
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=2).read()
        except OSError:
            time.sleep(0.5)


def live_session_pids(sid: int) -> list[int]:
    """Processes of session `sid`, not counting zombies (exited, waiting to be reaped)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid=,stat="], capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return [int(r[0]) for r in rows if int(r[1]) == sid and not r[2].startswith("Z")]


def kill_session(sid: int) -> None:
    for pid in live_session_pids(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_session_gone(sid: int, timeout: float) -> None:
    """Until no process of session `sid` is left, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while live_session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.5)
