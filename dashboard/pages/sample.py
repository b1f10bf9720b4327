"""One dumped sample: its prompt and response as written, its reward, lengths, stop
reason, repetition flag and reward_extra_infos values, and the other samples of its
group (the same prompt) side by side. Text is shown as text: Dash renders strings as
DOM text nodes, so HTML or script in a response is displayed, never run.

URL: ``/traces/<id>/samples/<step>/<group>/<sample>`` (the Samples table's rows and the
text search's results link here).

Ids: sample-title, sample-cards, sample-prompt, sample-response, sample-extras,
sample-group (one card per other sample: ``sample-member-<i>``), sample-back.
"""

from __future__ import annotations

import dash
from dash import html

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.views.components import alert, card, href, section
from dashboard.views.trace_frame import trace_page

dash.register_page(
    __name__,
    path_template="/traces/<trace_id>/samples/<step>/<group>/<sample>",
    name="Sample",
    title="Sample · RLVR Explorer",
)

TEXT_STYLE = {"whiteSpace": "pre-wrap", "overflowWrap": "anywhere", "maxHeight": "560px", "overflowY": "auto"}
MEMBER_STYLE = {**TEXT_STYLE, "maxHeight": "320px", "fontSize": "12px"}


def sample_href(trace_id, step, group, sample) -> str:
    return href(f"/traces/{trace_id}/samples/{step}/{group}/{sample}")


def _num(value, digits: str = ".3g") -> str:
    return "–" if value is None else format(value, digits)


def _repetition(period) -> str:
    if period is None:
        return "–"
    return f"period {period:,} chars" if period > 0 else "none"


def stop_reason_caption(body: dict, trace: dict) -> str:
    """What the stop reason card's value means for this sample, and why when unknown."""
    reason, cap = body.get("stop_reason"), trace.get("max_response_len")
    at = f" ({cap:,} {body['length_unit']})" if cap else ""
    recorded = any(isinstance(body.get("extras", {}).get(k), str) for k in ("finish_reason", "stop_reason"))
    if reason == "length":
        return "the engine stopped it at the max response length" + ("" if recorded else f" (reached it{at})")
    if reason == "stop":
        return "it ended by itself (end of sequence or a stop string)" if recorded else f"shorter than the cap{at}"
    if reason:
        return "the stop reason the dump records"
    if body["length_unit"] != "tokens":
        return "the dump records none, and lengths are characters (no tokenizer): no token cap to compare with"
    if not cap:
        return "the dump records none, and the trace has no max response length to compare with"
    return "the dump records none"


def _cards(body: dict, trace: dict) -> html.Div:
    unit = body["length_unit"]
    return html.Div(
        [
            card("reward", _num(body["reward"])),
            card(f"prompt ({unit})", f"{body['prompt_len']:,}"),
            card(f"response ({unit})", f"{body['response_len']:,}"),
            card("stop reason", body.get("stop_reason") or "unknown", stop_reason_caption(body, trace)),
            card("repetition", _repetition(body.get("repeat_period")), "the response's last 1,000 characters"),
            card("ground truth", "–" if body.get("gts") is None else str(body["gts"])),
        ],
        className="cards",
        id="sample-cards",
    )


def _extras(extras: dict) -> html.Table | None:
    if not extras:
        return None
    rows = [
        html.Tr([html.Td(k), html.Td(_num(v) if isinstance(v, float) else str(v))]) for k, v in sorted(extras.items())
    ]
    return html.Table(
        [html.Thead(html.Tr([html.Th("key"), html.Th("value")])), html.Tbody(rows)],
        id="sample-extras",
        className="table",
    )


def _member(trace_id, body: dict, m: dict) -> html.Div:
    text = m.get("response_head") or ""
    parts = [text]
    if m.get("response_tail"):
        parts = [
            text,
            f"\n\n… {m['response_chars'] - len(text) - len(m['response_tail']):,} characters …\n\n",
            m["response_tail"],
        ]
    figures = f"reward {_num(m['reward'])} · {m['response_len']:,} {body['length_unit']}"
    if m.get("truncated"):
        figures += " · hit the max length"
    if m.get("repeat_period"):
        figures += f" · repeats (period {m['repeat_period']})"
    return html.Div(
        [
            html.A(
                f"sample {m['sample_idx']}",
                href=sample_href(trace_id, body["step"], body["group_idx"], m["sample_idx"]),
            ),
            html.Div(figures, className="muted"),
            html.Pre("".join(parts), style=MEMBER_STYLE),
        ],
        className="card",
        id=f"sample-member-{m['sample_idx']}",
    )


def body(trace: dict, step: int, group: int, sample: int) -> html.Div:
    trace_id = trace["id"]
    try:
        b = session.api().sample_text(trace_id, step, group, sample)
    except ApiError as exc:
        return alert(exc.message, id="sample-error")
    back = href(f"/traces/{trace_id}/samples?step={step}&sample={step}.{group}.{sample}")
    title = f"Sample {step}.{group}.{sample}" + (" (validation)" if b.get("validate") else "")
    group_cards = [_member(trace_id, b, m) for m in b["group"]]
    return html.Div(
        [
            html.H3(title, id="sample-title"),
            html.A("← the step's samples", href=back, id="sample-back"),
            _cards(b, trace),
            section("Prompt", html.Pre(b["prompt"], id="sample-prompt", style=TEXT_STYLE)),
            section("Response", html.Pre(b["response"], id="sample-response", style=TEXT_STYLE)),
            _extras(b["extras"]),
            section(
                f"The other samples of this prompt ({len(group_cards)})",
                html.Div(group_cards, className="grid-2", id="sample-group"),
                help_text="Same prompt, other samples of the group: their reward, length and how their responses "
                "begin and end.",
            )
            if group_cards
            else None,
        ]
    )


def layout(trace_id: str | None = None, step: str = "", group: str = "", sample: str = "", **_):
    ids = [step, group, sample]
    if not all(str(x).isdigit() for x in ids):
        return alert(f"No sample '{step}/{group}/{sample}'.", id="sample-error")
    s, g, i = (int(x) for x in ids)
    return trace_page(trace_id, __name__, f"/samples/{s}/{g}/{i}", lambda trace: body(trace, s, g, i))
