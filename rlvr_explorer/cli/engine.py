"""`rlvr-explorer calibrate-engine` and `engine-replay`: a trace's work acted out on a real
inference engine (vLLM, in the engine environment: `bash deploy/engine-venv.sh DIR`) and
held against the simulator's prediction from an engine profile. Registered on the main
CLI app lazily (rlvr_explorer.cli.main.LAZY_COMMANDS)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rlvr_explorer.cli.main import INT_MAX, command, ensure_schema, team_id_of
from rlvr_explorer.cli.output import JsonFlag, emit, fail
from rlvr_explorer.cli.whatif import KeyOption, policy_params, step_range_option, team_trace, trace_workload

ArchOption = Annotated[
    str, typer.Option(help="Preset architecture of the random-weight model (tiny, qwen2.5-0.5b, qwen2.5-7b, ...)")
]
ModelPathOption = Annotated[
    Path | None, typer.Option(file_okay=False, help="A local model folder instead of a random-weight preset")
]


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _run(fn, *args, **kwargs):
    """Run an engine command; a missing engine or bad input as an error line."""
    from engine.client import EngineFailed, EngineMissing

    try:
        return fn(*args, **kwargs)
    except EngineMissing as exc:
        fail(str(exc), 1)
    except EngineFailed as exc:
        fail(f"the engine failed: {exc}", 1)
    except ValueError as exc:
        fail(str(exc))


@command("calibrate-engine")
def calibrate_engine(
    arch: ArchOption = "tiny",
    model_path: ModelPathOption = None,
    as_json: JsonFlag = False,
    api_key: Annotated[str | None, KeyOption] = None,
) -> None:
    """Measure the inference engine's iteration times (a batch x context sweep) and store them as an engine profile."""
    from engine.runs import calibrate_engine as calibrate

    ensure_schema()
    team_id = team_id_of(api_key)
    profile = _run(calibrate, team_id, arch, model_path, _say)
    emit(profile, _profile_summary, as_json)


def _profile_summary(p: dict) -> str:
    c, f = p["coefficients"], p["fit"]
    return (
        f"engine profile {p['id']}: {p['engine']} on {p['device']}, {p['arch']}, TP {p['tp']}\n"
        f"  decode iteration = {c['decode_a'] * 1e3:.2f} ms + {c['decode_b'] * 1e6:.3f} µs/KV token "
        f"+ {c['decode_c'] * 1e6:.1f} µs/sequence (R² {f['decode_r2']:.2f}, {f['decode_steps']} steps)\n"
        f"  prefill iteration = {c['prefill_a'] * 1e3:.2f} ms + {c['prefill_b'] * 1e6:.2f} µs/token "
        f"+ {c['prefill_c'] * 1e9:.4f} ns/token² (R² {f['prefill_r2']:.2f}, {f['prefill_points']} points); "
        f"sweep {f['sweep_s']:.0f} s"
    )


@command("engine-replay")
def engine_replay(
    trace_id: Annotated[int, typer.Argument(min=1, max=INT_MAX, help="The trace to replay")],
    policy: Annotated[str, typer.Option(help="A policy that runs on an engine (sync, partial, length_ranked)")],
    policy_param: Annotated[
        list[str] | None, typer.Option(metavar="KEY=VALUE", help="A parameter of the policy (repeatable)")
    ] = None,
    steps: Annotated[str | None, typer.Option(metavar="FIRST:END", help="Replay steps [FIRST, END)")] = None,
    max_requests: Annotated[
        int | None, typer.Option(min=1, max=INT_MAX, help="At most this many requests per step (whole groups)")
    ] = None,
    length_scale: Annotated[
        float, typer.Option(min=1e-6, help="Scale every prompt and response length (e.g. 0.1 on a small machine)")
    ] = 1.0,
    profile: Annotated[
        int | None, typer.Option(min=1, max=INT_MAX, help="Engine profile to predict from (default: the latest)")
    ] = None,
    engines: Annotated[int | None, typer.Option(min=1, max=64, help="Engines (default: the policy's own)")] = None,
    arch: ArchOption = "tiny",
    model_path: ModelPathOption = None,
    as_json: JsonFlag = False,
    api_key: Annotated[str | None, KeyOption] = None,
) -> None:
    """Replay a trace on a real inference engine under a policy, beside the simulator's prediction of the same workload."""
    from backend.store.models import utcnow
    from core.simulator.policies import POLICIES
    from engine.runs import replay_on_engine

    if policy not in POLICIES:
        fail(f"--policy: must be one of {', '.join(POLICIES)}, got {policy!r}")
    ensure_schema()
    team_id = team_id_of(api_key)
    trace = team_trace(trace_id, team_id)
    step_range = step_range_option(steps)
    params = _run(policy_params, policy, policy_param, "--policy-param")
    workload = _run(trace_workload, trace, step_range, "replay")
    started = utcnow()
    out = _run(
        replay_on_engine,
        team_id,
        workload,
        policy,
        params,
        max_requests=max_requests,
        length_scale=length_scale,
        profile_id=profile,
        engines=engines,
        arch=arch,
        model_path=model_path,
        progress=_say,
    )
    out["trace_id"] = trace_id
    out["job_id"] = _record(team_id, trace_id, step_range, out, started)
    emit(out, _replay_summary, as_json)


def _record(team_id: int, trace_id: int, step_range, out: dict, started) -> int:
    """The run kept as a finished engine-replay job of its trace (the API's
    `/traces/{id}/engine-replays` and the Simulate page show it)."""
    from backend.jobs.engine_replay import engine_replay_params, record_engine_replay
    from backend.store.db import session_scope

    options = {
        "steps": list(step_range) if step_range else None,
        "max_requests": out["workload"]["max_requests"],
        "length_scale": out["workload"]["length_scale"],
        "profile_id": out["profile_id"],
        "engines": out["engines"],
        "arch": out["arch"],
    }
    params = engine_replay_params(trace_id, out["policy"], out["params"], **options)
    with session_scope() as session:
        return record_engine_replay(session, team_id, params, out, started).id


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}%"


def _replay_summary(r: dict) -> str:
    m, p = r["measured"], r["predicted"]
    lines = [
        f"trace {r['trace_id']} on {r['engines']} x {r['engine']} ({r['device']}, {r['arch']}), policy {r['policy']}: "
        f"{r['requests']} requests over {r['steps']} steps, {r['finished']} finished, {r['aborted']} aborted; "
        f"lengths exact: {'yes' if r['lengths_exact'] else 'NO'}",
        f"{'':24}{'measured':>12}{'predicted':>12}",
    ]
    for key, label in (
        ("makespan_s", "rollout makespan (s)"),
        ("p50_completion_s", "p50 completion (s)"),
        ("p90_completion_s", "p90 completion (s)"),
        ("decoded_tokens", "decoded tokens"),
    ):
        lines.append(f"{label:24}{m[key]:>12.6g}{p[key]:>12.6g}")
    e = r["error"]
    lines.append(
        f"error (predicted vs measured): makespan {_pct(e['makespan'])}, p90 completion {_pct(e['p90_completion'])} "
        f"(prediction from engine profile {r['profile_id']})"
    )
    shares = ", ".join(f"{s:.0%}" for s in r.get("cpu_share", []) if s is not None)
    if shares:
        lines.append(f"engine processes on a CPU for {shares} of their step time (the rest: other processes' load)")
    lines += [f"warning: {w}" for w in r.get("warnings", [])]
    return "\n".join(lines)
