"""`rlvr-explorer watch RUN_DIR`: follow a run folder while the trainer writes it and
stream each finished piece to a trace through the attach endpoint.

Units sent, each its own all-or-nothing attach:
- a per-step file (``packed_lengths_step_N.jsonl``, ``reward_timings_step_N.jsonl``,
  ``multiturn_workload_step_N.jsonl``) once it is finished: its size and mtime did not
  change over one poll and it ends with a newline (a half-written last line is waited for);
- a Kineto trace (``*.json``, ``*.json.gz``) once it is stable and parses whole;
- every complete new line of a verl file-logger JSONL (any other ``*.jsonl``): the bytes
  after the last one sent, up to the last newline.

Resumable without duplicates or gaps: what was sent (file hashes, log offsets) is kept
in a state file (``RUN_DIR/.rlvr-watch.json``, else ``~/.cache/rlvr-explorer/``) written
atomically after each unit the server accepted; a unit sent but not yet recorded when
the watcher died is sent again on restart and the server recognises its content (the
attach is idempotent by content hash), so nothing is loaded twice.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlvr_explorer.client import Client, ClientError

STATE_NAME = ".rlvr-watch.json"
PER_STEP = re.compile(r"^(packed_lengths|reward_timings|multiturn_workload)_step_?(\d+).*\.jsonl?$")
KINETO = re.compile(r".*\.json(\.gz)?$")
SKIP = re.compile(r"^(dapo_filter_indices.*|\..*)$")


def natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


@dataclass
class WatchState:
    server: str
    trace_id: int
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256 sent
    logs: dict[str, int] = field(default_factory=dict)  # relative path -> byte offset sent
    steps: list[int] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> WatchState | None:
        if not path.exists():
            return None
        body = json.loads(path.read_text())
        return cls(**body)

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.__dict__, sort_keys=True))
        os.replace(tmp, path)


def state_path_for(run_dir: Path) -> Path:
    if os.access(run_dir, os.W_OK):
        return run_dir / STATE_NAME
    digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]
    folder = Path.home() / ".cache" / "rlvr-explorer"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"watch-{digest}.json"


def _complete(path: Path, data: bytes) -> bool:
    name = path.name.lower()
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return False
        name = name[:-3]
    if name.endswith(".jsonl"):
        return data.endswith(b"\n")
    if name.endswith(".json"):
        try:
            json.loads(data)
        except ValueError:
            return False
    return True


class Watcher:
    def __init__(self, run_dir: Path, client: Client, state: WatchState, state_path: Path, out=sys.stderr):
        self.run_dir, self.client, self.state, self.state_path, self.out = run_dir, client, state, state_path, out
        self.seen: dict[str, tuple[int, int]] = {}  # path -> (size, mtime_ns) at the previous poll
        self.waiting: str | None = None
        self.sent_units = 0

    def _record(self, steps: list[int]) -> None:
        self.state.steps = sorted(set(self.state.steps) | set(steps))
        self.state.save(self.state_path)
        self.sent_units += 1

    def _stable(self, rel: str, path: Path) -> bool:
        st = path.stat()
        now = (st.st_size, st.st_mtime_ns)
        before = self.seen.get(rel)
        self.seen[rel] = now
        return before == now and st.st_size > 0

    def poll(self) -> int:
        """One pass over the folder; returns the number of units sent."""
        sent = 0
        self.waiting = None
        paths = sorted((p for p in self.run_dir.rglob("*") if p.is_file()), key=lambda p: natural(p.name))
        for path in paths:
            rel = path.relative_to(self.run_dir).as_posix()
            name = path.name
            if SKIP.match(name) or path == self.state_path or name.endswith(".tmp"):
                continue
            if PER_STEP.match(name) or (KINETO.match(name) and not name.endswith(".jsonl")):
                sent += self._file_unit(rel, path)
            elif name.endswith(".jsonl"):
                sent += self._log_lines(rel, path)
        return sent

    def _file_unit(self, rel: str, path: Path) -> int:
        if rel in self.state.files:
            return 0
        if not self._stable(rel, path):
            self.waiting = self.waiting or rel
            return 0
        data = path.read_bytes()
        if not _complete(path, data):
            self.waiting = self.waiting or rel
            return 0
        try:
            body = self.client.attach([(path.name, data)])
        except ClientError as exc:
            if "no readable trace files" not in str(exc):
                raise
            body = {}  # not a trace file (the server said why): not sent again
        self.state.files[rel] = hashlib.sha256(data).hexdigest()
        self._record(body.get("steps", []))
        return 1

    def _log_lines(self, rel: str, path: Path) -> int:
        offset = self.state.logs.get(rel, 0)
        size = path.stat().st_size
        if size < offset:  # the file was replaced: start over (content already sent is a no-op)
            offset = 0
        if size == offset:
            return 0
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read(size - offset)
        end = chunk.rfind(b"\n")
        if end < 0:
            self.waiting = self.waiting or f"{rel} (a half-written line)"
            return 0
        sent = 0
        pos = 0
        stem = path.name.rsplit(".", 1)[0]
        for line in chunk[: end + 1].splitlines(keepends=True):
            pos += len(line)
            if not line.strip():
                continue
            try:
                step = json.loads(line).get("step")
            except (ValueError, AttributeError):
                step = None
            body = self.client.attach([(f"{stem}_step_{step}.jsonl", line)], format="verl-jsonl")
            self.state.logs[rel] = offset + pos
            self._record(body.get("steps", []))
            sent += 1
        self.state.logs[rel] = offset + end + 1
        self.state.save(self.state_path)
        return sent

    def progress(self) -> str:
        steps = self.state.steps
        last = f"last step {steps[-1]}" if steps else "no steps yet"
        line = f"watch: trace {self.state.trace_id} (live) · {len(steps)} steps · {last}"
        if self.waiting:
            line += f" · waiting for {self.waiting}"
        return line


def run_watch(
    run_dir: Path,
    *,
    server: str,
    api_key: str | None,
    into: int | None,
    name: str | None,
    interval: float = 2.0,
    idle_exit: float | None = None,
    close: bool = True,
    out=sys.stderr,
    report: dict | None = None,
) -> int:
    """Follow `run_dir` until stopped (or `idle_exit`); returns the exit code and, in
    `report` when given, what was streamed (trace_id, steps, units, closed)."""
    run_dir = run_dir.resolve()
    state_path = state_path_for(run_dir)
    state = WatchState.load(state_path)
    if state is not None and (state.server != server or (into is not None and state.trace_id != into)):
        out.write(f"watch: {state_path} belongs to trace {state.trace_id} on {state.server}; starting over\n")
        state = None
    client = Client(server, api_key, trace_id=state.trace_id if state else into, name=name or run_dir.name)
    client.trace()
    if state is None:
        state = WatchState(server=server, trace_id=int(client.trace_id or 0))
        state.save(state_path)
    client.open()
    watcher = Watcher(run_dir, client, state, state_path, out)
    stop = {"now": False}

    def _stop(signum, frame) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    last_new = time.monotonic()
    code = 0
    try:
        while not stop["now"]:
            try:
                if watcher.poll():
                    last_new = time.monotonic()
            except ClientError as exc:
                out.write(f"\nwatch: the server refused a file: {exc}\n")
                code = 2
                break
            out.write("\r" + watcher.progress()[:160].ljust(100))
            out.flush()
            if idle_exit is not None and time.monotonic() - last_new > idle_exit:
                break
            deadline = time.monotonic() + interval
            while not stop["now"] and time.monotonic() < deadline:
                time.sleep(min(0.1, interval))
    finally:
        out.write("\n")
        if close:
            client.close()
            out.write(f"watch: trace {state.trace_id} closed ({len(state.steps)} steps)\n")
        if report is not None:
            report.update(trace_id=state.trace_id, steps=len(state.steps), units=watcher.sent_units, closed=close)
    return code
