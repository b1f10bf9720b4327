"""The configuration advisor: a sweep over layouts x policies x balancing x concurrency on
one GPU budget, ranked by predicted step time, with who wins where."""

from __future__ import annotations

import numpy as np
import pytest

from core.simulator import MODEL_PRESETS, ClusterConfig, EngineLimits, Policy, StepWorkload, simulate
from core.simulator.advisor import advise, default_grid, transfer_coefficients
from core.simulator.policies import POLICIES
from core.simulator.predictor import roofline_coefficients

MODEL = MODEL_PRESETS["Qwen2.5-7B"]


def _steps(n_steps: int = 3) -> list[StepWorkload]:
    rng = np.random.default_rng(0)
    out = []
    for s in range(n_steps):
        scale = 1.0 + 0.5 * s  # responses lengthen: the winner may change
        out.append(
            StepWorkload.from_groups(
                s, rng.integers(50, 300, 16), [rng.integers(10, int(800 * scale), 4) for _ in range(16)]
            )
        )
    return out


def test_the_grid_covers_the_budget_and_every_policy():
    grid = default_grid(8, MODEL)
    assert len(grid) >= 50
    assert {c["policy"] for c in grid} == set(POLICIES)
    for c in grid:
        used = c["rollout_replicas"] * c["rollout_tp"]
        if not POLICIES[c["policy"]].disaggregated:
            assert used == 8 and c["train_dp"] == 8
        else:
            assert used + c["train_dp"] == 8


def test_advice_ranks_by_step_time_and_matches_a_direct_replay():
    steps = _steps()
    grid = default_grid(8, MODEL)
    out = advise(steps, "H100", 8, MODEL, grid=grid, workers=2)
    # uncalibrated: "running seqs as calibrated" is the default 256, one row with "max 256"
    assert out["n_configurations"] == len(grid) // 2 and out["n_swept_settings"] == len(grid)
    means = [r["step_s"]["mean"] for r in out["ranking"]]
    assert means == sorted(means) and out["ranking"][0]["vs_best"] == 1.0
    best = out["ranking"][0]
    cluster = ClusterConfig(
        n_gpus=8, rollout_replicas=best["rollout_replicas"], rollout_tp=best["rollout_tp"], train_dp=best["train_dp"]
    )
    limits = (
        EngineLimits() if best["max_running_seqs"] is None else EngineLimits(max_running_seqs=best["max_running_seqs"])
    )
    direct = simulate(steps, cluster, MODEL, limits, Policy(kind=best["policy"], balancing=best["balancing"]))
    assert best["step_s"]["mean"] == np.mean([s.step_time for s in direct.steps])
    # who wins where: ranges cover every step, margins >= 0
    covered = [s for r in out["ranges"] for s in range(r["steps"][0], r["steps"][1] + 1)]
    assert covered == [0, 1, 2] and all(r["margin_min"] >= 0 for r in out["ranges"])
    assert [w["step"] for w in out["per_step"]] == [0, 1, 2]


def test_calibrated_coefficients_move_to_another_tp_by_the_roofline_ratio():
    c1 = ClusterConfig(rollout_replicas=8, rollout_tp=1)
    c4 = ClusterConfig(rollout_replicas=2, rollout_tp=4)
    cal = roofline_coefficients(c1, MODEL).scaled(2.0)
    moved = transfer_coefficients(cal, c1, c4, MODEL)
    assert moved.decode_a == pytest.approx(2.0 * roofline_coefficients(c4, MODEL).decode_a)


def test_dashboard_builders_read_the_advice():
    from dashboard.figures.advice import ranking_rows, winner_figure

    out = advise(_steps(2), "H100", 4, MODEL, grid=default_grid(4, MODEL)[:12], workers=1)
    rows = ranking_rows(out, top=5)
    assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5] and rows[0]["label"] == out["best"]
    fig = winner_figure(out)
    assert len(fig.data) == 2 and list(fig.data[0].x) == [0, 1]
    assert list(fig.data[0].y) == [s["mean"] for s in out["ranking"][0]["steps"]]


