"""`rlvr-explorer simulate` and `generate`: what-if replays and synthetic workloads, run in
this process (no worker needed). Registered on the main CLI app by rlvr_explorer.cli.main."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer
from tqdm import tqdm

from core.simulator.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_N_GPUS, DEFAULT_POLICY
from core.simulator.policies import POLICIES
from rlvr_explorer.cli.main import _team_id, app

# the policy choices, from the simulator's policy registry
POLICY_HELP = "; ".join(f"{kind}: {spec.help}" for kind, spec in POLICIES.items())


def _team_trace(trace_id: int, team_id: int):
    """The team's ready trace (detached), or a usage error."""
    from backend.store.db import session_scope
    from backend.store.models import Trace, TraceStatus

    with session_scope() as session:
        trace = session.get(Trace, trace_id)
        if trace is None or trace.team_id != team_id:
            raise typer.BadParameter(f"trace {trace_id} not found for this team", param_hint="TRACE_ID")
        if trace.status != TraceStatus.READY:
            raise typer.BadParameter(f"trace {trace_id} is {trace.status}, not ready", param_hint="TRACE_ID")
        session.expunge(trace)
        return trace


def _progress_bar(desc: str):
    bar = tqdm(total=100, unit="%", desc=desc, bar_format="{l_bar}{bar}| {n:.0f}% {postfix}")

    def progress(fraction: float, message: str) -> None:
        bar.n = min(100, round(fraction * 100))
        bar.set_postfix_str(message[:60])
        bar.refresh()

    return bar, progress


