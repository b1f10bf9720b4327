"""Replay one trace on a described cluster: configure (presets, policy A vs B,
calibration, step range), watch the job, and read predicted versus measured time with
the accuracy figures, the speedup of B over A, idle GPU time by cause and the
simulated GPU timeline; download the timeline as Chrome trace; reopen earlier replays.

Form ids: sim-gpu, sim-model, sim-gpus, sim-replicas, sim-tp, sim-train-dp,
sim-max-seqs, sim-kv-tokens, sim-policy-a, sim-policy-b, sim-balancing, sim-calibrate,
sim-fit-steps, sim-step-from, sim-step-to, sim-submit, sim-form-message; the chosen
policies' own parameters in sim-params-a / sim-params-b, one input each (ids
{"type": "policy-param", "form": "sim", "policy": "a" | "b", "name": ...}, built from the
presets' policy_params). A policy whose parameters make it replay identically to another
says so above the figures (sim-equivalent).
State: sim-job (the replay shown or running), sim-done (the succeeded replay drawn),
sim-poll. Output: sim-progress, sim-cards (card-sim-speedup, card-sim-accuracy-rollout,
...), sim-pred-vs-measured, sim-accuracy (table), sim-speedup, sim-idle, sim-timeline
(+ sim-timeline-policy), sim-downloads (links sim-download-a / -b), sim-history (one
<tr data-job-id> per replay, "Open" buttons). `?job=ID` opens that replay; `?rerun=ID`
fills the form with its configuration (sim-rerun-note says so); the per-step charts' zoom
lives in the URL (?z.<chart>=x0,x1[,y0,y1]). While a replay runs the
figures say so (job_views.replay_placeholder) instead of "Configure a replay".
"""

from __future__ import annotations

import dash
from dash import ALL, Input, Output, State, dcc, html

from dashboard.api import session
from dashboard.api.client import ApiClient, ApiError
from dashboard.figures.common import empty_figure
from dashboard.figures.simulation import (
    accuracy_rows,
    idle_cause_figure,
    policy_names,
    predicted_vs_measured_figure,
    speedup_figure,
    summary_cards,
    timeline_figure,
)
from dashboard.server import results
from dashboard.server.downloads import simulation_trace_href
from dashboard.server.figure_cache import cached
from dashboard.views.components import PAGE_TRACE_ID, alert, card, control, controls, graph, section
from dashboard.views.engine_measured import engine_measured_section
from dashboard.views.job_panel import Checked, JobPanel, rerun_job, shown_job
from dashboard.views.job_views import NO_REPLAY, describe_simulation, replay_placeholder
from dashboard.views.number_fields import (
    Bounds,
    NumberFields,
    blocked_message,
    check_fields,
    error_id,
    number_control,
)
from dashboard.views.policy_params import (
    PARAM,
    PARAM_ERROR,
    equivalence_notes,
    error_outputs,
    param_inputs,
    read_params,
)
from dashboard.views.replay_forms import CALIBRATION_MODES, form_defaults, form_values_from_job, simulation_body
from dashboard.views.trace_frame import trace_page
from dashboard.views.url_state import register_url_state, url_sink, zoom_id, zoom_store, zoomed

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/simulate",
    name="Simulate",
    title="Simulate · RLVR Explorer",
    nav="trace",
    order=5,
)


def _placeholder_of(job_id) -> str:
    if job_id is None:
        return NO_REPLAY
    try:
        return replay_placeholder(results.job(job_id))
    except ApiError:
        return NO_REPLAY


_presets: dict[str, dict] = {}


def presets(api: ApiClient) -> dict:
    """The API's presets (they change only with a new server version: kept per API)."""
    if api.root not in _presets:
        _presets[api.root] = api.simulation_presets()
    return _presets[api.root]


# The form's number fields (`NumberFields`).
# An invalid value blocks Replay with its message under the field.
NUMBERS: NumberFields = {
    "sim-gpus": ("n_gpus", "GPUs", Bounds(ge=1), "default"),
    "sim-replicas": ("replicas", "Rollout replicas", Bounds(ge=1), "per policy"),
    "sim-tp": ("tp", "TP per replica", Bounds(ge=1), "fits model"),
    "sim-train-dp": ("train_dp", "Training DP", Bounds(ge=1), "per policy"),
    "sim-max-seqs": ("max_running_seqs", "Max running sequences", Bounds(ge=1), "default"),
    "sim-kv-tokens": ("kv_cache_tokens", "KV cache tokens", Bounds(ge=1), "from memory"),
    "sim-step-from": ("step_from", "From step", Bounds(ge=0), "first"),
    "sim-step-to": ("step_to", "To step (excl.)", Bounds(ge=0), "last + 1"),
}


