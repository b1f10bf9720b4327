"""Headline figures of one trace (pure): the overview cards.

Cards: steps, samples, tokens (prompt + response), tail ratio (median over steps of
the response max/mean), imbalance (mean over steps of the max/mean DP token load, from
the "imbalance" analysis), truncation (share truncated by the trace's definition and
share at the length cap, over every training step), idle (the rollout idle share from
the "longtail" analysis, else the profiled GPU idle share from "gpu_timeline"; both
named apart from Simulate's replayed idle GPU share, which their captions point to).
Any other analysis shown on the Overview gets a card from its result's ``headline``
({"label", "value", "hint"}): a new analysis needs no card code here.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.figures.headlines import dig, gpu_idle_share, imbalance_headline, rollout_idle_share
from dashboard.views.formatting import human_count, human_number, human_ratio, human_share, kineto_steps, median

# The idle shares' definitions, each pointing at the other figure of that name.
ROLLOUT_IDLE_HINT = (
    "rollout slot-time idle while the step's longest sample runs: 1 − Σ length / (engines × longest), "
    "mean over steps{basis}. Not Simulate's replayed idle GPU share (every GPU, whole step)"
)
GPU_IDLE_HINT = (
    "GPU idle: profiled GPU time with no kernel running, mean over ranks (HTA definition). "
    "Not Simulate's replayed idle GPU share (a replay of the samples)"
)


@dataclass
class Card:
    key: str
    label: str
    value: str
    hint: str = ""
    source: str | None = None  # the analysis kind the figure comes from (its result may be behind the trace)


def overview_cards(
    trace: dict, steps: list[dict], response_summary: dict | None, results: dict[str, dict]
) -> list[Card]:
    tokens = sum((s.get("prompt_tokens") or 0) + (s.get("response_tokens") or 0) for s in steps)
    prompt = sum(s.get("prompt_tokens") or 0 for s in steps)
    rows = [r for r in (response_summary or {}).get("steps", []) if r.get("count")]
    tails = [r.get("tail_ratio") for r in rows]
    worst = max(rows, key=lambda r: r.get("tail_ratio") or 0) if rows else None
    kineto = kineto_steps(trace)
    n_steps = trace.get("n_steps") or len(steps) or len(kineto)
    cards = [
        Card(
            "steps",
            "Steps",
            human_count(n_steps),
            f"{sum(1 for s in steps if s.get('validate'))} validation" if any(s.get("validate") for s in steps) else "",
        ),
        Card(
            "samples",
            "Samples",
            human_count(trace.get("n_samples")),
            f"{human_count(trace.get('n_turns'))} turns"
            if trace.get("n_turns")
            else (f"{human_count(trace.get('n_gpu_events'))} GPU events" if trace.get("n_gpu_events") else ""),
        ),
        Card(
            "tokens",
            "Tokens",
            human_count(tokens) if steps else "—",
            f"{human_count(prompt)} prompt + {human_count(tokens - prompt)} response" if tokens else "",
        ),
        Card(
            "tail",
            "Tail ratio",
            human_ratio(median(tails)),
            f"median response max/mean; worst {human_ratio(worst.get('tail_ratio'))} at step {worst['step']}"
            if worst
            else "no samples",
        ),
    ]
    return [*cards, _truncation_card(trace, rows), *_analysis_cards(results), *headline_cards(results)]


def _share_of(rows: list[dict], key: str) -> float | None:
    """The share over every row's samples (None when a row lacks it)."""
    rates = [(r.get(key), r["count"]) for r in rows if not r.get("validate")]
    if not rates or any(v is None for v, _ in rates):
        return None
    return sum(v * n for v, n in rates) / sum(n for _, n in rates)


def _truncation_card(trace: dict, rows: list[dict]) -> Card:
    """Truncated by the trace's definition and, where stop reasons are recorded, the
    share at the length cap: each figure beside its definition."""
    t = trace.get("truncation") or {}
    truncated = _share_of(rows, "truncation_rate")
    if not t.get("basis"):
        return Card("truncation", "Truncated", "unknown", t.get("definition") or "no samples")
    hint = t.get("definition") or ""
    if t.get("stop_reason"):  # a sample may end at the cap for another reason: the second figure first
        at_cap = _share_of(rows, "at_cap_rate")
        shown = human_share(at_cap, 2) if at_cap is not None else "unknown"
        hint = f"{shown} at the length cap · {hint} · {t.get('at_cap_definition', '')}"
    return Card("truncation", "Truncated", human_share(truncated, 2) if truncated is not None else "unknown", hint)


def _analysis_cards(results: dict[str, dict]) -> list[Card]:
    """The cards drawn from analysis results: DP imbalance, data efficiency (DAPO runs)
    and the idle share (long tail, else the GPU timeline)."""
    imb, saved = imbalance_headline(results.get("imbalance"))
    cards = [
        Card(
            "imbalance",
            "DP imbalance",
            human_ratio(imb),
            f"max/mean token load; the best split (recorded / KK / LPT) saves {human_share(saved)}"
            if saved is not None
            else ("max/mean token load per step" if imb is not None else "imbalance analysis not available"),
            source="imbalance",
        )
    ]
    eff = results.get("data_efficiency")
    if eff and dig(eff, "summary", "generation_steps"):
        s = eff["summary"]
        cards.append(
            Card(
                "data-efficiency",
                "Tokens trained on",
                human_share(s.get("used_token_share")),
                f"of generated response tokens; {human_count(s.get('groups_used'))} of "
                f"{human_count(s.get('groups_generated'))} groups used; "
                f"~{human_share(s.get('unused_rollout_time_share'))} of rollout time on unused groups (estimate)",
                source="data_efficiency",
            )
        )
    rollout = rollout_idle_share(results.get("longtail"))
    gpu = gpu_idle_share(results.get("gpu_timeline"))
    if rollout is not None:
        timed = (results.get("longtail") or {}).get("basis") == "time"
        basis = ", from measured completion times" if timed else ", from response lengths"
        cards.append(
            Card("idle", "Rollout idle share", human_share(rollout), ROLLOUT_IDLE_HINT.format(basis=basis), "longtail")
        )
    elif gpu is not None:
        cards.append(Card("idle", "GPU idle share (profiled)", human_share(gpu), GPU_IDLE_HINT, "gpu_timeline"))
    else:
        cards.append(Card("idle", "Rollout idle share", "—", "long-tail / GPU timeline analysis not available"))
    return cards


# the analyses whose cards are drawn above, from their own figures
_DRAWN = frozenset({"imbalance", "data_efficiency", "longtail", "gpu_timeline"})


def headline_cards(results: dict[str, dict]) -> list[Card]:
    """A card per other analysis result carrying a ``headline`` ({"label", "value": a
    number or text, "hint"}), keyed by its kind."""
    cards = []
    for kind, result in results.items():
        head = result.get("headline") if kind not in _DRAWN and isinstance(result, dict) else None
        if isinstance(head, dict) and head.get("label"):
            value = head.get("value")
            shown = value if isinstance(value, str) else human_number(value)
            cards.append(Card(kind, str(head["label"]), shown, str(head.get("hint") or ""), source=kind))
    return cards


def analysed_steps(steps: list[dict]) -> list[int]:
    """The steps an analysis of the trace covers now: training steps with responses."""
    return sorted(s["step"] for s in steps if not s.get("validate") and (s.get("response_tokens") or 0) > 0)
