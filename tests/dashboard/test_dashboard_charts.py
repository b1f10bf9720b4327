"""Issue 32, item 9: charts that misled, as pure figure builders of API payloads.

Karmarkar-Karp's line no longer hides under LPT's; the metric explorer's y axes carry the
unit its key says; the Distributions truncation subtitle wraps between words instead of
being cut; Simulate's speedup axis starts at 0 with the overall figure in the legend, not
over a tick, and its idle panels share one scale; Compare says what two GPU-only traces
lack instead of drawing empty panels.
"""

from __future__ import annotations

import pytest

from dashboard.figures.compare import compare_panels
from dashboard.figures.distributions import SUBTITLE_CHARS, tail_figure
from dashboard.figures.imbalance import SAME_SPLIT_NOTE, imbalance_ratio_figure
from dashboard.figures.metrics import metric_unit, metrics_figure
from dashboard.figures.simulation import idle_cause_figure, speedup_figure
from tests.dashboard.test_dashboard_figures import sim_payload


def _imbalance(kk_lpt: list[tuple[float, float]]) -> dict:
    steps = []
    for i, (kk, lpt) in enumerate(kk_lpt):
        rec = [300.0, 100.0]
        mean = sum(rec) / 2
        steps.append(
            {
                "step": i,
                "tokens": {
                    "recorded": rec,
                    "mean": mean,
                    "max_over_mean": 1.5,
                    "kk_max_over_mean": kk / mean,
                    "lpt_max_over_mean": lpt / mean,
                },
            }
        )
    return {"dp_size": 2, "steps": steps}


def test_karmarkar_karp_stays_visible_when_lpt_gives_the_same_split():
    fig = imbalance_ratio_figure(_imbalance([(210, 210), (220, 220)]))
    by = {t.name: t for t in fig.data}
    kk, lpt = by["Karmarkar-Karp"], by["LPT"]
    assert list(kk.y) == list(lpt.y)  # the same split: drawn on top of each other
    assert kk.line.dash != lpt.line.dash and kk.marker.symbol != lpt.marker.symbol
    assert kk.line.width > lpt.line.width  # KK wider, drawn first: it shows around LPT
    assert [t.name for t in fig.data].index("Karmarkar-Karp") < [t.name for t in fig.data].index("LPT")
    assert SAME_SPLIT_NOTE in fig.layout.title.text
    differ = imbalance_ratio_figure(_imbalance([(210, 220), (220, 220)]))
    assert SAME_SPLIT_NOTE not in differ.layout.title.text


@pytest.mark.parametrize(
    ("key", "unit"),
    [
        ("t_gen", "s"),
        ("timing_s/gen", "s"),
        ("timing_per_token_ms/gen", "ms"),
        ("response/p99", "tokens"),
        ("response/tail_ratio", "ratio"),
        ("response/truncation_rate", "fraction"),
        ("prompt_tokens", "tokens"),
        ("n_samples", "samples"),
        ("response_length/mean", "tokens"),
        ("perf/throughput", "tokens/s"),
        ("longtail/idle_fraction", "fraction"),
        ("imbalance/tokens.max_over_mean", "ratio"),
        ("actor/entropy", None),
    ],
)
def test_metric_units_come_from_the_key(key, unit):
    assert metric_unit(key) == unit


def test_metric_explorer_y_axes_carry_units():
    payload = {
        "trace_id": 1,
        "name": "run",
        "steps": [0, 1, 2],
        "series": {"t_gen": [1.0, 2.0, 3.0], "response/p99": [10, 20, 30], "actor/entropy": [0.5, 0.4, 0.3]},
    }
    fig = metrics_figure([payload], ["t_gen", "response/p99", "actor/entropy"])
    titles = [fig.layout[f"yaxis{i if i > 1 else ''}"].title.text for i in (1, 2, 3)]
    assert titles == ["s", "tokens", "value (unit not in its name)"]


def test_truncation_subtitle_wraps_between_words_never_cut():
    definition = (
        "truncated = the engine stopped the response for length (its recorded stop reason); samples without one "
        "count when their response reaches the cap of 3000 tokens (inferred from the longest responses)"
    )
    payload = {
        "field": "response",
        "truncation": {"basis": "stop_reason", "definition": definition},
        "steps": [{"step": 0, "count": 100, "tail_ratio": 3.0, "truncation_rate": 0.02}],
    }
    fig = tail_figure(payload)
    sub = fig.layout.title.text.split("<sup>", 1)[1].split("</sup>", 1)[0]
    lines = sub.split("<br>")
    assert len(lines) > 1 and all(len(line) <= SUBTITLE_CHARS for line in lines)
    assert " ".join(lines) == definition  # every word whole, in order
    assert fig.layout.margin.t > 76  # room for the extra lines above the plot


def test_speedup_axis_starts_at_zero_and_the_overall_figure_is_in_the_legend():
    job = sim_payload()
    fig = speedup_figure(job)
    assert fig.layout.yaxis.range[0] == 0
    assert fig.layout.yaxis.range[1] >= max(fig.data[0].y)
    assert not any("overall" in (a.text or "") for a in fig.layout.annotations)  # nothing over a tick label
    overall = next(t for t in fig.data if (t.name or "").startswith("overall"))
    assert overall.name == "overall 1.200x" and list(overall.y) == pytest.approx([1.2, 1.2])


def test_idle_panels_share_one_y_scale():
    fig = idle_cause_figure(sim_payload())
    assert fig.layout.yaxis2.matches == "y" and fig.layout.yaxis.rangemode == "tozero"


def test_compare_of_two_gpu_only_traces_says_what_they_lack():
    gpu_only = {"n_samples": 0, "n_gpu_events": 1200}
    shown = compare_panels(gpu_only, gpu_only, [], [])
    assert (shown["lengths"], shown["stages"]) == (False, False)
    assert "rollout lengths" in shown["note"] and "stage timings" in shown["note"] and "GPU trace diff" in shown["note"]
    with_samples = compare_panels({"n_samples": 64}, gpu_only, [{"step": 0, "t_gen": 2.0}], [])
    assert with_samples == {"lengths": True, "stages": True, "note": None}