def _number(id_: str, d: dict):
    return number_control(NUMBERS, id_, d)


def _dropdown(id_: str, options, value, *, clearable: bool = False, placeholder: str = "", width: int = 170):
    return dcc.Dropdown(
        id=id_,
        options=options,
        value=value,
        clearable=clearable,
        placeholder=placeholder,
        style={"minWidth": f"{width}px"},
    )


def param_controls(p: dict, which: str, kind: str | None, values: dict | None = None) -> list:
    """Policy `which`'s own parameters (none: nothing), from the presets."""
    infos = (p.get("policy_params") or {}).get(kind) or [] if kind else []
    if not infos:
        return []
    return [
        html.Div(f"Policy {which.upper()} ({kind}): its parameters", className="control-label"),
        controls(*param_inputs(infos, "sim", which, values)),
    ]


def _infos(kind: str | None) -> list[dict]:
    return (presets(session.api()).get("policy_params") or {}).get(kind) or [] if kind else []


def form(p: dict, d: dict) -> html.Div:
    policies = [{"label": k, "value": k} for k in p.get("policies") or []]
    return html.Div(
        [
            controls(
                control("GPU", _dropdown("sim-gpu", list(p.get("gpus") or {}), d["gpu"])),
                control("Model", _dropdown("sim-model", list(p.get("models") or {}), d["model"], width=190)),
                _number("sim-gpus", d),
                _number("sim-replicas", d),
                _number("sim-tp", d),
                _number("sim-train-dp", d),
            ),
            controls(
                _number("sim-max-seqs", d),
                _number("sim-kv-tokens", d),
                control("Policy A", _dropdown("sim-policy-a", policies, d["policy_a"])),
                control(
                    "Policy B",
                    _dropdown(
                        "sim-policy-b", policies, d["policy_b"], clearable=True, placeholder="none (no comparison)"
                    ),
                ),
                control(
                    "DP balancing",
                    _dropdown("sim-balancing", p.get("balancing") or ["none"], d["balancing"], width=120),
                ),
            ),
            html.Div(param_controls(p, "a", d["policy_a"], d.get("params_a")), id="sim-params-a"),
            html.Div(param_controls(p, "b", d["policy_b"], d.get("params_b")), id="sim-params-b"),
            controls(
                control(
                    "Calibration",
                    dcc.RadioItems(
                        id="sim-calibrate",
                        value=d["calibrate"],
                        inline=True,
                        options=[{"label": v, "value": k} for k, v in CALIBRATION_MODES.items()],
                    ),
                ),
                control(
                    "Fit on steps",
                    dcc.Input(
                        id="sim-fit-steps",
                        value=d["fit_steps"],
                        placeholder="first step",
                        className="input",
                        style={"width": "120px"},
                    ),
                ),
                _number("sim-step-from", d),
                _number("sim-step-to", d),
                control(
                    "Forecast",
                    dcc.Checklist(
                        id="sim-forecast",
                        options=[{"label": "predict later steps from earlier workloads", "value": "on"}],
                        value=["on"] if d.get("forecast") else [],
                    ),
                ),
                html.Button("Replay", id="sim-submit", n_clicks=0, className="button"),
            ),
            PANEL.message(),
        ]
    )


ZOOMABLE = ("sim-pred-vs-measured", "sim-speedup", "sim-idle")
register_url_state("simulate", {}, zoom=ZOOMABLE)


def replays(api: ApiClient, trace_id) -> list[dict]:
    """The trace's replays, newest first (the history table)."""
    return api.simulations(trace_id=trace_id, limit=50)


PANEL = JobPanel(
    "sim",
    "Replay",
    "replay",
    "sim-form-message",
    history=replays,
    describe=describe_simulation,
    identical="Identical to replay {id}: shown below.",
)
PANEL.register()


