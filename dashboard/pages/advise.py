"""Configuration advisor of one trace: a GPU type and budget in, configurations (rollout
replicas x TP, training DP, policy, DP balancing, engine concurrency) ranked by
predicted step time with P10-P90, who wins on which steps, the winner's step times.

Ids: adv-gpu, adv-gpus, adv-model (its default the model the trace's name or metadata
names, said in adv-model-proposed), adv-policies (which registered policies to sweep,
from the presets; each with its help line), adv-submit, adv-message (adv-started: the
banner), adv-job / adv-done (stores: the advice shown, the succeeded one drawn), adv-poll,
adv-progress, adv-table, adv-ranges, adv-winner (chart).
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.figures.advice import ranking_rows, winner_figure
from dashboard.figures.common import empty_figure
from dashboard.server import results
from dashboard.views.components import alert, control, controls, graph, section
from dashboard.views.job_panel import Checked, JobPanel, shown_job
from dashboard.views.number_fields import Bounds, blocked_message, check_number, error_id, number_input
from dashboard.views.trace_frame import trace_page

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/advise",
    name="Advise",
    title="Advise · RLVR Explorer",
    nav="trace",
    order=6,
)


PANEL = JobPanel("adv", "Advice", "advice", "adv-message", poll_ms=1500)
PANEL.register()
NO_ADVICE = "No advice yet: choose a GPU budget and press Advise"


def _form_section(p: dict) -> html.Section:
    d = p.get("defaults") or {}
    return section(
        "Ask the advisor",
        controls(
            control("GPU", _dropdown("adv-gpu", list(p.get("gpus") or {}), d.get("gpu", "H100"), 150)),
            control("GPUs", number_input("adv-gpus", d.get("n_gpus", 8), GPUS)),
            control("Model", _dropdown("adv-model", list(p.get("models") or {}), d.get("model"), 190)),
            html.Button("Advise", id="adv-submit", n_clicks=0, className="button"),
        ),
        model_note(p.get("proposed_model")),
        controls(control("Policies to sweep", policy_choices(p))),
        PANEL.message(),
        help_text="Sweeps rollout replicas x TP, training DP, policy with its declared parameter values, DP "
        "balancing and engine concurrency on this GPU budget (the engine calibrated on the trace's first step "
        "when it has measured timings), ranks them by predicted step time, mean over every step, with the "
        "Monte-Carlo P10-P90 (~: overlapping the best's; none when uncalibrated), and names the largest cause of each one's "
        "difference from the best sync configuration.",
    )


def _dropdown(id_: str, options: list, value, width: int) -> dcc.Dropdown:
    return dcc.Dropdown(id=id_, options=options, value=value, clearable=False, style={"minWidth": f"{width}px"})


def body(trace: dict) -> html.Div:
    if not trace.get("n_samples"):
        return alert("This trace has no samples (rollout lengths) to advise on.", "info")
    api = session.api()
    try:
        p = api.simulation_presets(trace["id"])  # the model default: the one the trace names, if any
        history = api.advice_list(trace_id=trace["id"], limit=1)
    except ApiError as exc:
        return alert(exc.message)
    shown = shown_job(history)  # the latest advice
    return html.Div(
        [
            *PANEL.stores(shown),
            _form_section(p),
            PANEL.progress(shown),
            section("Ranked configurations", html.Div(id="adv-table")),
            section("Who wins where", html.Div(id="adv-ranges")),
            section("Step time of the best configuration", graph("adv-winner")),
        ]
    )


GPUS = Bounds(ge=1, required=True)  # the GPU budget: an invalid one blocks Advise, its message under it


def model_note(proposal: dict | None) -> html.P | None:
    """Where the Model default came from, when the trace's name or metadata named it."""
    if not proposal:
        return None
    return html.P(f"Model {proposal['model']}: {proposal['note']}.", id="adv-model-proposed", className="help")