def test_the_advise_page_shows_params_and_causes():
    import httpx

    from dashboard.app import create_dash
    from dashboard.figures.advice import ranking_rows

    create_dash(
        "http://api.test", http_client=httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    )
    from dashboard.pages.advise import ranges_list, ranking_table  # registers with the app made above

    grid = [c for c in default_grid(4, MODEL) if c["policy"] in ("sync", "partial") and c["balancing"] == "none"]
    out = advise(_steps(2), "H100", 4, MODEL, grid=grid, workers=1)
    rows = ranking_rows(out, top=len(grid))
    by_label = {r["label"]: r for r in rows}
    for r in out["ranking"]:
        row = by_label[r["label"]]
        if r["policy"] == "partial":
            assert row["params"] == f"over_provision={r['params']['over_provision']}"
            assert row["vs_ref"] == pytest.approx(r["gain"]["speedup"]) and row["cause"] == r["gain"]["phrase"]
        else:
            assert row["params"] == ""
    text = str(ranking_table(out))
    assert "Largest cause" in text and "over_provision=1.5" in text
    if out["why_best"]:
        assert "Why the best" in str(ranges_list(out))


def test_the_grid_sweeps_each_policys_declared_parameters_within_the_bound():
    from core.simulator.advisor import MAX_PARAM_COMBOS, param_sweep

    grid = default_grid(8, MODEL)
    for kind, spec in POLICIES.items():
        combos = param_sweep(spec)
        assert 1 <= len(combos) <= MAX_PARAM_COMBOS
        swept = {i.name: {i.default, *i.grid} for i in spec.param_infos if i.grid}
        assert all(set(c) == set(swept) for c in combos)
        # every declared value is tried unless it makes the policy replay another kind
        for name, values in swept.items():
            tried = {c[name] for c in combos}
            assert all(v in tried or spec.equivalent_to(spec.resolve({name: v})) for v in values)
        labels = {c["label"].split(" | ")[0] for c in grid if c["policy"] == kind}
        assert len(labels) == len(combos)
    partial = {c["label"].split(" | ")[0] for c in grid if c["policy"] == "partial"}
    assert partial == {"partial(over_provision=2)", "partial(over_provision=1.5)"}
    assert len({c["label"] for c in grid}) == len(grid)


def test_a_sweep_declaring_too_many_combinations_is_refused():
    import dataclasses

    from core.simulator.advisor import param_sweep
    from core.simulator.policies import param

    @dataclasses.dataclass(frozen=True)
    class Wide:
        a: int = param(1, "a", grid=(2, 3))
        b: int = param(1, "b", grid=(2, 3))

    spec = dataclasses.replace(POLICIES["sync"], params=Wide)
    with pytest.raises(ValueError, match="at most"):
        param_sweep(spec)


def test_advice_with_noise_has_intervals_for_every_configuration_and_names_causes():
    from core.simulator.uncertainty import NoiseModel

    steps = _steps()
    noise = NoiseModel([200.0], [0.0, 0.0], [0.2, 0.1], [100, 100], step_sd=0.05)
    grid = [c for c in default_grid(8, MODEL) if c["max_running_seqs"] is None and c["balancing"] == "none"]
    out = advise(steps, "H100", 8, MODEL, noise=noise, grid=grid, workers=2, n_runs=50, policy_runs=8)
    assert out["n_configurations"] == len(grid)
    for r in out["ranking"]:
        assert r["step_s"]["p90"] > r["step_s"]["p10"], r["label"]
        assert r["params"] == next(c["params"] for c in grid if c["label"] == r["label"])
        assert "digest" not in r
    means = [r["step_s"]["mean"] for r in out["ranking"]]
    assert means == sorted(means)
    ref = next(r for r in out["ranking"] if r["policy"] == "sync")
    assert out["reference"] == ref["label"] and ref["gain"] is None
    for r in out["ranking"]:
        g = r["gain"]
        if g is None or g["verdict"] == "same":
            continue
        # the named cause moves the makespan the way the verdict says
        assert g["cause"] is not None and (g["cause_s"] < 0) == (g["verdict"] == "faster")
    best = out["ranking"][0]
    assert best["within_noise_of_best"] and all(
        r["cause"] is not None or r["winner"] == ref["label"] for r in out["ranges"]
    )
    if out["best"] != ref["label"]:
        assert out["why_best"]["b"]["label"] == out["best"]
