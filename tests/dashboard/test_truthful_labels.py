"""Labels that say what is true (each failed before its fix): no "versus measured"
without a measured series; an uncalibrated replay of the rllm trace names the timings it
has (reward per rank) and the ones calibration needs, on the API, the CLI and the
Simulate page; the stop reason's caption matches its value; the workload fit's share at
the cap is unknown without a cap; Search-R1's share at the length cap beside its
truncated share; the two idle shares named apart, each pointing at the other; the
multi-turn latency fit's caveats; reward percentiles of 2 ranks shown as the values."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from core.analysis.multiturn import LOW_R2, fit_caveats
from dashboard.figures.distributions import AT_CAP_NAME, tail_figure
from dashboard.figures.multiturn import latency_vs_tokens_figure, reward_latency_figure
from dashboard.figures.simulation import predicted_vs_measured_figure, summary_cards
from dashboard.views.overview import overview_cards
from rlvr_explorer.cli import app
from tests.conftest import wait_for_job

runner = CliRunner()
RLLM = ("polytrace", "rllm_deepcoder_14b_16k")
SEARCH_R1 = ("polytrace", "search_r1_qwen2_5_7b")


@pytest.fixture(scope="module")
def pages():
    """The page modules (they register themselves with a Dash app, made first)."""
    from dashboard.app import create_dash

    create_dash("http://127.0.0.1:9")
    from dashboard.pages import sample, simulate, workload

    return sample, simulate, workload


def last_json(output: str) -> dict:
    return orjson.loads(output.strip().splitlines()[-1])


def upload_folder(api, folder) -> dict:
    """The folder's files as one upload, ingested (by the worker when large: 202)."""
    files = [("files", (f.name, f.read_bytes(), "application/json")) for f in sorted(folder.iterdir())]
    r = api.post("/api/v1/traces", files=files)
    assert r.status_code in (201, 202), r.text
    if r.status_code == 201:
        return r.json()
    job = wait_for_job(api, r.json()["job"]["id"])
    assert job["status"] == "succeeded", job
    return api.get(f"/api/v1/traces/{r.json()['trace']['id']}").json()


# -- predicted versus measured, and the rllm trace's timings -----------------------------
def _replay(steps: int = 2) -> dict:
    return {
        "params": {"policy": {"kind": "sync"}},
        "result": {
            "a": {"steps": [{"step": s, "stages": {"rollout": 10.0 + s}, "step_time": 20.0 + s} for s in range(steps)]}
        },
    }


def test_no_versus_without_a_measured_series():
    title = predicted_vs_measured_figure(_replay(), []).layout.title.text
    assert "versus" not in title and "no measured" in title
    measured = predicted_vs_measured_figure(_replay(), [{"step": 0, "t_gen": 9.0}])
    assert measured.layout.title.text.startswith("Predicted versus measured")
    assert "measured rollout" in [t.name for t in measured.data]
    step_only = predicted_vs_measured_figure(_replay(), [{"step": 1, "t_step": 30.0}])
    assert step_only.layout.title.text.startswith("Predicted versus measured")


def test_rllm_replay_names_the_timings_it_has_cli_and_dashboard(env, shared_fixtures, pages):
    made = last_json(runner.invoke(app, ["ingest", str(shared_fixtures.joinpath(*RLLM)), "--json"]).output)
    r = runner.invoke(app, ["simulate", str(made["id"]), "--gpus", "8"])
    assert r.exit_code == 0, r.output
    assert "reward time per rank" in r.stdout and "t_gen / t_update_actor" in r.stdout
    assert "has no measured timings" not in r.stdout
    result = last_json(runner.invoke(app, ["simulate", str(made["id"]), "--gpus", "8", "--json"]).output)
    note = result["calibration_note"]
    assert result["calibration"] is None
    assert "reward time per rank" in note and "lacks" in note and "no measured timings" not in note
    job = {"params": {"policy": {"kind": "sync"}}, "result": result}
    hint = next(c["hint"] for c in summary_cards(job) if c["key"] == "accuracy-rollout")
    assert hint == note
    assert "reward time per rank" in str(pages[1].accuracy_table(result).children)
    # and no measured rollout or step time: the chart does not say "versus"
    assert "versus" not in predicted_vs_measured_figure(job, []).layout.title.text


def test_rllm_replay_over_the_api_says_the_same(api, worker, shared_fixtures):
    trace = upload_folder(api, shared_fixtures.joinpath(*RLLM))
    body = {"trace_id": trace["id"], "cluster": {"gpu": "H100", "n_gpus": 8}, "model": "qwen2.5-7b"}
    r = api.post("/api/v1/simulations", json=body)
    assert r.status_code == 202, r.text
    job = wait_for_job(api, r.json()["id"])
    assert job["status"] == "succeeded", job
    note = job["result"]["calibration_note"]
    assert note.startswith("not calibrated: the trace's measured timings are reward time per rank")


