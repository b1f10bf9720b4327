"""Figure builders show the analysis' numbers as they are: signed terms, gaps at missing
steps, definitions in captions, no negative 'saving'."""

from __future__ import annotations

from dashboard.figures.multiturn import counts_hist_figure, fit_label, latency_vs_tokens_figure


def test_fit_label_writes_negative_terms_as_minus_and_per_thousand_tokens():
    fit = {"n": 10, "a": 1.5, "b": 0.00012, "c": -0.000024, "r2": -0.024}
    label = fit_label(fit)
    assert "+ -" not in label and "+ −" not in label
    assert label == "1.50 s + 0.120 s/k prompt − 0.024 s/k completion, R² -0.02"
    bins = {"bin_lo": [16.0], "bin_hi": [32.0], "count": [3], "latency_mean": [2.0]}
    summary = {"latency_fit": fit, "latency_by_prompt": bins}
    title = latency_vs_tokens_figure({"summary": summary}).layout.title.text
    assert "− 0.024 s/k completion" in title


def test_tool_call_histogram_states_its_definition():
    result = {"summary": {"turns_hist": [0, 2], "tool_calls_hist": [1, 1], "tool_calls_basis": "tool_calls"}}
    assert "stored tool-call rows" in counts_hist_figure(result).layout.title.text