def _form_start(p: dict, step_ids: list[int], again: dict | None):
    """(the form's values, the note saying whose they are): the defaults, or the
    configuration of the replay "Re-run…" on the jobs page named."""
    values = form_defaults(p, step_ids)
    if again is None:
        return values, None
    values = form_values_from_job(again.get("params") or {}, values)
    if values.get("model") not in (p.get("models") or {}):
        by_lower = {str(k).lower(): k for k in p.get("models") or {}}
        values["model"] = by_lower.get(str(values.get("model")).lower(), form_defaults(p, step_ids)["model"])
    note = alert(
        f"The form holds replay {again['id']}'s configuration: change what you need and press Replay.",
        "info",
        id="sim-rerun-note",
    )
    return values, note


def _configure_section(p: dict, values: dict, refilled) -> html.Section:
    return section(
        "Configure a replay",
        refilled,
        form(p, values),
        help_text="Replays each step's recorded workload on the cluster below under policy A, and under "
        "policy B for comparison. Calibration fits the engine's speed to the trace's measured "
        "timings on the fit steps; accuracy is then reported on the other steps.",
    )


def _prediction_section() -> html.Section:
    return section(
        "Predicted time per step",
        graph("sim-pred-vs-measured"),
        html.Div(id="sim-accuracy"),
        help_text="Accuracy = 1 − |predicted − measured| / measured on steps not used for calibration; the "
        "naive predictor repeats the mean of the fitted steps.",
    )


def _comparison_row() -> html.Div:
    return html.Div(
        className="grid-2",
        children=[
            section("Speedup of B over A", graph("sim-speedup")),
            section("Idle GPU time by cause", graph("sim-idle")),
        ],
    )


def _timeline_section() -> html.Section:
    policy = dcc.RadioItems(
        id="sim-timeline-policy",
        value="a",
        inline=True,
        options=[{"label": "A", "value": "a"}, {"label": "B", "value": "b"}],
    )
    return section(
        "Simulated GPU timeline",
        controls(control("Policy", policy), html.Div(id="sim-downloads", className="controls")),
        graph("sim-timeline"),
        help_text="Each row is a group of GPUs doing the same thing; the Chrome trace (Perfetto, "
        "chrome://tracing) has every interval.",
    )


def body(trace: dict, job_param=None, rerun=None, query: dict | None = None) -> html.Div:
    if not trace.get("n_samples"):
        return alert("This trace has no samples (rollout lengths), so there is nothing to replay.", "info")
    api = session.api()
    try:
        p = presets(api)
        history = replays(api, trace["id"])
        step_ids = [s["step"] for s in api.steps(trace["id"])]
    except ApiError as exc:
        return alert(exc.message)
    shown = shown_job(history, job_param)
    values, refilled = _form_start(p, step_ids, rerun_job(history, rerun))
    return html.Div(
        [
            url_sink("simulate"),
            zoom_store("simulate", query or {}),
            *PANEL.stores(shown),
            _configure_section(p, values, refilled),
            PANEL.progress(shown),
            html.Div(id="sim-cards", className="cards"),  # the replay's figures: `fill`, `fill_timeline`
            _prediction_section(),
            engine_measured_section(trace["id"]),
            _comparison_row(),
            _timeline_section(),
            section("Replays of this trace", PANEL.history_box(history, shown)),
        ]
    )


def layout(trace_id: str | None = None, job: str | None = None, rerun: str | None = None, **query):
    return trace_page(trace_id, __name__, "/simulate", lambda trace: body(trace, job, rerun, query))


def _param_states(which: str) -> dict:
    pattern = {"type": PARAM, "form": "sim", "policy": which, "name": ALL}
    return {"ids": State(pattern, "id"), "values": State(pattern, "value")}


CHOICES = {
    "gpu": "sim-gpu",
    "model": "sim-model",
    "policy_a": "sim-policy-a",
    "policy_b": "sim-policy-b",
    "balancing": "sim-balancing",
    "calibrate": "sim-calibrate",
    "fit_steps": "sim-fit-steps",
    "forecast": "sim-forecast",
}


