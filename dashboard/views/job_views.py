"""Jobs said for a reader: what a replay's figures say while there is none to draw, one
line per job's parameters (the history tables, the Jobs page), how long a job ran, and
the fields of an analysis' re-run form. The panel that starts and follows a page's jobs
is `views.job_panel`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from dashboard.figures.simulation import policy_names
from dashboard.views.formatting import job_active
from dashboard.views.number_fields import Bounds, check_number

NO_REPLAY = "Configure a replay above and press Replay"


def replay_placeholder(job: dict | None) -> str:
    """What a replay's figures say while there is no succeeded replay to draw: how to
    start one, that the one started is running, or why it failed."""
    if not job:
        return NO_REPLAY
    if job_active(job):
        status = job.get("status") or "queued"
        return f"Replay {job['id']} is {status} (progress above): its figures appear here when it finishes"
    if job.get("status") == "failed":
        return f"Replay {job['id']} failed ({job.get('error') or 'unknown error'}): change the configuration and replay"
    return NO_REPLAY


def describe_simulation(job: dict) -> str:
    """One line for the history table: policies, cluster, steps, calibration."""
    params = job.get("params") or {}
    a, b = policy_names(job)
    c = params.get("cluster") or {}
    gpu = (c.get("gpu") or {}).get("name") if isinstance(c.get("gpu"), dict) else c.get("gpu")
    steps = params.get("steps")
    cal = params.get("calibrate")
    cal_text = (
        "calibration off"
        if cal is False
        else (
            f"calibrated on {cal.get('fit_steps') or 'the first step'}" if isinstance(cal, dict) else "calibration auto"
        )
    )
    rng = (
        f"steps {steps[0]}-{steps[1] - 1}"
        if steps and steps[1] < 1 << 29
        else (f"from step {steps[0]}" if steps else "all steps")
    )
    return (
        f"{a}" + (f" vs {b}" if b else "") + f"; {c.get('n_gpus', '?')} x {gpu or '?'}, "
        f"{c.get('rollout_replicas', '?')} x TP{c.get('rollout_tp', '?')} rollout, DP{c.get('train_dp', '?')}; "
        f"{(params.get('model') or {}).get('name', '')}; {rng}; {cal_text}"
    )


def describe_workload(job: dict) -> str:
    """One line for a workload job: fit only, or steps x groups x samples, seed, files."""
    p = job.get("params") or {}
    if not p.get("steps"):
        return "fit only"
    groups = p.get("groups") or "as fitted"
    n = p.get("samples_per_group") or "as fitted"
    return f"{p['steps']} steps x {groups} groups x {n} samples, seed {p.get('seed', 0)}, {', '.join(p.get('formats') or [])}"


def _value_text(value) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_value_text(v) for v in value) or "none"
    if isinstance(value, dict):
        return "; ".join(f"{k.replace('_', ' ')} {_value_text(v)}" for k, v in value.items())
    return str(value)


def describe_params(job: dict) -> str:
    """A job's parameters as a reader wants them: a replay's policies and cluster, a
    workload's shape, an ingestion's options, an analysis' `name value` pairs."""
    kind, params = job.get("kind"), dict(job.get("params") or {})
    if kind == "simulation":
        return describe_simulation(job)
    if kind == "workload":
        return describe_workload(job)
    if kind == "ingest":
        shown = {k: v for k, v in params.items() if k in ("format", "max_response_len") and v is not None}
        return ", ".join(f"{k.replace('_', ' ')} {_value_text(v)}" for k, v in shown.items()) or "detected format"
    params.pop("trace_id", None)
    return ", ".join(f"{k.replace('_', ' ')} {_value_text(v)}" for k, v in sorted(params.items())) or "defaults"


def _parse_time(ts) -> datetime | None:
    if not ts:
        return None
    try:
        t = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def human_seconds(seconds: float) -> str:
    """0.3 -> '< 1 s', 42 -> '42 s', 192 -> '3 min 12 s', 7300 -> '2 h 1 min'."""
    if seconds < 0.5:
        return "< 1 s"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def job_duration(job: dict, now: datetime | None = None) -> str:
    """How long the job ran (started to finished), how long it has been running, or '—'."""
    start, end = _parse_time(job.get("started_at")), _parse_time(job.get("finished_at"))
    if start is None:
        return "waiting for a worker" if job.get("status") == "queued" else "—"
    if end is None:
        if not job_active(job):
            return "—"
        return "running " + human_seconds(((now or datetime.now(UTC)) - start).total_seconds())
    return human_seconds((end - start).total_seconds())


ANY_NUMBER = Bounds(integer=False)  # the API checks an analysis parameter's range (its 422 names it)


def param_fields(params: dict) -> list[tuple[str, str, object]]:
    """(name, widget type, value) per analysis parameter for the re-run form: 'bool' for
    yes/no, 'number' for numbers, 'text' for the rest (None: 'optional', left to the
    analysis' default)."""
    out: list[tuple[str, str, object]] = []
    for name, value in sorted((params or {}).items()):
        if name == "trace_id":
            continue
        if isinstance(value, bool):
            out.append((name, "bool", value))
        elif isinstance(value, (int, float)):
            out.append((name, "number", value))
        elif value is None:
            out.append((name, "optional", None))
        elif isinstance(value, str):
            out.append((name, "text", value))
        else:
            out.append((name, "json", value))
    return out


def params_from_fields(fields: list[tuple[str, str]], values: list) -> dict:
    """The analysis parameters (see `read_fields`); ValueError names a refused value."""
    params, errors = read_fields(fields, values)
    if errors:
        raise ValueError("; ".join(f"{k}: {v}" for k, v in errors.items()))
    return params


def read_fields(fields: list[tuple[str, str]], values: list) -> tuple[dict, dict[str, str]]:
    """(the analysis parameters, {name: why its value is refused}) from the re-run form's
    (name, widget type) fields and their values (a checklist ["yes"] / [] for 'bool',
    numbers as typed); an empty number field is left out, so the analysis uses its
    default (the field's placeholder says so), and text that is not a number is refused,
    never replaced by the default."""
    out: dict = {}
    errors: dict[str, str] = {}
    for (name, kind), value in zip(fields, values):
        if kind == "bool":
            out[name] = "yes" in (value or [])
        elif kind in ("number", "optional"):
            number, err = check_number(value, ANY_NUMBER)
            if err:
                errors[name] = err
            elif number is not None:
                out[name] = int(number) if float(number).is_integer() else number
        elif kind == "json":
            out[name] = json.loads(value) if isinstance(value, str) else value
        else:
            out[name] = value
    return out, errors
