"""Pure shaping of API payloads for pages: filters, job lookup and number formatting.

No Dash, no HTTP: dicts in, dicts/strings out, so the pages stay thin and this is
unit-testable.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

PHASES = {"train": "training steps", "validate": "validation steps", "all": "all steps"}


def filter_phase(summary: dict, steps: list[dict] | None, phase: str) -> dict:
    """The summaries payload restricted to training or validation steps, by each
    summary row's `validate` flag, else the steps list's; unknown counts as training."""
    if phase == "all":
        return summary
    validate = {s["step"]: bool(s.get("validate")) for s in steps or []}
    want = phase == "validate"

    def is_validation(row: dict) -> bool:
        v = row.get("validate")
        return bool(v) if v is not None else validate.get(row["step"], False)

    rows = [r for r in summary.get("steps", []) if is_validation(r) == want]
    return {**summary, "steps": rows}


def _created(job: dict) -> str:
    return str(job.get("created_at") or "")


def latest_job(jobs: list[dict], kind: str) -> dict | None:
    """The most recently created job of `kind`."""
    mine = [j for j in jobs if j.get("kind") == kind]
    return max(mine, key=lambda j: (_created(j), str(j.get("id")))) if mine else None


def latest_succeeded(jobs: list[dict], kind: str) -> dict | None:
    """The most recently created succeeded job of `kind` (lists carry no results: its
    result is fetched by id)."""
    done = [j for j in jobs if j.get("kind") == kind and j.get("status") == "succeeded"]
    return max(done, key=lambda j: (_created(j), str(j.get("id")))) if done else None


def latest_result(jobs: list[dict], kind: str) -> dict | None:
    """The result of the most recent succeeded job of `kind` (shown while a re-run is
    still going)."""
    done = [j for j in jobs if j.get("kind") == kind and j.get("status") == "succeeded" and j.get("result") is not None]
    return max(done, key=lambda j: (_created(j), str(j.get("id"))))["result"] if done else None


def job_active(job: dict | None) -> bool:
    return job is not None and job.get("status") in ("queued", "running")


def human_bytes(n) -> str:
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def human_count(n) -> str:
    """1234 -> 1,234; 3_197_704 -> 3.20 M; 12_345_678 -> 12.3 M."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "—"
    n = float(n)
    if abs(n) >= 1e9:
        return f"{n / 1e9:.2f} B"
    if abs(n) >= 1e6:
        return f"{n / 1e6:.2f} M" if abs(n) < 1e7 else f"{n / 1e6:.1f} M"
    if n == int(n):
        return f"{int(n):,}"
    return f"{n:,.2f}"


def human_number(x, *, signed: bool = False) -> str:
    """A figure in plain digits, never scientific: 10750.3 -> 10,750; 41.26 -> 41.3;
    0.0123 -> 0.0123 (`signed`: +/- in front)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    v = float(x)
    sign = "+" if signed else ""
    if abs(v) >= 1000 or v == int(v):
        return f"{v:{sign},.0f}"
    if abs(v) >= 10:
        return f"{v:{sign},.1f}"
    digits = 3 if abs(v) >= 0.01 else 6
    return f"{v:{sign},.{digits}f}".rstrip("0").rstrip(".")


def human_ratio(x, digits: int = 2) -> str:
    return "—" if x is None else f"{float(x):.{digits}f}x"


def human_share(x, digits: int = 1) -> str:
    """A 0..1 fraction as a percentage."""
    return "—" if x is None else f"{100 * float(x):.{digits}f}%"


def human_time(ts: str | None) -> str:
    """ISO timestamp -> 'YYYY-MM-DD HH:MM' (UTC as the server sent it)."""
    if not ts:
        return "—"
    try:
        return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return str(ts)


def median(values: list) -> float | None:
    vals = sorted(float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v)))
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


# -- GPU timeline (Kineto metadata: trace.metadata["kineto"], see backend/formats/kineto.py)
def kineto_ranks(trace: dict) -> list[int]:
    k = (trace.get("metadata") or {}).get("kineto") or {}
    ranks = k.get("ranks") or [int(r) for r in (k.get("steps") or {})]
    return sorted(int(r) for r in ranks)


def kineto_steps(trace: dict) -> list[int]:
    """ProfilerStep numbers seen on any rank, ascending."""
    windows = ((trace.get("metadata") or {}).get("kineto") or {}).get("steps") or {}
    return sorted({int(w[0]) for ws in windows.values() for w in ws})


def step_window(trace: dict, step: int, ranks: list[int] | None = None) -> tuple[float, float] | None:
    """[start_us, end_us] of ProfilerStep `step` over the given ranks (all when None)."""
    windows = ((trace.get("metadata") or {}).get("kineto") or {}).get("steps") or {}
    spans = [
        (float(w[1]), float(w[2]))
        for r, ws in windows.items()
        if ranks is None or int(r) in ranks
        for w in ws
        if int(w[0]) == int(step)
    ]
    if not spans:
        return None
    return min(a for a, _ in spans), max(b for _, b in spans)


def zoom_range(relayout: dict | None) -> tuple[float, float] | None:
    """The x range a plotly zoom reported in relayoutData, if any."""
    if not relayout:
        return None
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        return float(relayout["xaxis.range[0]"]), float(relayout["xaxis.range[1]"])
    rng = relayout.get("xaxis.range")
    if isinstance(rng, list) and len(rng) == 2:
        return float(rng[0]), float(rng[1])
    return None


def natural_key(name: str) -> list:
    """Sort key that orders embedded numbers numerically (step_2 before step_10), the
    order the backend reads files in (backend.formats.natural_key)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _shares(t: dict, u: dict) -> bool:
    """Two traces have something to compare: samples, GPU events or stage timings."""
    return any(t.get(k) and u.get(k) for k in ("n_samples", "n_gpu_events")) or bool(
        {"latency", "multiturn"} & set(t.get("analyses") or []) & set(u.get("analyses") or [])
    )


def compare_pair(traces: list[dict], a: int | None = None) -> tuple[int | None, int | None]:
    """(A, B) to open with: the newest pair (newest first in `traces`) that shares data,
    with A when given; else the newest two."""
    pool = [t for t in traces if a is None or t["id"] == a]
    for t in pool:
        for u in traces:
            if u["id"] != t["id"] and _shares(t, u):
                return (u["id"], t["id"]) if a is None else (t["id"], u["id"])
    ids = [t["id"] for t in traces]
    if a is not None:
        return a, next((i for i in ids if i != a), a)
    return (ids[1] if len(ids) > 1 else (ids[0] if ids else None)), (ids[0] if ids else None)
