"""Engines in child processes (`engine.server`, one engine each), and the driver
interface the engine policies act through: submit, abort, run until a condition, now.

The parent needs no vLLM: each child runs the engine environment's python
(`engine_python`), so the CLI of the app's own environment drives engines too, and k
engines are k processes (two vLLM engines do not share one process's scheduler loop).
"""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

INSTALL_HINT = "install with bash deploy/engine-venv.sh DIR and set RLVR_ENGINE_PYTHON=DIR/bin/python"
START_TIMEOUT_S = 600.0


class EngineMissing(RuntimeError):
    """No engine environment to run: the message says how to make one."""


class EngineFailed(RuntimeError):
    """An engine process ended or answered what it should not."""


def engine_python() -> str:
    """The python of the engine environment: RLVR_ENGINE_PYTHON, else this one when it
    has vLLM; EngineMissing otherwise."""
    given = os.environ.get("RLVR_ENGINE_PYTHON")
    if given:
        if not Path(given).is_file():
            raise EngineMissing(f"RLVR_ENGINE_PYTHON={given} does not exist; {INSTALL_HINT}")
        return given
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise EngineMissing(f"no inference engine installed (vLLM); {INSTALL_HINT}")


@dataclass
class Request:
    """One request the engine decodes: a prompt of token ids, exactly `max_tokens` new
    tokens (ignore_eos)."""

    id: str
    prompt: list[int]
    max_tokens: int
    return_ids: bool = False  # its token ids come back in its Done (a turn to continue from)


@dataclass
class Done:
    """A request that ended: finished (reason ``length``) or aborted (``abort``, with its
    partial response's token ids; a finished one has them when it asked, `return_ids`)."""

    id: str
    engine: int
    reason: str
    tokens: int
    t_submit: float
    t_scheduled: float
    t_first: float
    t_end: float
    cached: int = 0  # prompt tokens the prefix cache served
    token_ids: list[int] = field(default_factory=list)


class _Child:
    def __init__(self, python: str, config: dict, index: int) -> None:
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.update(config.pop("env", {}))
        self.index = index
        self.proc = subprocess.Popen(
            [python, "-m", "engine.server", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("RLVR_ENGINE_LOG") else subprocess.DEVNULL,
            env=env,
            cwd=root,
        )
        self.buf = b""
        self.outstanding = 0

    def send(self, obj: dict) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(obj).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise EngineFailed(f"engine {self.index} ended (exit {self.proc.poll()})") from None

    def read_events(self) -> list[dict]:
        assert self.proc.stdout is not None
        chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        if not chunk:
            code = self.proc.wait()
            raise EngineFailed(f"engine {self.index} ended (exit {code}); RLVR_ENGINE_LOG=1 shows its log")
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


class EnginePool:
    """k engines of one model, each in its own process; the driver interface the engine
    policies use (times are time.monotonic seconds, one clock for every process)."""

    def __init__(self, model: dict, k: int = 1, *, env: dict[str, str] | None = None) -> None:
        """`model`: {"model": folder} or {"arch": preset}, and optionally max_model_len;
        `env`: environment of every engine process beside its defaults (server.ENGINE_ENV)."""
        python = engine_python()
        t0 = time.monotonic()
        self.children: list[_Child] = []
        self.done: dict[str, Done] = {}
        self._sel = selectors.DefaultSelector()
        try:
            for i in range(k):
                config = {**model, "env": env or {}}
                self.children.append(_Child(python, config, i))
            self.limits = [self._ready(c) for c in self.children]
        except BaseException:
            self.close()
            raise
        self.start_s = time.monotonic() - t0
        for c in self.children:
            assert c.proc.stdout is not None
            self._sel.register(c.proc.stdout, selectors.EVENT_READ, c)

    def _ready(self, child: _Child) -> dict:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for ev in child.read_events():
                if ev["ev"] == "ready":
                    return {k: v for k, v in ev.items() if k != "ev"}
        raise EngineFailed(f"engine {child.index} did not start within {START_TIMEOUT_S:.0f} s")

    # ----------------------------------------------------------- the driver interface

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def submit(self, engine: int, reqs: list[Request]) -> None:
        if reqs:
            child = self.children[engine]
            child.outstanding += len(reqs)
            child.send({"op": "submit", "reqs": [r.__dict__ for r in reqs]})

    def abort(self, ids: list[str]) -> list[Done]:
        """Abort `ids` (on whichever engine runs them); their `Done` records once the
        engines confirm (already finished ones are left as they are)."""
        want = [i for i in ids if i not in self.done]
        for c in self.children:
            if c.outstanding:
                c.send({"op": "abort", "ids": want})
        self.run_until(lambda: all(i in self.done for i in want))
        return [self.done[i] for i in want]

    def run_until(self, condition: Callable[[], bool], until: float | None = None) -> None:
        """Let the engines run until `condition()` holds (checked after each event),
        nothing is left to run, or the clock passes `until` (a `now()` time)."""
        while not condition() and any(c.outstanding for c in self.children):
            wait = None if until is None else until - self.now()
            if wait is not None and wait <= 0:
                return
            for key, _ in self._sel.select(wait):
                child: _Child = key.data
                for ev in child.read_events():
                    if ev["ev"] == "done":
                        child.outstanding -= 1
                        ev.pop("ev")
                        self.done[ev["id"]] = Done(engine=child.index, **ev)

    def iterations(self) -> list[list[list[float]]]:
        """Per engine, its steps: [start, seconds, running, KV tokens, prefill tokens,
        waiting, CPU seconds]."""
        out = []
        for c in self.children:
            c.send({"op": "stats"})
            while True:
                evs = [e for e in c.read_events() if e["ev"] == "stats"]
                if evs:
                    out.append(evs[0]["iterations"])
                    break
        return out

    def close(self) -> None:
        for c in self.children:
            try:
                c.send({"op": "stop"})
            except EngineFailed:
                pass
        for c in self.children:
            try:
                c.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()
        self._sel.close()

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