def test_a_turned_off_calibration_says_so():
    from core.simulator.measured import uncalibrated_note

    assert uncalibrated_note([], False) == "not calibrated: calibration was turned off"
    assert "no measured timings" in uncalibrated_note([], None)


# -- the stop reason card --------------------------------------------------------------
def _text_body(reason, unit="characters", extras=None) -> dict:
    return {"stop_reason": reason, "length_unit": unit, "extras": extras or {}, "response_len": 252}


def test_unknown_stop_reason_says_why_not_length(pages):
    stop_reason_caption = pages[0].stop_reason_caption
    caption = stop_reason_caption(_text_body(None), {"max_response_len": None})
    assert "reached max_response_len" not in caption and not caption.startswith("length")
    assert "records none" in caption and "characters" in caption
    no_cap = stop_reason_caption(_text_body(None, "tokens"), {"max_response_len": None})
    assert "no max response length" in no_cap


def test_known_stop_reasons_are_captioned_by_their_value(pages):
    stop_reason_caption = pages[0].stop_reason_caption
    recorded = _text_body("length", "tokens", {"finish_reason": "length"})
    assert "stopped it at the max response length" in stop_reason_caption(recorded, {"max_response_len": 8192})
    inferred = stop_reason_caption(_text_body("stop", "tokens"), {"max_response_len": 8192})
    assert "shorter than the cap" in inferred and "8,192" in inferred
    assert "ended by itself" in stop_reason_caption(_text_body("stop", "tokens", {"finish_reason": "stop"}), {})
    assert stop_reason_caption(_text_body("abort", "tokens", {"stop_reason": "abort"}), {}) == (
        "the stop reason the dump records"
    )


