"""The advisor's rows say what is true: no zero-width interval without a noise model, one
row per effective configuration, and "faster than the runner-up" only when it is."""

from __future__ import annotations

import numpy as np

from core.simulator import MODEL_PRESETS, EngineLimits, StepWorkload
from core.simulator.advisor import advise, default_grid, identity, range_sentence

MODEL = MODEL_PRESETS["Qwen2.5-7B"]


def _steps(n_steps: int = 2, equal: bool = False) -> list[StepWorkload]:
    rng = np.random.default_rng(1)
    out = []
    for s in range(n_steps):
        if equal:  # every response the same length: DP balancing cannot change anything
            out.append(StepWorkload.from_groups(s, np.full(8, 100), [np.full(4, 200) for _ in range(8)]))
        else:
            out.append(
                StepWorkload.from_groups(s, rng.integers(50, 300, 8), [rng.integers(10, 600, 4) for _ in range(8)])
            )
    return out


def _sync_grid(n_gpus: int = 4) -> list[dict]:
    return [c for c in default_grid(n_gpus, MODEL) if c["policy"] == "sync"]


def test_without_a_noise_model_no_row_has_an_interval():
    out = advise(_steps(), "H100", 4, MODEL, grid=_sync_grid(), workers=1)
    for r in out["ranking"]:
        assert r["step_s"]["p10"] is None and r["step_s"]["p90"] is None, r["label"]
        assert all(s["p10"] is None and s["p90"] is None for s in r["steps"])
        assert r["within_noise_of_best"] is None
    assert out["best_is_clear"] is None


def test_identical_configurations_collapse_into_one_row_naming_the_settings():
    grid = _sync_grid()
    out = advise(_steps(), "H100", 4, MODEL, grid=grid, workers=1)
    # uncalibrated, "as calibrated" is the default limit of 256 running sequences
    keys = [identity(r, EngineLimits()) for r in out["ranking"]]
    assert len(keys) == len(set(keys)) == len(grid) // 2
    assert out["n_swept_settings"] == len(grid)
    for r in out["ranking"]:
        assert r["max_running_seqs"] is None and len(r["stands_for"]) == 2
        assert r["label"].endswith("(same as: max 256 running seqs)")
    # other calibrated limits that bind (2 running sequences): the two settings differ, both stay
    other = advise(_steps(), "H100", 4, MODEL, grid=grid, limits=EngineLimits(max_running_seqs=2), workers=1)
    assert other["n_configurations"] == len(grid)
    assert all(len(r["stands_for"]) == 1 and "same as" not in r["label"] for r in other["ranking"])


def test_limits_that_never_bind_replay_the_same_configuration_once():
    grid = _sync_grid()
    # 2048 running sequences as calibrated, 256 swept: 32 requests a step reach neither
    out = advise(_steps(), "H100", 4, MODEL, grid=grid, limits=EngineLimits(max_running_seqs=2048), workers=1)
    assert out["n_configurations"] == len(grid) // 2 and out["n_swept_settings"] == len(grid)
    for r in out["ranking"]:
        assert r["limits_never_bound"] and len(r["stands_for"]) == 2
        assert r["label"].endswith("(same as: max 256 running seqs: no engine limit reached)")


def test_a_tie_is_said_as_a_tie_with_the_figures():
    grid = [c for c in _sync_grid() if c["max_running_seqs"] is None]  # none and kk balancing
    out = advise(_steps(1, equal=True), "H100", 4, MODEL, grid=grid, workers=1)
    first = out["ranges"][0]
    assert first["verdict"] == "tie" and first["winner_s"] == first["runner_up_s"]
    assert "tied with the runner-up" in first["said"] and "faster" not in first["said"]
    assert f"{first['winner_s']:.1f} s vs {first['runner_up_s']:.1f} s" in first["said"]


def test_faster_is_said_only_when_it_is():
    rg = {"steps": [0, 2], "winner": "a", "margin_min": 0.1, "margin_max": 0.2, "winner_s": 9.0, "runner_up_s": 10.0}
    assert range_sentence({**rg, "verdict": "faster"}) == (
        "steps 0-2: a, 10.0-20.0% faster than the runner-up (9.0 s vs 10.0 s)"
    )
    within = range_sentence({**rg, "verdict": "within uncertainty"})
    assert "within the uncertainty" in within and "faster" not in within
    tie = range_sentence({**rg, "margin_min": 0.0001, "margin_max": 0.0001, "verdict": "tie"})
    assert tie == "steps 0-2: a, tied with the runner-up (9.0 s vs 10.0 s)"


def test_the_page_and_figure_say_uncalibrated():
    import httpx

    from dashboard.app import create_dash
    from dashboard.figures.advice import ranking_rows, winner_figure

    create_dash(
        "http://api.test", http_client=httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    )
    from dashboard.pages.advise import ranges_list, ranking_table  # registers with the app made above

    grid = [c for c in _sync_grid() if c["max_running_seqs"] is None]
    out = {**advise(_steps(1, equal=True), "H100", 4, MODEL, grid=grid, workers=1), "uncertainty": None}
    assert all(r["interval"] == "uncalibrated: no interval" for r in ranking_rows(out))
    assert "uncalibrated: no interval" in str(ranking_table(out))
    assert all(t.error_y.array is None for t in winner_figure(out).data)
    text = str(ranges_list(out))
    assert "tied with the runner-up" in text and "0.0% faster" not in text
    # advice stored before: zero-width intervals of an uncalibrated run are not shown as such
    old = {**out, "ranking": [{**r, "step_s": {**r["step_s"], "p10": 31.1, "p90": 31.1}} for r in out["ranking"]]}
    assert "31.1-31.1" not in str(ranking_table(old))