def _step_range_option(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        lo, hi = (int(x) for x in value.split(":"))
    except ValueError:
        raise typer.BadParameter("expected FIRST:END, e.g. 0:10", param_hint="--steps") from None
    return [lo, hi]


@app.command()
def simulate(
    trace_id: Annotated[int, typer.Argument(help="The trace to replay")],
    gpu: Annotated[str, typer.Option(help="GPU preset (H100, A100, H20, ...)")] = DEFAULT_GPU,
    model: Annotated[str, typer.Option(help="Model preset (e.g. qwen2.5-7b)")] = DEFAULT_MODEL,
    gpus: Annotated[int | None, typer.Option(help=f"GPU budget of every policy (default {DEFAULT_N_GPUS})")] = None,
    replicas: Annotated[
        int | None, typer.Option(help="Rollout replicas (default: derived per policy from --gpus)")
    ] = None,
    tp: Annotated[
        int | None, typer.Option(help="Rollout tensor parallel size (default: smallest that fits the model)")
    ] = None,
    train_dp: Annotated[
        int | None, typer.Option(help="Training data-parallel ranks (default: derived per policy)")
    ] = None,
    max_running_seqs: Annotated[int | None, typer.Option(help="Running sequences per replica (default 256)")] = None,
    policy: Annotated[str, typer.Option(help=POLICY_HELP)] = DEFAULT_POLICY,
    compare: Annotated[str | None, typer.Option(help="Policy B to compare with")] = None,
    calibrate_steps: Annotated[
        list[int] | None,
        typer.Option(
            help="Calibrate on this step (repeatable); default: on the first step when the trace has measured timings"
        ),
    ] = None,
    no_calibrate: Annotated[
        bool, typer.Option("--no-calibrate", help="Never calibrate (roofline coefficients)")
    ] = False,
    steps: Annotated[str | None, typer.Option(help="Step range FIRST:END (end exclusive)")] = None,
    mc_runs: Annotated[
        int | None, typer.Option(help="Monte-Carlo runs of the residual noise (default: by a convergence check)")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the Monte-Carlo replay")] = 0,
    deterministic: Annotated[
        bool, typer.Option("--deterministic", help="No Monte-Carlo replay: predict with the replay of mean latencies")
    ] = False,
    rolling_origin: Annotated[
        bool,
        typer.Option(
            "--rolling-origin",
            help="Also evaluate accuracy by rolling origin (calibrate on earlier steps, predict each)",
        ),
    ] = False,
    forecast: Annotated[
        bool,
        typer.Option(
            "--forecast",
            help="Also forecast each step after the calibration steps from earlier workloads only (drawn with drift)",
        ),
    ] = False,
    window: Annotated[
        int | None, typer.Option(help="Rolling origin: calibrate on at most this many earlier steps (default 4)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON (without the timeline)")] = False,
    api_key: Annotated[str | None, typer.Option(envvar="RLVR_API_KEY", help="Team key (default: local team)")] = None,
) -> None:
    """Replay a trace on a described cluster in this process (no worker needed)."""
    from backend.jobs.simulations import error_field, simulation_params
    from backend.store.db import get_engine
    from workers.runners.simulations import load_columns, replay, result_dict, steps_of_columns

    cluster = {"gpu": gpu, "n_gpus": gpus, "rollout_replicas": replicas, "rollout_tp": tp, "train_dp": train_dp}
    body = {
        "trace_id": trace_id,
        "cluster": {k: v for k, v in cluster.items() if v is not None},
        "model": model,
        "limits": {"max_running_seqs": max_running_seqs} if max_running_seqs else {},
        "policy": policy,
        "compare_policy": compare,
        "calibrate": False if no_calibrate else ({"fit_steps": list(calibrate_steps)} if calibrate_steps else None),
        "steps": _step_range_option(steps),
        "uncertainty": False if deterministic else {"runs": mc_runs, "seed": seed},
        "rolling_origin": ({"window": window} if window else True) if rolling_origin else None,
        "forecast": True if forecast else None,
    }
    try:
        params = simulation_params(body)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=error_field(exc) or "options") from None
    trace = _team_trace(trace_id, _team_id(api_key))
    with get_engine().connect() as conn:
        columns = load_columns(conn, trace, tuple(params["steps"]) if params["steps"] else None)
    try:
        workload = steps_of_columns(columns, trace.max_response_len)
        if not workload:
            raise ValueError("steps: no training steps to replay")
        bar, progress = _progress_bar("simulate")
        try:
            outcome = replay(workload, params, progress)
            progress(1.0, "done")
        finally:
            bar.close()
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    result = result_dict(outcome)
    for key in ("a", "b"):
        if result[key] is not None:
            result[key].pop("timeline", None)
            result[key].pop("timeline_truncated", None)
    if as_json:
        typer.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return
    typer.echo(_simulation_summary(trace, params, result))


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _acc(fig: dict, prefix: str) -> str:
    """Accuracy, or the signed relative error where accuracy would be below 0."""
    a, e = fig.get(f"{prefix}accuracy"), fig.get(f"{prefix}rel_error")
    if a is not None:
        return _pct(a)
    return "-" if e is None else f"rel. error {100 * e:+.0f}%"


def _simulation_summary(trace, params: dict, result: dict) -> str:
    c, a, b = params["cluster"], result["a"], result["b"]
    name_a, name_b = params["policy"]["kind"], (params["compare_policy"] or {}).get("kind")
    w = result["workload"]
    lines = [
        f"trace {trace.id} ({trace.name}): {w['steps']} steps, {w['samples']:,} samples"
        f"{' (multi-turn)' if w['multiturn'] else ''}",
        f"cluster: {c['n_gpus']} x {c['gpu']['name']}, rollout {c['rollout_replicas']} x TP{c['rollout_tp']}, "
        f"training DP{c['train_dp']} x TP{c['train_tp']}; model {params['model']['name']}",
    ]
    cb = params.get("compare_cluster")
    if cb is not None and name_b is not None:
        lines.append(
            f"cluster of {name_b}: the same {cb['n_gpus']} GPUs, rollout {cb['rollout_replicas']} x TP{cb['rollout_tp']}, "
            f"training DP{cb['train_dp']} x TP{cb['train_tp']}"
        )
    cal = result["calibration"]
    if cal is not None:
        cost = "" if cal["cost"] is None else f", cost {cal['cost']:.3g}"
        lines.append(f"calibration: {cal['method']} on step(s) {', '.join(map(str, cal['fit_steps']))}{cost}")
    head = f"{'step':>6} {'rollout_s':>10} {'step_s ' + name_a:>22}"
    if b is not None:
        head += f" {'step_s ' + name_b:>24} {'speedup':>8}"
    lines += ["", head]
    b_steps = {s["step"]: s for s in b["steps"]} if b is not None else {}
    for s in a["steps"]:
        row = f"{s['step']:>6} {s['stages'].get('rollout', 0.0):>10.2f} {s['step_time']:>22.2f}"
        if b is not None and s["step"] in b_steps:
            tb = b_steps[s["step"]]["step_time"]
            row += f" {tb:>24.2f} {(s['step_time'] / tb if tb else float('nan')):>8.3f}"
        lines.append(row)
    lines.append("")
    idle_a = a["idle_fraction"]
    lines.append(
        f"makespan {name_a}: {a['makespan_s']:.1f} s, idle GPU share {_pct(idle_a)}, "
        f"{a['throughput_tokens_per_s_per_gpu']:.1f} generated tokens/s/GPU"
    )
    for which, r in (("A", a), ("B", b)):
        for warning in (r or {}).get("warnings") or []:
            lines.append(f"warning (policy {which}): {warning}")
    if b is not None:
        t = result["compare"]["total"]
        lines.append(
            f"makespan {name_b}: {b['makespan_s']:.1f} s, idle GPU share {_pct(b['idle_fraction'])}, "
            f"{b['throughput_tokens_per_s_per_gpu']:.1f} generated tokens/s/GPU"
        )
        lines.append(f"speedup of {name_b} over {name_a}: {t['speedup']:.3f}x (saved {t['saved_s']:.1f} s)")
    unc = result.get("uncertainty")
    if unc is not None and unc["steps"]:
        lines += [
            "",
            f"uncertainty (Monte-Carlo of the calibrated residual noise; mean [P{unc['interval'][0]}-P{unc['interval'][1]}]):",
        ]
        for row in unc["steps"]:
            r = row["rollout_s"]
            line = f"  step {row['step']}: rollout {r['mean']:.1f} s [{r['p10']:.1f}-{r['p90']:.1f}]"
            if "step_s_a" in row:
                sa = row["step_s_a"]
                line += f", step {sa['mean']:.1f} s [{sa['p10']:.1f}-{sa['p90']:.1f}]"
            line += f" ({row['n_runs']} runs)"
            lines.append(line)
        if unc.get("warning"):
            lines.append(f"  warning: {unc['warning']}")
    acc = result["accuracy"]
    if acc is not None and acc["steps"]:
        how = "Monte-Carlo mean" if acc.get("predictor") == "mc_mean" else "deterministic replay"
        lines += ["", f"accuracy on steps not used for fitting (predicted from their workload alone, {how}):"]
        for row in acc["steps"]:
            r = row["rollout_s"]
            if r["measured"] is None:
                continue
            interval = f" [{r['interval'][0]:.1f}-{r['interval'][1]:.1f}]" if "interval" in r else ""
            flag = " PARTIAL workload (kept out of the mean)" if row.get("partial") else ""
            lines.append(
                f"  step {row['step']}: rollout measured {r['measured']:.1f} s, predicted {r['predicted']:.1f} s{interval} "
                f"({_acc(r, '')}; naive {_acc(r, 'naive_')}), p50 trajectory "
                f"{_acc(row['p50_traj_s'], '')}, p90 trajectory {_acc(row['p90_traj_s'], '')}{flag}"
            )
        m = acc["mean"]
        cov = m.get("rollout_s_coverage")
        lines.append(
            f"  mean over {len(m.get('steps', []))} step(s): rollout {_pct(m['rollout_s_accuracy'])} "
            f"(naive {_pct(m['rollout_s_naive_accuracy'])})"
            + ("" if cov is None else f", interval coverage {_pct(cov)}")
        )
    fc = result.get("forecast")
    if fc is not None and fc["steps"]:
        lines += ["", "forecast (workload drawn from earlier steps with drift, not the step's own; MC mean [P10-P90]):"]
        for row in fc["steps"]:
            r = row["rollout_s"]
            flag = " PARTIAL workload (kept out of the mean)" if row.get("partial") else ""
            meas = "-" if r["measured"] is None else f"{r['measured']:.1f} s"
            lines.append(
                f"  step {row['step']} (from {','.join(map(str, row['history']))}): rollout forecast "
                f"{r['predicted']:.1f} s [{r['interval'][0]:.1f}-{r['interval'][1]:.1f}], measured {meas} "
                f"({_acc(r, '')}; repeat previous {_acc(r, 'naive_previous_')}){flag}"
            )
        m = fc["mean"]
        if m.get("steps"):
            lines.append(
                f"  mean over {len(m['steps'])} step(s): rollout {_pct(m.get('rollout_s_accuracy'))} "
                f"(repeat previous {_pct(m.get('rollout_s_naive_previous_accuracy'))}), "
                f"coverage {_pct(m.get('rollout_s_coverage'))}"
            )
    ro = result.get("rolling_origin")
    if ro is not None:
        lines += ["", _rolling_origin_summary(ro)]
    return "\n".join(lines)


def _rolling_origin_summary(ro: dict) -> str:
    win = "all earlier steps" if ro["window"] is None else f"at most {ro['window']} earlier steps"
    how = "Monte-Carlo mean" if ro["predictor"] == "mc_mean" else "deterministic replay"
    lines = [f"rolling-origin accuracy (each step predicted from a calibration on {win}; {how}):"]
    for row in ro["steps"]:
        r = row["rollout_s"]
        if r["measured"] is None:
            continue
        flag = " PARTIAL workload (kept out of the mean)" if row.get("partial") else ""
        lines.append(
            f"  step {row['step']} (fit on {','.join(map(str, row['calibrated_on']))}): rollout measured "
            f"{r['measured']:.1f} s, predicted {r['predicted']:.1f} s ({_acc(r, '')}); repeat previous "
            f"{_acc(r, 'naive_previous_')}; mean of fitted {_acc(r, 'naive_')}{flag}"
        )
    m = ro["mean"]
    if m.get("steps"):
        lines.append(
            f"  mean over {len(m['steps'])} eligible step(s): rollout {_pct(m.get('rollout_s_accuracy'))} "
            f"(repeat previous {_pct(m.get('rollout_s_naive_previous_accuracy'))}, mean of fitted "
            f"{_pct(m.get('rollout_s_naive_accuracy'))}, deterministic replay "
            f"{_pct(m.get('rollout_s_deterministic_accuracy'))}), P10-P90 coverage {_pct(m.get('rollout_s_coverage'))}"
        )
    return "\n".join(lines)


@app.command()
def advise(
    trace_id: Annotated[int, typer.Argument(help="The trace to advise on")],
    gpus: Annotated[int, typer.Option(help="GPU budget every configuration uses")] = DEFAULT_N_GPUS,
    gpu: Annotated[str, typer.Option(help="GPU preset (H100, A100, H20, ...)")] = DEFAULT_GPU,
    model: Annotated[str, typer.Option(help="Model preset (e.g. qwen2.5-7b)")] = DEFAULT_MODEL,
    policy: Annotated[list[str] | None, typer.Option(help="Policies to sweep (repeatable; default all)")] = None,
    steps: Annotated[str | None, typer.Option(help="Step range FIRST:END (end exclusive)")] = None,
    no_calibrate: Annotated[bool, typer.Option("--no-calibrate", help="Roofline engine, no calibration")] = False,
    workers: Annotated[int | None, typer.Option(help="Processes for the sweep (default: the CPUs)")] = None,
    top: Annotated[int, typer.Option(help="Configurations to print")] = 15,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON")] = False,
    api_key: Annotated[str | None, typer.Option(envvar="RLVR_API_KEY", help="Team key (default: local team)")] = None,
) -> None:
    """Sweep layouts, policies, DP balancing and engine concurrency on a GPU budget; rank by step time."""
    from backend.jobs.advice import advice_params
    from backend.jobs.simulations import error_field
    from backend.store.db import get_engine
    from workers.runners.advice import advice_of
    from workers.runners.simulations import load_columns, steps_of_columns

    body = {"trace_id": trace_id, "gpu": gpu, "n_gpus": gpus, "model": model, "steps": _step_range_option(steps)}
    if policy:
        body["policies"] = list(policy)
    if no_calibrate:
        body["calibrate"] = False
    try:
        params = advice_params(body)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=error_field(exc) or "options") from None
    trace = _team_trace(trace_id, _team_id(api_key))
    with get_engine().connect() as conn:
        columns = load_columns(conn, trace, tuple(params["steps"]) if params["steps"] else None)
    try:
        workload = steps_of_columns(columns, trace.max_response_len)
        if not workload:
            raise ValueError("steps: no training steps to advise on")
        bar, progress = _progress_bar("advise")
        try:
            out = advice_of(workload, params, progress, workers=workers)
            progress(1.0, "done")
        finally:
            bar.close()
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if as_json:
        typer.echo(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
        return
    typer.echo(_advice_summary(trace, params, out, top))


def _advice_summary(trace, params: dict, out: dict, top: int) -> str:
    cal = out.get("calibration")
    lines = [
        f"trace {trace.id} ({trace.name}): {out['workload']['steps']} steps; {params['n_gpus']} x {params['gpu']['name']}, "
        f"model {params['model']['name']}; "
        + (f"engine calibrated on step(s) {', '.join(map(str, cal['fit_steps']))}" if cal else "roofline engine"),
        f"{out['n_configurations']} configurations ranked by predicted step time (mean over non-partial steps; P10-P90"
        + (" of the Monte-Carlo replay)" if out.get("uncertainty") else ": no calibrated noise)"),
        "",
        f"{'rank':>4} {'step_s':>9} {'P10-P90':>17} {'vs best':>8}  configuration",
    ]
    for i, r in enumerate(out["ranking"][:top], 1):
        s = r["step_s"]
        lines.append(f"{i:>4} {s['mean']:>9.1f} {s['p10']:>8.1f}-{s['p90']:<8.1f} {r['vs_best']:>7.3f}x  {r['label']}")
    lines += ["", "who wins where:"]
    for rg in out["ranges"]:
        a, b = rg["steps"]
        where = f"step {a}" if a == b else f"steps {a}-{b}"
        margin = (
            f"{100 * rg['margin_min']:.1f}%"
            if rg["margin_min"] == rg["margin_max"]
            else (f"{100 * rg['margin_min']:.1f}-{100 * rg['margin_max']:.1f}%")
        )
        flag = " (partial workload)" if any(w["partial"] for w in out["per_step"] if a <= w["step"] <= b) else ""
        lines.append(f"  {where}: {rg['winner']}, {margin} faster than the runner-up{flag}")
    return "\n".join(lines)


@app.command()
def generate(
    out: Annotated[Path, typer.Option(help="Folder to write the files to")],
    from_trace: Annotated[int | None, typer.Option(help="Fit this trace and generate from the fit")] = None,
    params: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="PolyTrace parameter file (enhanced_task_distribution_parameters.json)"
        ),
    ] = None,
    task: Annotated[str | None, typer.Option(help="math | tool_calling (parameter file), or a fitted task")] = None,
    steps: Annotated[int, typer.Option(help="Steps to generate (0 with --from-trace: fit report only)")] = 1,
    groups: Annotated[int | None, typer.Option(help="Prompt groups per step")] = None,
    n: Annotated[int | None, typer.Option("--n", help="Samples per group")] = None,
    seed: int = 0,
    format: Annotated[list[str] | None, typer.Option(help="packed | compact | multiturn (repeatable)")] = None,
    dp_size: Annotated[int, typer.Option(help="DP ranks the packed rows are dealt to")] = 1,
    ingest: Annotated[bool, typer.Option("--ingest/--no-ingest", help="Also ingest it as a trace")] = False,
    name: Annotated[str | None, typer.Option(help="Trace name when ingesting")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="RLVR_API_KEY", help="Team key (default: local team)")] = None,
) -> None:
    """Generate a synthetic PolyTrace-style workload from a fitted trace or a parameter file."""
    from backend.jobs.simulations import error_field, workload_params
    from backend.store.db import get_engine
    from workers.runners.simulations import load_columns
    from workers.runners.workloads import default_name, fit_models, ingest_files, ingest_generated, summary, write_files
    from workers.runners.workloads import generate as generate_steps_of

    body = {
        "trace_id": from_trace,
        "task": task,
        "steps": steps,
        "groups": groups,
        "samples_per_group": n,
        "seed": seed,
        "formats": format,
        "ingest": ingest,
        "name": name,
        "dp_size": dp_size,
    }
    if params is not None:
        try:
            body["parameters"] = orjson.loads(params.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--params") from None
    team_id = _team_id(api_key) if (from_trace is not None or ingest) else None
    trace = _team_trace(from_trace, team_id) if from_trace is not None else None
    try:
        p = workload_params(
            {k: v for k, v in body.items() if v is not None}, multiturn_trace=bool(trace is not None and trace.n_turns)
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=error_field(exc) or "options") from None
    try:
        models = None
        if trace is not None:
            with get_engine().connect() as conn:
                columns = load_columns(conn, trace)
            models = fit_models(columns, trace.tasks, trace.max_response_len, seed)
        generated = generate_steps_of(p, models) if p["steps"] else []
        files = write_files(out, generated, p["formats"], p["dp_size"], models)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    result = summary(p, generated, models)
    result["files"] = sorted(str(x) for paths in files.values() for x in paths)
    chosen = ingest_files(files)
    if ingest and chosen:
        bar, progress = _progress_bar("ingest")
        try:
            result.update(ingest_generated(team_id, chosen, name or default_name(p, result), progress))
        finally:
            bar.close()
    typer.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode())