def policy_choices(p: dict) -> dcc.Checklist:
    """Every registered policy (the presets' list), all ticked; the hover says what it models."""
    helps = p.get("policy_help") or {}
    kinds = p.get("policies") or []
    options = [{"label": html.Span(k, title=helps.get(k, "")), "value": k} for k in kinds]
    return dcc.Checklist(id="adv-policies", options=options, value=list(kinds), inline=True)


def layout(trace_id: str | None = None, **_):
    return trace_page(trace_id, __name__, "/advise", body)


def check(trace_id, form: dict) -> Checked:
    """The advice request: a GPU budget the form cannot send blocks it, its message under it."""
    gpus, wrong = check_number(form["n_gpus"], GPUS)
    if wrong:
        return Checked(None, wrong, alert(blocked_message(['"GPUs"']), id="adv-form-blocked"))
    if not form["policies"]:
        return Checked(None, None, alert("Choose at least one policy to sweep."))
    body = {"trace_id": trace_id, "gpu": form["gpu"], "n_gpus": gpus, "model": form["model"]}
    return Checked({**body, "policies": list(form["policies"])})


PANEL.register_submit(
    buttons=("adv-submit",),
    form={
        "gpu": State("adv-gpu", "value"),
        "n_gpus": State("adv-gpus", "value"),
        "model": State("adv-model", "value"),
        "policies": State("adv-policies", "value"),
    },
    fields=Output(error_id("adv-gpus"), "children"),
    check=check,
    send=lambda api, body: api.advise(body),
)


@dash.callback(
    Output("adv-table", "children"),
    Output("adv-ranges", "children"),
    Output("adv-winner", "figure"),
    Input("adv-done", "data"),
)
def fill(job_id):
    """The succeeded advice's ranking, ranges and the best configuration's step times."""
    empty = empty_figure(NO_ADVICE, "Step time of the best configuration")
    if job_id is None:
        return None, None, empty
    try:
        result = results.job_result(job_id) or {}
    except ApiError as exc:
        return alert(exc.message), None, empty
    return ranking_table(result), ranges_list(result), winner_figure(result)


def ranking_table(result: dict):
    rows = ranking_rows(result)
    head = html.Tr(
        [
            html.Th("#"),
            html.Th("Configuration"),
            html.Th("Parameters"),
            html.Th("Step time (s)", className="num"),
            html.Th("P10-P90 (s)", className="num"),
            html.Th("vs best", className="num", title="~: its interval overlaps the best's"),
            html.Th(f"vs {result.get('reference') or 'reference'}".split(" | ")[0], className="num"),
            html.Th("Largest cause of the difference"),
        ]
    )
    body_rows = [
        html.Tr(
            [
                html.Td(str(r["rank"])),
                html.Td(r["label"]),
                html.Td(r["params"] or "-"),
                html.Td(f"{r['mean']:.1f}", className="num"),
                html.Td(r["interval"], className="num"),
                html.Td(f"{r['vs_best']:.3f}x" + (" ~" if r["near_best"] else ""), className="num"),
                html.Td("reference" if r["vs_ref"] is None else f"{r['vs_ref']:.3f}x", className="num"),
                html.Td(r["cause"] or "-"),
            ]
        )
        for r in rows
    ]
    return html.Table([html.Thead(head), html.Tbody(body_rows)], className="table", id="adv-ranking")


def _older_range(rg: dict) -> str:
    """A range of advice stored before ranges said themselves: the winner and margin only."""
    a, b = rg["steps"]
    where = f"step {a}" if a == b else f"steps {a}-{b}"
    return f"{where}: {rg['winner']} (margin over the runner-up {100 * rg['margin_min']:.1f}%)"


def ranges_list(result: dict):
    items = []
    for rg in result.get("ranges") or []:
        cause = f"; its largest gain over the reference: {rg['cause']}" if rg.get("cause") else ""
        items.append(html.Li(f"{rg.get('said') or _older_range(rg)}{cause}"))
    why = (result.get("why_best") or {}).get("summary")
    parts = ([html.P(f"Why the best: {why}", id="adv-why")] if why else []) + ([html.Ul(items)] if items else [])
    return html.Div(parts) if parts else None
