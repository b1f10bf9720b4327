"""One vLLM engine in this process, driven over stdin/stdout by `engine.client`.

    python -m engine.server CONFIG_JSON

Commands (one JSON object a line on stdin): ``submit`` {reqs: [{id, prompt: [ids],
max_tokens}]}, ``abort`` {ids}, ``stats`` (answers the iteration log), ``stop``. Events
(one a line on stdout, after a ``ready`` line with the engine's limits): ``done`` per
request that finished or was aborted: id, reason (length | abort), tokens decoded, the
times it was submitted, scheduled, got its first token and ended (time.monotonic, the
same clock in every process of the machine), the prompt tokens the prefix cache served,
and for an aborted one, or one submitted with ``return_ids``, its token ids (a partial
response to resume, a turn's response to continue from). Between commands the engine steps whenever it has work;
each step's start, duration, running requests, their KV tokens, its prefill tokens
(prompts whose first token that step produced), the requests still without a first
token (queued or part-way through a chunked prefill) and the CPU seconds the process
spent in it (below its wall time when other processes held the cores) are logged.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from dataclasses import dataclass, field

# Measured on a 2-core CPU machine: these start the engine in seconds (60 s with defaults).
ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "VLLM_CPU_OMP_THREADS_BIND": "auto",
    "VLLM_CPU_CI_ENV": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}


@dataclass
class _Req:
    prompt_len: int
    t_submit: float
    return_ids: bool = False  # its token ids go back when it finishes (a turn to continue)
    t_first: float = 0.0
    cached: int = 0  # prompt tokens the prefix cache served
    token_ids: list[int] = field(default_factory=list)


class Server:
    def __init__(self, config: dict) -> None:
        for k, v in ENGINE_ENV.items():
            os.environ.setdefault(k, v)
        from vllm import EngineArgs, SamplingParams
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.llm_engine import LLMEngine

        args = EngineArgs(
            model=_model_folder(config),
            skip_tokenizer_init=True,
            dtype="bfloat16",
            max_model_len=config.get("max_model_len", 8192),
            max_num_seqs=config.get("max_num_seqs", 256),
            enable_prefix_caching=config.get("prefix_caching", True),
            disable_log_stats=False,
            seed=0,
        )
        self.engine = LLMEngine.from_engine_args(args)
        self._params = lambda n: SamplingParams(
            max_tokens=n, ignore_eos=True, temperature=1.0, output_kind=RequestOutputKind.DELTA, detokenize=False
        )
        self.reqs: dict[str, _Req] = {}
        self.iterations: list[list[float]] = []
        self.kv = 0  # tokens held by running requests

    def limits(self) -> dict:
        cfg = self.engine.vllm_config
        cache, sched = cfg.cache_config, cfg.scheduler_config
        blocks = cache.num_gpu_blocks or 0
        return {
            "max_num_seqs": sched.max_num_seqs,
            "max_num_batched_tokens": sched.max_num_batched_tokens,
            "kv_cache_tokens": int(blocks * cache.block_size),
            "block_size": int(cache.block_size),
            "max_model_len": cfg.model_config.max_model_len,
            "device": _device(),
            "on_cpu": _on_cpu(),
            "engine": _engine_version(),
        }

    def warm_up(self) -> None:
        """One short request first: the first steps compile and would be logged as
        iterations many times slower than the rest."""
        self.submit([{"id": "warm-up", "prompt": list(range(1, 33)), "max_tokens": 4}])
        while self.engine.has_unfinished_requests():
            self.engine.step()
        self.reqs.clear()
        self.kv = 0

    def submit(self, reqs: list[dict]) -> None:
        from vllm.inputs import TokensPrompt

        now = time.monotonic()
        for r in reqs:
            self.reqs[r["id"]] = _Req(len(r["prompt"]), now, bool(r.get("return_ids")))
            self.engine.add_request(r["id"], TokensPrompt(prompt_token_ids=r["prompt"]), self._params(r["max_tokens"]))

    def abort(self, ids: list[str]) -> None:
        live = [i for i in ids if i in self.reqs]
        if live:
            self.engine.abort_request(live)
        now = time.monotonic()
        for i in live:
            self._done(i, "abort", now, 0.0)

    def _done(self, rid: str, reason: str, t: float, scheduled: float) -> None:
        r = self.reqs.pop(rid)
        if r.t_first:
            self.kv -= r.prompt_len + len(r.token_ids)
        event = {
            "ev": "done",
            "id": rid,
            "reason": reason,
            "tokens": len(r.token_ids),
            "t_submit": r.t_submit,
            "t_scheduled": scheduled,
            "t_first": r.t_first,
            "t_end": t,
            "cached": r.cached,
        }
        if reason == "abort" or r.return_ids:
            event["token_ids"] = r.token_ids
        _send(event)

    def step(self) -> None:
        running = sum(1 for r in self.reqs.values() if r.t_first)
        waiting = len(self.reqs) - running  # no first token yet: queued or prefilling
        kv_before = self.kv
        t0, c0 = time.monotonic(), time.process_time()
        outputs = self.engine.step()
        t1 = time.monotonic()
        cpu = time.process_time() - c0
        prefill = 0
        for out in outputs:
            r = self.reqs.get(out.request_id)
            if r is None:
                continue
            new = out.outputs[0].token_ids if out.outputs else []
            if new and not r.t_first:
                r.t_first = t1
                r.cached = int(getattr(out, "num_cached_tokens", 0) or 0)
                prefill += r.prompt_len
                self.kv += r.prompt_len
            r.token_ids.extend(new)
            self.kv += len(new)
            if out.finished:
                m = out.metrics
                self._done(out.request_id, "length", t1, float(getattr(m, "scheduled_ts", 0.0) or 0.0))
        self.iterations.append([t0, t1 - t0, running, kv_before, prefill, waiting, cpu])

    def handle(self, cmd: dict) -> bool:
        op = cmd["op"]
        if op == "submit":
            self.submit(cmd["reqs"])
        elif op == "abort":
            self.abort(cmd["ids"])
        elif op == "stats":
            _send({"ev": "stats", "iterations": self.iterations})
        elif op == "stop":
            return False
        return True


def _model_folder(config: dict) -> str:
    """The model to load: a folder, or a preset architecture's random-weight model (built
    on first use)."""
    if config.get("model"):
        return str(config["model"])
    from engine.models import arch_of, build_random_model

    return str(build_random_model(arch_of(config["arch"])))


def _on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def _device() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    model = "CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} CPUs)"


def _engine_version() -> str:
    import importlib.metadata as md

    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {md.version(dist)}"
        except md.PackageNotFoundError:
            continue
    return "vllm"


_events = sys.stdout  # the events' stream (the original stdout; see __main__)


def _send(obj: dict) -> None:
    _events.write(json.dumps(obj) + "\n")
    _events.flush()


def serve(config: dict) -> None:
    server = Server(config)
    server.warm_up()
    _send({"ev": "ready", **server.limits()})
    fd = sys.stdin.fileno()
    buf = b""
    while True:
        busy = server.engine.has_unfinished_requests()
        readable, _, _ = select.select([fd], [], [], 0 if busy else None)
        if readable:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return  # the driver went away
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip() and not server.handle(json.loads(line)):
                    return
            continue  # take every command already sent before stepping
        if busy:
            server.step()


if __name__ == "__main__":
    # The events own the original stdout; whatever else writes to fd 1 (vLLM's log, C
    # libraries) goes to stderr.
    _events = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    serve(json.loads(sys.argv[1]))
