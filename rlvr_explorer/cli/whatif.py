"""`rlvr-explorer simulate` and `generate`: what-if replays and synthetic workloads, run in
this process (no worker needed). Registered on the main CLI app by rlvr_explorer.cli.main."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from core.simulator.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_N_GPUS, DEFAULT_POLICY
from core.simulator.explain import explain_text
from core.simulator.model_guess import model_proposal
from core.simulator.policies import POLICIES
from core.simulator.policies.spec import check_value
from rlvr_explorer.cli.main import INT_MAX, command, progress_bar, team_id_of
from rlvr_explorer.cli.output import JsonFlag, emit, fail

if TYPE_CHECKING:
    from core.simulator.advice import AdviceRequest
    from core.simulator.request import ReplayRequest

# the policy choices, from the simulator's policy registry
POLICY_HELP = "; ".join(f"{kind}: {spec.help}" for kind, spec in POLICIES.items())
PARAM_HELP = "A parameter of policy {} as KEY=VALUE (repeatable; `rlvr-explorer policies` lists them)"


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


def _int_option(help: str, lo: int | None = None, metavar: str = "INTEGER"):
    """An integer option bounded like the API (and the database's INTEGER columns)."""
    return typer.Option(min=lo, max=INT_MAX, metavar=metavar, help=help)


KeyOption = typer.Option(envvar="RLVR_API_KEY", metavar="KEY", help="Team key (default: local team)")


def _trace_workload(trace, steps: tuple[int, int] | None, what: str) -> list:
    """The trace's training steps (in [first, end) when given) as simulator workloads;
    ValueError when there are none."""
    from backend.store.db import get_engine
    from workers.runners.simulations import load_columns, steps_of_columns

    with get_engine().connect() as conn:
        columns = load_columns(conn, trace, (steps[0], steps[1]) if steps else None)
    workload = steps_of_columns(columns, trace.max_response_len)
    if not workload:
        raise ValueError(f"steps: no training steps to {what}")
    return workload


def policy_params(kind: str, pairs: list[str] | None, option: str) -> dict:
    """`KEY=VALUE` texts as parameters of registered policy `kind`, each read by its
    declared type (``null`` where nullable) and checked; ValueError naming the option,
    the parameter and what it takes."""
    spec = POLICIES[kind]
    infos = {i.name: i for i in spec.param_infos}
    out = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        key = key.strip()
        info = infos.get(key)
        if info is None or not sep:
            known = "; ".join(f"{n}: {i.allowed()}" for n, i in infos.items()) or "none"
            what = f"not a parameter of policy {kind}" if sep else "expected KEY=VALUE"
            raise ValueError(f"{option} {pair}: {what} (its parameters: {known})")
        try:
            out[key] = check_value(info, info.parse(text), key)
        except ValueError as exc:
            reason = str(exc).removeprefix(f"{key}: ")
            takes = "" if info.allowed() in reason else f" (takes {info.allowed()})"
            raise ValueError(f"{option} {key}: {reason}{takes}") from None
    return out


def _policy_option(kind: str | None, pairs: list[str] | None, option: str) -> str | dict | None:
    """The body's policy: the kind alone, or with its parameters (an unknown kind is
    left to the request's own check, which names the registered ones)."""
    if not pairs or kind not in POLICIES:
        return kind
    return {"kind": kind, "params": policy_params(kind, pairs, option)}


def _step_range_option(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        lo, hi = (int(x) for x in value.split(":"))
    except ValueError:
        raise typer.BadParameter("expected FIRST:END, e.g. 0:10", param_hint="--steps") from None
    return [lo, hi]


# Options long enough to read better here than in their command's signature.
CalibrateStepsOption = Annotated[
    list[int] | None,
    typer.Option(
        min=0,
        max=INT_MAX,
        metavar="STEP",
        help="Calibrate on this step (repeatable); default: on the first step when the trace has measured timings",
    ),
]
RollingOriginFlag = Annotated[
    bool,
    typer.Option(
        "--rolling-origin", help="Also evaluate accuracy by rolling origin (calibrate on earlier steps, predict each)"
    ),
]
ForecastFlag = Annotated[
    bool,
    typer.Option(
        "--forecast",
        help="Also forecast each step after the calibration steps from earlier workloads only (drawn with drift)",
    ),
]
SensitivityFlag = Annotated[
    bool,
    typer.Option(
        "--sensitivity",
        help="With --compare: also replay both policies at the low and high end of each uncalibrated model "
        "parameter and show the speedup's [min-max] band (2 more replays of each per parameter)",
    ),
]
ParamsFileOption = Annotated[
    Path | None,
    typer.Option(
        exists=True, dir_okay=False, help="PolyTrace parameter file (enhanced_task_distribution_parameters.json)"
    ),
]


@command()
def simulate(
    trace_id: Annotated[int, typer.Argument(min=1, max=INT_MAX, help="The trace to replay")],
    gpu: Annotated[str, typer.Option(metavar="GPU", help="GPU preset (H100, A100, H20, ...)")] = DEFAULT_GPU,
    model: Annotated[str, typer.Option(metavar="MODEL", help="Model preset (e.g. qwen2.5-7b)")] = DEFAULT_MODEL,
    gpus: Annotated[int | None, _int_option(f"GPU budget of every policy (default {DEFAULT_N_GPUS})")] = None,
    replicas: Annotated[int | None, _int_option("Rollout replicas (default: derived per policy from --gpus)")] = None,
    tp: Annotated[
        int | None, _int_option("Rollout tensor parallel size (default: smallest that fits the model)")
    ] = None,
    train_dp: Annotated[int | None, _int_option("Training data-parallel ranks (default: derived per policy)")] = None,
    max_running_seqs: Annotated[int | None, _int_option("Running sequences per replica (default 256)")] = None,
    policy: Annotated[str, typer.Option(metavar="POLICY", help=POLICY_HELP)] = DEFAULT_POLICY,
    compare: Annotated[str | None, typer.Option(metavar="POLICY", help="Policy B to compare with")] = None,
    policy_param: Annotated[
        list[str] | None, typer.Option("--policy-param", metavar="KEY=VALUE", help=PARAM_HELP.format("A"))
    ] = None,
    compare_param: Annotated[
        list[str] | None, typer.Option("--compare-param", metavar="KEY=VALUE", help=PARAM_HELP.format("B"))
    ] = None,
    calibrate_steps: CalibrateStepsOption = None,
    no_calibrate: Annotated[
        bool, typer.Option("--no-calibrate", help="Never calibrate (roofline coefficients)")
    ] = False,
    steps: Annotated[str | None, typer.Option(metavar="FIRST:END", help="Step range (end exclusive)")] = None,
    mc_runs: Annotated[
        int | None, _int_option("Monte-Carlo runs of the residual noise (default: by a convergence check)")
    ] = None,
    seed: Annotated[int, _int_option("Seed of the Monte-Carlo replay", lo=0)] = 0,
    deterministic: Annotated[
        bool, typer.Option("--deterministic", help="No Monte-Carlo replay: predict with the replay of mean latencies")
    ] = False,
    rolling_origin: RollingOriginFlag = False,
    forecast: ForecastFlag = False,
    sensitivity: SensitivityFlag = False,
    window: Annotated[
        int | None, _int_option("Rolling origin: calibrate on at most this many earlier steps (default 4)")
    ] = None,
    as_json: JsonFlag = False,
    api_key: Annotated[str | None, KeyOption] = None,
) -> None:
    """Replay a trace on a described cluster in this process (no worker needed)."""
    from backend.jobs.simulations import simulation_request

    cluster = {"gpu": gpu, "n_gpus": gpus, "rollout_replicas": replicas, "rollout_tp": tp, "train_dp": train_dp}
    policy_a, policy_b = _policies_option(policy, policy_param, compare, compare_param)
    body = {
        "trace_id": trace_id,
        "cluster": {k: v for k, v in cluster.items() if v is not None},
        "model": model,
        "limits": {"max_running_seqs": max_running_seqs} if max_running_seqs else {},
        "policy": policy_a,
        "compare_policy": policy_b,
        "calibrate": False if no_calibrate else ({"fit_steps": list(calibrate_steps)} if calibrate_steps else None),
        "steps": _step_range_option(steps),
        "uncertainty": False if deterministic else {"runs": mc_runs, "seed": seed},
        "rolling_origin": ({"window": window} if window else True) if rolling_origin else None,
        "forecast": True if forecast else None,
        "sensitivity": sensitivity,
    }
    request = _checked(simulation_request, body)
    trace = _team_trace(trace_id, team_id_of(api_key))
    result = _replay_result(trace, request)
    emit(result, lambda r: _simulation_summary(trace, request, r), as_json)


def _checked(to_request, body: dict):
    """The typed request of `body`: a layout that cannot hold the model is "error: ..."
    and exit 1; any other bad option a usage error naming it (exit 2)."""
    from backend.jobs.simulations import error_field
    from core.simulator.feasibility import InfeasibleLayout

    try:
        return to_request(body)
    except InfeasibleLayout as exc:
        fail(str(exc), 1)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=error_field(exc) or "options") from None


def _policies_option(policy: str, pairs_a: list[str] | None, compare: str | None, pairs_b: list[str] | None):
    """Policy A and B of the request, with their own parameters; a bad parameter is one
    line naming it and what it takes, and exit code 2."""
    try:
        if pairs_b and compare is None:
            raise ValueError("--compare-param needs --compare POLICY")
        return _policy_option(policy, pairs_a, "--policy-param"), _policy_option(compare, pairs_b, "--compare-param")
    except ValueError as exc:
        fail(str(exc))


def _replay_result(trace, request: ReplayRequest) -> dict:
    """The replay's result without its timelines, with each policy's parameters as used."""
    from core.simulator.replay import replay, result_dict

    try:
        workload = _trace_workload(trace, request.steps, "replay")
        bar, progress = progress_bar("simulate")
        try:
            outcome = replay(workload, request, progress)
            progress(1.0, "done")
        finally:
            bar.close()
    except ValueError as exc:
        fail(str(exc))
    result = result_dict(outcome)
    for key in ("a", "b"):
        if result[key] is not None:
            result[key].pop("timeline", None)
            result[key].pop("timeline_truncated", None)
    result["policies"] = {k: _policy_used(result[k]) for k in ("a", "b") if result[k] is not None}
    return result


def _policy_used(sim: dict) -> dict:
    """A replayed policy's kind, parameters as used (defaults filled) and the kind they
    make it replay identically to (None: none)."""
    p = sim["config"]["policy"]
    return {"kind": p["kind"], "params": p.get("params") or {}, "equivalent_to": p.get("equivalent_to")}


def _policy_line(which: str, used: dict) -> str:
    """'policy A: partial (finished_groups=null, over_provision=1.5)'."""
    params = ", ".join(f"{k}={orjson.dumps(v).decode()}" for k, v in used["params"].items())
    line = f"policy {which}: {used['kind']}" + (f" ({params})" if params else "")
    if used.get("equivalent_to"):
        line += f"; with these parameters it replays identically to {used['equivalent_to']}"
    return line


def _pct(x, none: str = "-") -> str:
    return none if x is None else f"{100 * x:.1f}%"


def _acc(fig: dict, prefix: str) -> str:
    """Accuracy, or the signed relative error where accuracy would be below 0."""
    a, e = fig.get(f"{prefix}accuracy"), fig.get(f"{prefix}rel_error")
    if a is not None:
        return _pct(a)
    return "-" if e is None else f"rel. error {100 * e:+.0f}%"


def _simulation_summary(trace, request: ReplayRequest, result: dict) -> str:
    c, a, b = request.cluster, result["a"], result["b"]
    name_a = request.policy.kind
    name_b = request.compare_policy.kind if request.compare_policy is not None else None
    w = result["workload"]
    lines = [
        f"trace {trace.id} ({trace.name}): {w['steps']} steps, {w['samples']:,} samples"
        f"{' (multi-turn)' if w['multiturn'] else ''}",
        f"cluster: {c.n_gpus} x {c.gpu.name}, rollout {c.rollout_replicas} x TP{c.rollout_tp}, "
        f"training DP{c.train_dp} x TP{c.train_tp}; model {request.model.name}",
    ]
    lines += [_policy_line(which.upper(), used) for which, used in result.get("policies", {}).items()]
    lines += _setup_lines(request, result)
    lines += _step_table(a, b, name_a, name_b)
    lines += _total_lines(result, name_a, name_b)
    lines += _uncertainty_lines(result.get("uncertainty"))
    lines += _accuracy_lines(result["accuracy"])
    lines += _forecast_lines(result.get("forecast"))
    ro = result.get("rolling_origin")
    if ro is not None:
        lines += ["", _rolling_origin_summary(ro)]
    speedup = "speedup = step time of A / step time of B; " if result["b"] is not None else ""
    lines += ["", f"({speedup}--json prints every number)"]
    return "\n".join(lines)


def _setup_lines(request: ReplayRequest, result: dict) -> list[str]:
    """B's own cluster, when it has one, and the calibration."""
    lines: list[str] = []
    cb, b = request.compare_cluster, request.compare_policy
    if cb is not None and b is not None:
        lines.append(
            f"cluster of {b.kind}: the same {cb.n_gpus} GPUs, rollout {cb.rollout_replicas} x TP{cb.rollout_tp}, "
            f"training DP{cb.train_dp} x TP{cb.train_tp}"
        )
    cal = result["calibration"]
    if cal is not None:
        lines.append(f"calibration: {cal['method']} on step(s) {', '.join(map(str, cal['fit_steps']))}")
        if cal["cost"] is not None:
            lines.append(
                f"  fit residual {cal['cost']:.3g} (half the sum of squared relative errors of the simulated against "
                "the measured times on the fit steps; 0 = exact, lower is better)"
            )
    else:
        lines.append("calibration: none (roofline coefficients of the GPU and model presets)")
        if result.get("calibration_note"):
            lines.append(f"  {result['calibration_note']}")
    return lines


def _step_table(a: dict, b: dict | None, name_a: str, name_b: str | None) -> list[str]:
    lines: list[str] = []
    head = f"{'step':>6} {'rollout [s]':>11} {'step [s] ' + name_a:>22}"
    if b is not None:
        head += f" {f'step [s] {name_b}':>24} {'speedup':>8}"
    lines += ["", head]
    b_steps = {s["step"]: s for s in b["steps"]} if b is not None else {}
    for s in a["steps"]:
        row = f"{s['step']:>6} {s['stages'].get('rollout', 0.0):>11.2f} {s['step_time']:>22.2f}"
        if b is not None and s["step"] in b_steps:
            tb = b_steps[s["step"]]["step_time"]
            row += f" {tb:>24.2f} {(s['step_time'] / tb if tb else float('nan')):>8.3f}"
        lines.append(row)
    lines.append("")
    return lines


def _total_lines(result: dict, name_a: str, name_b: str | None) -> list[str]:
    """Makespans, warnings, the speedup and its explanation."""
    a, b = result["a"], result["b"]
    lines: list[str] = []
    idle_a = a["idle_fraction"]
    lines.append(
        f"makespan {name_a}: {a['makespan_s']:.1f} s, replayed idle GPU share {_pct(idle_a)}, "
        f"{a['throughput_tokens_per_s_per_gpu']:.1f} generated tokens/s/GPU"
    )
    for which, r in (("A", a), ("B", b)):
        for warning in (r or {}).get("warnings") or []:
            lines.append(f"warning (policy {which}): {warning}")
    if b is not None:
        t = result["compare"]["total"]
        lines.append(
            f"makespan {name_b}: {b['makespan_s']:.1f} s, replayed idle GPU share {_pct(b['idle_fraction'])}, "
            f"{b['throughput_tokens_per_s_per_gpu']:.1f} generated tokens/s/GPU"
        )
        lines.append(f"speedup of {name_b} over {name_a}: {t['speedup']:.3f}x{_band_text(result['compare'])}")
        lines += ["", explain_text(result["compare"]["explain"])]
    return lines


def _band_text(cmp: dict) -> str:
    """The speedup's sensitivity band and what moves it most, when asked for."""
    band = cmp.get("sensitivity")
    if band is None:
        return ""
    lo, hi = band["band"]

    def spread(row: dict) -> float:
        seen = [s for s in (row["speedup_low"], row["speedup_high"]) if s is not None]
        return max(seen) - min(seen) if seen else 0.0

    widest = max(band["parameters"], key=spread, default=None)
    most = f"; most sensitive to {widest['parameter']}" if widest is not None and spread(widest) > 0 else ""
    return f" [{lo:.3f}-{hi:.3f} over the uncalibrated parameters' ranges{most}]"


def _uncertainty_lines(unc: dict | None) -> list[str]:
    lines: list[str] = []
    if unc is not None and unc["steps"]:
        lines += [
            "",
            f"uncertainty (Monte-Carlo of the calibrated residual noise; mean [P{unc['interval'][0]}-P{unc['interval'][1]}]):",
        ]
        for row in unc["steps"]:
            r = row["rollout_s"]
            line = f"  step {row['step']}: rollout {r['mean']:.1f} s [{r['p10']:.1f}-{r['p90']:.1f}]"
            for side, name in (("a", "step"), ("b", "step of B")):
                if f"step_s_{side}" in row:
                    sa = row[f"step_s_{side}"]
                    line += f", {name} {sa['mean']:.1f} s [{sa['p10']:.1f}-{sa['p90']:.1f}]"
            line += f" ({row['n_runs']} runs)"
            lines.append(line)
        if unc.get("warning"):
            lines.append(f"  warning: {unc['warning']}")
    return lines


def _accuracy_lines(acc: dict | None) -> list[str]:
    lines: list[str] = []
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
    return lines


def _forecast_lines(fc: dict | None) -> list[str]:
    lines: list[str] = []
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
    return lines


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
    lines += _per_request_lines(m.get("per_request"))
    return "\n".join(lines)


def _per_request_lines(pr: dict | None) -> list[str]:
    """The mean per-request scores of the eligible steps, per level."""
    lines = []
    for level, name in (("trajectory", "trajectories"), ("turn", "turns")):
        s = (pr or {}).get(level)
        if s is None:
            continue
        cover = s["coverage"] if isinstance(s["coverage"], str) else _pct(s["coverage"])
        skill = s["naive"]["per_token"]["skill"]
        lines.append(
            f"  per request, {name}: completion error median {_pct(s['median_abs_rel_error'])}, p90 "
            f"{_pct(s['p90_abs_rel_error'])}; W1 {_pct(s['w1_over_mean'])} of the mean, KS "
            f"{_pct(s['ks'])}; P10-P90 covers {cover}; skill vs per-token rule "
            f"{'-' if skill is None else f'{skill:.2f}'} (1 exact, 0 no better)"
        )
    return lines


@command()
def advise(
    trace_id: Annotated[int, typer.Argument(min=1, max=INT_MAX, help="The trace to advise on")],
    gpus: Annotated[int, _int_option("GPU budget every configuration uses", lo=1)] = DEFAULT_N_GPUS,
    gpu: Annotated[str, typer.Option(metavar="GPU", help="GPU preset (H100, A100, H20, ...)")] = DEFAULT_GPU,
    model: Annotated[
        str | None,
        typer.Option(
            metavar="MODEL",
            help=f"Model preset (e.g. qwen2.5-7b); default: the one the trace's name or metadata names, else {DEFAULT_MODEL}",
        ),
    ] = None,
    policy: Annotated[
        list[str] | None, typer.Option(metavar="POLICY", help="Policies to sweep (repeatable; default all)")
    ] = None,
    steps: Annotated[str | None, typer.Option(metavar="FIRST:END", help="Step range (end exclusive)")] = None,
    no_calibrate: Annotated[bool, typer.Option("--no-calibrate", help="Roofline engine, no calibration")] = False,
    workers: Annotated[int | None, _int_option("Processes for the sweep (default: the CPUs)", lo=1)] = None,
    policy_runs: Annotated[
        int | None,
        _int_option("Monte-Carlo replays of each configuration that is not one batch rollout (default 16)", lo=2),
    ] = None,
    top: Annotated[int, _int_option("Configurations to print", lo=1)] = 15,
    as_json: JsonFlag = False,
    api_key: Annotated[str | None, KeyOption] = None,
) -> None:
    """Sweep layouts, policies with their parameters, DP balancing and engine concurrency on a GPU
    budget; rank by step time with intervals, and name the cause of each one's gain over sync."""
    from backend.jobs.advice import advice_request
    from core.simulator.advice import advice_of
    from workers.runners.advice import workers_for_sweep

    body = {
        "trace_id": trace_id,
        "gpu": gpu,
        "n_gpus": gpus,
        "model": model or DEFAULT_MODEL,
        "steps": _step_range_option(steps),
    }
    if policy:
        body["policies"] = list(policy)
    if no_calibrate:
        body["calibrate"] = False
    if policy_runs is not None:
        body["policy_runs"] = policy_runs
    request = _checked(advice_request, body)
    trace = _team_trace(trace_id, team_id_of(api_key))
    proposal = model_proposal(trace.name, trace.meta) if model is None else None
    if proposal is not None:  # no --model: the one the trace names
        request = _checked(advice_request, {**body, "model": proposal["model"]})
    try:
        workload = _trace_workload(trace, request.steps, "advise on")
        bar, progress = progress_bar("advise")
        try:
            out = advice_of(workload, request, progress, workers=workers or workers_for_sweep())
            progress(1.0, "done")
        finally:
            bar.close()
    except ValueError as exc:
        fail(str(exc))
    out["proposed_model"] = proposal
    emit(out, lambda r: _advice_summary(trace, request, r, top), as_json)


def _advice_summary(trace, request: AdviceRequest, out: dict, top: int) -> str:
    cal = out.get("calibration")
    lines = [
        f"trace {trace.id} ({trace.name}): {out['workload']['steps']} steps; {request.n_gpus} x {request.gpu.name}, "
        f"model {request.model.name}"
        + (f" ({out['proposed_model']['note']})" if out.get("proposed_model") else "")
        + "; "
        + (f"engine calibrated on step(s) {', '.join(map(str, cal['fit_steps']))}" if cal else "roofline engine")
        + (f" ({out['calibration_note']})" if not cal and out.get("calibration_note") else ""),
        f"{out['n_configurations']} configurations ranked by predicted step time (mean over every step; P10-P90"
        + (" of the Monte-Carlo replay" if out.get("uncertainty") else ": uncalibrated, no interval")
        + "; ~ marks intervals overlapping the best's); gains against "
        + str(out.get("reference")),
        "",
    ]
    intervals = [_interval(r["step_s"]) for r in out["ranking"][:top]]
    width = max([17, *map(len, intervals)])
    lines.append(
        f"{'rank':>4} {'step_s':>9} {'P10-P90':>{width}} {'vs best':>9} {'vs ref':>7}  {'largest cause':<34} configuration"
    )
    for i, (r, interval) in enumerate(zip(out["ranking"][:top], intervals, strict=True), 1):
        s, g = r["step_s"], r.get("gain")
        near = "~" if r.get("within_noise_of_best") and i > 1 else " "
        speed = f"{g['speedup']:.3f}x" if g and g.get("speedup") else "ref"
        cause = ((g or {}).get("phrase") or "-")[:34]
        lines.append(
            f"{i:>4} {s['mean']:>9.1f} {interval:>{width}} {r['vs_best']:>7.3f}x{near} {speed:>7}  "
            f"{cause:<34} {r['label']}"
        )
    if out.get("why_best"):
        lines += ["", "why the best: " + out["why_best"]["summary"]]
    lines += ["", "who wins where:"]
    for rg in out["ranges"]:
        a, b = rg["steps"]
        flag = " (partial workload)" if any(w["partial"] for w in out["per_step"] if a <= w["step"] <= b) else ""
        cause = f"; its largest gain over the reference: {rg['cause']}" if rg.get("cause") else ""
        lines.append(f"  {rg['said']}{flag}{cause}")
    return "\n".join(lines)


def _interval(step_s: dict) -> str:
    """P10-P90 of a ranked configuration; without a noise model there is none to show."""
    if step_s.get("p10") is None or step_s.get("p90") is None:
        return "uncalibrated: no interval"
    return f"{step_s['p10']:.1f}-{step_s['p90']:.1f}"


@command()
def policies(as_json: JsonFlag = False) -> None:
    """List the replay's policies: what each models, its paper and its parameters."""
    listing = {
        kind: {
            "help": spec.help,
            "disaggregated": spec.disaggregated,
            "paper": spec.paper,
            "params": [i.to_dict() for i in spec.param_infos],
            # None: `engine-replay` acts it out on real engines; else why it cannot
            "not_on_engine": spec.not_on_engine,
        }
        for kind, spec in POLICIES.items()
    }
    emit(listing, _policies_summary, as_json)


def _policies_summary(listing: dict) -> str:
    lines = []
    for kind, p in listing.items():
        pool = "disaggregated" if p["disaggregated"] else "colocated"
        lines.append(f"{kind}: {'' if p['help'].startswith(pool) else pool + '; '}{p['help']}")
        if p["paper"]:
            lines.append(f"  models: {p['paper']}")
        infos = {i.name: i for i in POLICIES[kind].param_infos}
        for d in p["params"]:
            default = orjson.dumps(d["default"]).decode()
            lines.append(f"  {d['name']}: {infos[d['name']].allowed()}; default {default}. {d['help']}")
        if not p["params"]:
            lines.append("  no parameters of its own")
        lines.append("")
    lines.append(
        "set one with `rlvr-explorer simulate ID --policy KIND --policy-param NAME=VALUE` "
        "(--compare-param for policy B); over REST: the policy's `params` object"
    )
    return "\n".join(lines)


@command()
def generate(
    out: Annotated[Path, typer.Option(metavar="FOLDER", help="Folder to write the files to")],
    from_trace: Annotated[
        int | None,
        typer.Option(min=1, max=INT_MAX, metavar="TRACE_ID", help="Fit this trace and generate from the fit"),
    ] = None,
    params: ParamsFileOption = None,
    task: Annotated[
        str | None, typer.Option(metavar="TASK", help="math | tool_calling (parameter file), or a fitted task")
    ] = None,
    steps: Annotated[int, _int_option("Steps to generate (0 with --from-trace: fit report only)", 0)] = 1,
    groups: Annotated[int | None, _int_option("Prompt groups per step", 1)] = None,
    n: Annotated[
        int | None, typer.Option("--n", min=1, max=INT_MAX, metavar="INTEGER", help="Samples per group")
    ] = None,
    seed: Annotated[int, _int_option("Random seed", 0)] = 0,
    format: Annotated[
        list[str] | None, typer.Option(metavar="packed|compact|multiturn", help="File format (repeatable)")
    ] = None,
    dp_size: Annotated[int, _int_option("DP ranks the packed rows are dealt to", 1)] = 1,
    ingest: Annotated[bool, typer.Option("--ingest/--no-ingest", help="Also ingest it as a trace")] = False,
    name: Annotated[str | None, typer.Option(help="Trace name when ingesting")] = None,
    as_json: JsonFlag = False,
    api_key: Annotated[str | None, KeyOption] = None,
) -> None:
    """Generate a synthetic PolyTrace-style workload from a fitted trace or a parameter file."""
    from backend.jobs.simulations import workload_params
    from backend.store.db import get_engine
    from rlvr_explorer.cli.request_errors import GENERATE_OPTIONS, option_error
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
    team_id = team_id_of(api_key) if (from_trace is not None or ingest) else None
    # (team_id is known whenever there is a trace to read or an ingest to make)
    trace = _team_trace(from_trace, team_id) if from_trace is not None and team_id is not None else None
    try:
        p = workload_params(
            {k: v for k, v in body.items() if v is not None}, multiturn_trace=bool(trace is not None and trace.n_turns)
        )
    except ValueError as exc:
        raise option_error(exc, GENERATE_OPTIONS) from None  # named by this command's options
    try:
        models = None
        if trace is not None:
            with get_engine().connect() as conn:
                columns = load_columns(conn, trace)
            models = fit_models(columns, trace.tasks, trace.max_response_len, seed)
        generated = generate_steps_of(p, models) if p["steps"] else []
        files = write_files(out, generated, p["formats"], p["dp_size"], models)
    except ValueError as exc:
        fail(str(exc))
    result = summary(p, generated, models)
    result["files"] = sorted(str(x) for paths in files.values() for x in paths)
    chosen = ingest_files(files)
    if ingest and chosen and team_id is not None:
        bar, progress = progress_bar("ingest")
        try:
            result.update(ingest_generated(team_id, chosen, name or default_name(p, result), progress))
        finally:
            bar.close()
    emit(result, lambda r: _workload_summary(r, out), as_json)


KS_OK = 0.05  # a fitted distribution within 5% (KS distance) of the data's empirical CDF


def _best_fit(fits: dict) -> str:
    """{'lognormal': 0.03, 'gamma': 0.08} -> 'lognormal (KS 0.030)'."""
    fits = {k: v for k, v in (fits or {}).items() if v is not None}
    if not fits:
        return "-"
    kind = min(fits, key=lambda k: fits[k])
    return f"{kind} (KS {fits[kind]:.3f}{'' if fits[kind] <= KS_OK else ', loose'})"


def _workload_summary(result: dict, out: Path) -> str:
    """The human summary of a generate run: the fit quality, what was written, what next."""
    lines = []
    if result.get("fit"):
        lines.append("fit of the trace (KS = largest gap between the fitted and the measured CDF; <= 0.05 is close):")
        lines.append(f"  {'task':<16}{'samples':>10}  {'prompt length':<28}{'response length':<28}{'at cap':>9}")
        for task, rep in result["fit"].items():
            lines.append(
                f"  {task:<16}{rep['n_samples']:>10,}  {_best_fit(rep.get('prompt')):<28}"
                f"{_best_fit(rep.get('response')):<28}{_pct(rep.get('truncation_rate'), 'unknown'):>9}"
            )
    if result["steps"]:
        per_step = f"{result['groups']} groups x {result['samples_per_group']} samples"
        lines.append(
            f"generated {result['steps']} step(s) of {per_step} ({result['samples']:,} samples, task "
            f"{result['task']}{', multi-turn' if result['multiturn'] else ''})"
        )
    else:
        lines.append("generated nothing (--steps 0: fit report only)")
    if result["files"]:
        lines.append(f"wrote {len(result['files'])} file(s) to {out}:")
        lines += [f"  {Path(f).name}" for f in result["files"]]
    if result.get("trace_id") is not None:
        lines.append(
            f"ingested as trace {result['trace_id']}: `rlvr-explorer simulate {result['trace_id']}` replays it"
        )
    elif result["files"]:
        lines.append(f"next: `rlvr-explorer ingest {out}` stores it as a trace (or pass --ingest)")
    return "\n".join(lines)


# Shared with the engine commands (rlvr_explorer/cli/engine.py).
team_trace, trace_workload, step_range_option = _team_trace, _trace_workload, _step_range_option