# -- the synthetic workload's truncation -----------------------------------------------
def test_workload_fit_without_a_cap_says_unknown(pages):
    from core.workload.fit import fit_task

    rng = np.random.default_rng(0)
    n = 400
    response = rng.integers(100, 5000, n)  # no repeated maximum: no cap shows
    response[np.argmax(response)] += 1
    fit = fit_task(
        np.repeat(np.arange(4), n // 4), np.repeat(np.arange(100), 4), rng.integers(50, 500, n), response, task="math"
    )
    assert fit.max_response_len is None
    report = fit.report()
    assert report["truncation_rate"] is None
    table = str(pages[2].fit_table({"fit": {"math": report}}))
    assert "unknown" in table and "0.00%" not in table


# -- Search-R1: truncated by stop reason, and at the length cap --------------------------
@pytest.fixture()
def search_r1(api, worker, shared_fixtures) -> dict:
    return upload_folder(api, shared_fixtures.joinpath(*SEARCH_R1))


def test_search_r1_reports_both_truncation_figures(api, search_r1, shared_fixtures):
    rows = [
        orjson.loads(line)
        for f in sorted(shared_fixtures.joinpath(*SEARCH_R1).iterdir())
        for line in f.read_bytes().splitlines()
        if line.strip()
    ]
    step0 = [r for r in rows if r["step"] == 0]
    at_cap = sum(r["final_response_len"] >= r["max_response_len"] for r in step0)
    stopped = sum(r["finish_reason"] == "length" for r in step0)
    assert (len(step0), at_cap) == (2048, 37) and stopped < at_cap  # the figures

    summary = api.get(f"/api/v1/traces/{search_r1['id']}/summaries").json()
    t = summary["truncation"]
    assert t["basis"] == "stop_reason" and t["length_cap"] == 3000
    assert t["definition"].startswith("truncated = the engine stopped the response for length")
    assert t["at_cap_definition"].startswith("at the length cap = the response reached the 3,000-token cap")
    s0 = next(x for x in summary["steps"] if x["step"] == 0)
    assert s0["truncation_rate"] == pytest.approx(stopped / 2048)
    assert s0["at_cap_rate"] == pytest.approx(37 / 2048)
    assert s0["p99"] == s0["max"] == 3000

    # the pages: the Distributions tail chart and the Overview card show both
    tail = tail_figure(summary)
    series = {tr.name: tr for tr in tail.data}
    assert series[AT_CAP_NAME].y[0] == pytest.approx(100 * 37 / 2048)
    trace = api.get(f"/api/v1/traces/{search_r1['id']}").json()
    card = next(c for c in overview_cards(trace, [], summary, {}) if c.key == "truncation")
    assert "at the length cap" in card.hint and "truncated = " in card.hint
    training = [x for x in summary["steps"] if not x.get("validate")]
    pooled = sum(x["at_cap_rate"] * x["count"] for x in training) / sum(x["count"] for x in training)
    assert f"{100 * pooled:.2f}%" in card.hint


def test_truncation_unknown_reads_unknown_on_the_overview():
    trace = {"truncation": {"basis": None, "definition": "truncation unknown: ..."}}
    card = next(c for c in overview_cards(trace, [], {"steps": [{"step": 0, "count": 3}]}, {}) if c.key == "truncation")
    assert card.value == "unknown"


# -- the idle shares ---------------------------------------------------------------------
def test_idle_shares_are_named_apart_and_point_at_each_other():
    longtail = {"summary": {"idle_fraction": {"mean": 0.913}}, "basis": "tokens"}
    card = next(c for c in overview_cards({}, [], None, {"longtail": longtail}) if c.key == "idle")
    assert card.label == "Rollout idle share" and card.value == "91.3%"
    assert "1 − Σ length / (engines × longest)" in card.hint and "Simulate's replayed idle GPU share" in card.hint
    gpu = {"temporal": [{"rank": 0, "idle_pct": 50.0}]}
    gcard = next(c for c in overview_cards({}, [], None, {"gpu_timeline": gpu}) if c.key == "idle")
    assert gcard.label == "GPU idle share (profiled)" and "Simulate" in gcard.hint
    job = _replay()
    job["result"]["a"].update(idle_fraction=0.748, n_gpus=8)
    sim = next(c for c in summary_cards(job) if c["key"] == "makespan-a")
    assert "replayed idle GPU share 74.8%" in sim["hint"] and "Overview's rollout idle share" in sim["hint"]


# -- multi-turn --------------------------------------------------------------------------
def test_a_poor_or_non_physical_latency_fit_carries_its_caveat():
    fit = {"n": 500, "a": 0.4, "b": -0.000012, "c": 0.00002, "r2": 0.28}
    caveats = fit_caveats(fit)
    assert any("R² 0.28" in c for c in caveats) and any("negative prompt coefficient" in c for c in caveats)
    assert fit_caveats({"a": 0.4, "b": 0.0001, "c": 0.0002, "r2": LOW_R2 + 0.3}) == []
    result = {
        "summary": {
            "latency_fit": {**fit, "caveats": caveats},
            "latency_by_prompt": {"bin_lo": [100], "bin_hi": [200], "latency_mean": [1.0], "count": [5]},
        }
    }
    title = latency_vs_tokens_figure(result).layout.title.text
    assert "caveat" in title and "R² 0.28" in title and "negative prompt coefficient" in title


def test_the_multiturn_analysis_flags_its_fit(shared_fixtures):
    from core.analysis.multiturn import solve_fit

    sums = {"n": 4, "xtx": np.eye(3).tolist(), "xty": [1.0, -1.0, 1.0], "y_sum": 1.0, "yy": 3.0}
    assert any("negative prompt" in c for c in solve_fit(sums)["caveats"])


def test_reward_of_two_ranks_shows_their_values_not_percentiles(env, shared_fixtures):
    from core.analysis.latency import MIN_PERCENTILE_VALUES

    made = last_json(runner.invoke(app, ["ingest", str(shared_fixtures.joinpath(*RLLM)), "--json"]).output)
    from backend.store.db import get_engine, new_session
    from backend.store.models import Trace
    from backend.store.trace_tables import load_trace_data
    from core.analysis.latency import analyze_latency
    from core.analysis.registry import ANALYSES

    with new_session() as s:
        trace = s.get(Trace, made["id"])
        assert trace is not None
        with get_engine().connect() as conn:
            data = load_trace_data(conn, trace, ANALYSES["latency"].tables)
    result = analyze_latency(data)
    entry = result["reward"][0]
    assert entry["ranks"] == 2 < MIN_PERCENTILE_VALUES and entry["few_ranks"]
    fig = reward_latency_figure(result)
    names = [t.name for t in fig.data]
    assert "p99" not in names and {"rank 0", "rank 4"} <= set(names)
    assert "not percentiles" in fig.layout.title.text
    rank0 = next(t for t in fig.data if t.name == "rank 0")
    assert rank0.y[0] == pytest.approx(entry["seconds"][entry["rank"].index(0)])


def test_cli_ingest_names_both_definitions_where_stop_reasons_are_recorded(env, shared_fixtures):
    r = runner.invoke(app, ["ingest", str(shared_fixtures.joinpath(*SEARCH_R1))])
    assert r.exit_code == 0, r.output
    assert "truncated = the engine stopped the response for length" in r.stdout
    assert "at the length cap = the response reached the 3,000-token cap" in r.stdout
    rllm = runner.invoke(app, ["ingest", str(shared_fixtures.joinpath(*RLLM))])
    assert "truncated = the response reached" in rllm.stdout and "at the length cap" not in rllm.stdout
