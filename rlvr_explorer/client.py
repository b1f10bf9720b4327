"""A small REST client a trainer can call directly::

    from rlvr_explorer import Client

    client = Client("http://127.0.0.1:8000", api_key, name="grpo-qwen-7b")
    for step in range(n_steps):
        ...
        client.log(step, {"timing_s/gen": 41.2, "actor/entropy": 0.61})
    client.close()

The trace is created live on first use (or pass ``trace_id`` to continue one); `log`
appends per-step metrics (verl keys; ``timing_s/*`` fill the stage timings), `attach`
adds files of the run, `close` marks the trace finished and runs its analyses. Logging
the same step with the same metrics twice is harmless (idempotent by content).
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

import httpx

from rlvr_explorer.errors import error_lines


class ClientError(RuntimeError):
    """The server refused a request; the message is its detail (file, line, field)."""


class Client:
    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        trace_id: int | None = None,
        name: str | None = None,
        timeout: float = 60.0,
    ):
        headers = {"X-API-Key": api_key} if api_key else {}
        self._http = httpx.Client(base_url=url.rstrip("/") + "/api/v1", headers=headers, timeout=timeout)
        self.trace_id = trace_id
        self.name = name

    # -- the trace -----------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs) -> dict:
        r = self._http.request(method, path, **kwargs)
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text
            lines = error_lines(detail)  # every error of a refused upload, one per line
            text = lines[0] if len(lines) == 1 else f"{len(lines)} errors:\n" + "\n".join(f"  {x}" for x in lines)
            raise ClientError(f"{method} {path}: {r.status_code} {text}")
        return r.json() if r.content else {}

    def trace(self) -> int:
        """The trace id, creating a live trace on first use."""
        if self.trace_id is None:
            body = self._request("POST", "/traces/live", json={"name": self.name or "live run"})
            self.trace_id = int(body["id"])
        return self.trace_id

    def get_trace(self) -> dict:
        return self._request("GET", f"/traces/{self.trace()}")

    # -- writing -------------------------------------------------------------------------
    def log(self, step: int, metrics: dict[str, Any]) -> dict:
        """Append the metrics of one step: finite numbers only (ValueError naming the key
        otherwise; nothing is sent)."""
        return self.log_many([(step, metrics)])

    def log_many(self, steps: list[tuple[int, dict[str, Any]]]) -> dict:
        clean = [{"step": _step(step), "metrics": _numbers(step, metrics)} for step, metrics in steps]
        return self._request("POST", f"/traces/{self.trace()}/steps", json={"steps": clean})

    def attach(self, files: list[Path | str | tuple[str, bytes]], format: str | None = None) -> dict:
        """Attach files (paths, or (name, content) pairs) to the trace, all-or-nothing."""
        parts = []
        for f in files:
            if isinstance(f, tuple):
                parts.append(("files", (f[0], f[1])))
            else:
                path = Path(f)
                parts.append(("files", (path.name, path.read_bytes())))
        data = {"format": format} if format else None
        return self._request("POST", f"/traces/{self.trace()}/files", files=parts, data=data)

    def open(self) -> dict:
        return self._request("POST", f"/traces/{self.trace()}/open")

    def close(self) -> dict | None:
        """Mark the trace finished (no longer live); its analyses run on all of it."""
        if self.trace_id is None:
            return None
        return self._request("POST", f"/traces/{self.trace_id}/close")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.close()
        finally:
            self._http.close()


def _step(step) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ValueError(f"step {step!r}: a step is an integer >= 0")
    return int(step)


def _numbers(step, metrics: dict[str, Any]) -> dict[str, float]:
    """The step's metrics as floats; a value that is not a finite number is refused by name."""
    if not metrics:
        raise ValueError(f"step {step}: no metrics to log")
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"step {step}, metric {key!r}: {value!r} is not a number (log numbers only)")
        if not math.isfinite(value):
            raise ValueError(f"step {step}, metric {key!r}: {value} is not a finite number")
        out[str(key)] = float(value)
    return out