def check(trace_id, form: dict) -> Checked:
    """The replay request for the form's values exactly as shown; a field whose value the
    form cannot send blocks it, its message under it (never replaced by the default)."""
    values, errors, param_errors = _form_values(form["choices"], form["numbers"], form["params_a"], form["params_b"])
    fields = {
        "errors": {id_: errors.get(id_) for id_ in NUMBERS},
        "errors_a": error_outputs(param_errors["a"], form["params_a"]["ids"]),
        "errors_b": error_outputs(param_errors["b"], form["params_b"]["ids"]),
    }
    if errors or any(param_errors.values()):
        named = [f'"{NUMBERS[id_][1]}"' for id_ in errors]
        named += [f"policy {w.upper()}'s {name}" for w, wrong in param_errors.items() for name in wrong]
        return Checked(None, fields, alert(blocked_message(named), id="sim-form-blocked"))
    try:
        return Checked(simulation_body(trace_id, values), fields)
    except ValueError as exc:
        return Checked(None, fields, alert(str(exc)))


PANEL.register_submit(
    buttons=("sim-submit",),
    form={
        "choices": {key: State(id_, "value") for key, id_ in CHOICES.items()},
        "numbers": {id_: State(id_, "value") for id_ in NUMBERS},
        "params_a": _param_states("a"),
        "params_b": _param_states("b"),
    },
    fields={
        "errors": {id_: Output(error_id(id_), "children") for id_ in NUMBERS},
        "errors_a": Output({"type": PARAM_ERROR, "form": "sim", "policy": "a", "name": ALL}, "children"),
        "errors_b": Output({"type": PARAM_ERROR, "form": "sim", "policy": "b", "name": ALL}, "children"),
    },
    check=check,
    send=lambda api, body: api.simulate(body),
)


def _form_values(choices: dict, numbers: dict, params_a: dict, params_b: dict):
    """(the form's values as `simulation_body` takes them, {field id: message} and
    {"a" | "b": {parameter: message}} of the values it cannot send)."""
    checked, errors = check_fields(numbers, {id_: spec[2] for id_, spec in NUMBERS.items()})
    values = {**choices, "forecast": bool(choices.get("forecast"))}
    values.update({NUMBERS[id_][0]: v for id_, v in checked.items()})
    param_errors: dict[str, dict[str, str]] = {}
    for which, given in (("a", params_a), ("b", params_b)):
        infos = _infos(choices.get(f"policy_{which}"))
        values[f"params_{which}"], param_errors[which] = read_params(
            infos, list(given["ids"] or ()), list(given["values"] or ())
        )
    return values, errors, param_errors


@dash.callback(Output("sim-params-a", "children"), Input("sim-policy-a", "value"), prevent_initial_call=True)
def params_of_a(kind):
    """Policy A's parameters, their defaults filled in, when another policy is chosen."""
    return param_controls(presets(session.api()), "a", kind)


@dash.callback(Output("sim-params-b", "children"), Input("sim-policy-b", "value"), prevent_initial_call=True)
def params_of_b(kind):
    return param_controls(presets(session.api()), "b", kind)


@dash.callback(
    Output("sim-cards", "children"),
    Output("sim-pred-vs-measured", "figure"),
    Output("sim-accuracy", "children"),
    Output("sim-speedup", "figure"),
    Output("sim-idle", "figure"),
    Output("sim-downloads", "children"),
    Input("sim-done", "data"),
    State(PAGE_TRACE_ID, "data"),
    State("sim-job", "data"),
    State(zoom_id("simulate"), "data"),
)
def fill(job_id, trace_id, started=None, zoom=None):
    if job_id is None:
        fig = empty_figure(_placeholder_of(started))
        return [], fig, None, fig, fig, None
    try:
        job = results.job(job_id)
        if job.get("result") is None:
            fig = empty_figure(f"Replay {job_id} has no result")
            return [], fig, None, fig, fig, None
        # measured step timings of the trace, next to the prediction
        cards, pred, accuracy, speedup, idle, links = cached(
            ("simulation", job_id, trace_id), lambda: _figures(job, session.api().steps(trace_id))
        )
        pred, speedup, idle = zoomed((pred, speedup, idle), ZOOMABLE, zoom)
        return cards, pred, accuracy, speedup, idle, links
    except ApiError as exc:
        fig = empty_figure(exc.message)
        return alert(exc.message), fig, None, fig, fig, None


def _figures(job: dict, steps: list[dict]):
    job_id = job["id"]
    cards = [card(c["label"], c["value"], c["hint"], card_id=f"card-sim-{c['key']}") for c in summary_cards(job)]
    a_name, b_name = policy_names(job)
    res = job["result"]
    for which, name in (("a", a_name), ("b", b_name)):
        for warning in (res.get(which) or {}).get("warnings") or []:
            cards.append(alert(f"Policy {which.upper()} ({name}): {warning}", "info"))
    if (res.get("uncertainty") or {}).get("warning"):
        cards.append(alert(res["uncertainty"]["warning"], "info"))
    notes = equivalence_notes(res, {"a": a_name, "b": b_name})
    if notes:
        cards.append(html.Div([alert(note, "info") for note in notes], id="sim-equivalent"))
    links = [
        html.A(
            f"Chrome trace, A ({a_name})",
            href=simulation_trace_href(job_id, "a"),
            id="sim-download-a",
            className="button small secondary",
            download=f"simulation-{job_id}-a.json",
        )
    ]
    if b_name:
        links.append(
            html.A(
                f"Chrome trace, B ({b_name})",
                href=simulation_trace_href(job_id, "b"),
                id="sim-download-b",
                className="button small secondary",
                download=f"simulation-{job_id}-b.json",
            )
        )
    return (
        cards,
        predicted_vs_measured_figure(job, steps),
        accuracy_table(job["result"]),
        speedup_figure(job),
        idle_cause_figure(job),
        links,
    )


def forecast_note(result: dict):
    """One line per forecast step (workload drawn from earlier steps), when asked for."""
    fc = result.get("forecast") or {}
    items = []
    for row in fc.get("steps") or []:
        r = row.get("rollout_s") or {}
        if r.get("predicted") is None:
            continue
        acc = r.get("accuracy")
        err = r.get("rel_error")
        how = f"{100 * acc:.1f}%" if acc is not None else ("—" if err is None else f"rel. error {100 * err:+.0f}%")
        lo, hi = r.get("interval") or [None, None]
        meas = "—" if r.get("measured") is None else f"{r['measured']:.1f} s"
        items.append(
            html.Li(
                f"step {row['step']}: forecast {r['predicted']:.1f} s [P10-P90 {lo:.1f}-{hi:.1f}], measured {meas} ({how})"
                + (" — partial workload" if row.get("partial") else "")
            )
        )
    if not items:
        return None
    return html.Div(
        [html.P("Forecast (workload drawn from earlier steps with drift):"), html.Ul(items)], id="sim-forecast-note"
    )


def accuracy_table(result: dict):
    table = _accuracy_table(result)
    note = forecast_note(result)
    return table if note is None else html.Div([table, note])


def _accuracy_table(result: dict):
    rows = accuracy_rows(result)
    if not rows:
        cal = result.get("calibration")
        note = result.get("calibration_note") or "not calibrated"  # names the timings the trace has
        text = (
            "Calibrated on every replayed step: widen the step range to test the accuracy on other steps."
            if cal
            else note[:1].upper() + note[1:] + "."
        )
        return html.P(text, className="muted", id="sim-accuracy-note")
    head = html.Tr(
        [
            html.Th("Accuracy on steps not fitted"),
            html.Th("Calibrated", className="num"),
            html.Th("Naive (mean of fitted steps)", className="num"),
            html.Th("Steps", className="num"),
        ]
    )
    body_rows = [
        html.Tr(
            [
                html.Td(r["label"]),
                html.Td("—" if r["calibrated"] is None else f"{100 * r['calibrated']:.1f}%", className="num"),
                html.Td("—" if r["naive"] is None else f"{100 * r['naive']:.1f}%", className="num"),
                html.Td(str(r["steps"]), className="num"),
            ],
            **{"data-metric": r["metric"]},
        )
        for r in rows
    ]
    return html.Table([html.Thead(head), html.Tbody(body_rows)], className="table", id="sim-accuracy-table")


@dash.callback(
    Output("sim-timeline", "figure"),
    Input("sim-done", "data"),
    Input("sim-timeline-policy", "value"),
    State("sim-job", "data"),
)
def fill_timeline(job_id, policy, started=None):
    if job_id is None:
        return empty_figure(_placeholder_of(started))
    try:
        job = results.job(job_id)
    except ApiError as exc:
        return empty_figure(exc.message)
    result = job.get("result")
    if not result:
        return empty_figure(f"Replay {job_id} has no result")
    names = dict(zip(("a", "b"), policy_names(job)))
    policy = policy if result.get(policy) else "a"
    return cached(
        ("simulation-timeline", job_id, policy),
        lambda: timeline_figure(result.get(policy), policy=f"{policy.upper()}: {names.get(policy)}"),
    )
