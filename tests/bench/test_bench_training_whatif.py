"""bench.training_whatif: the training model fitted on one row of verl's table predicts
the others and the split-trainer what-ifs; its figures follow the model's parameters."""

from __future__ import annotations

import pytest

from bench import training_whatif as tw


def test_each_row_fitted_reproduces_itself_and_predicts_the_five_others():
    for i, (gpus, colocated, measured) in enumerate(tw.VERL_ROWS):
        rows = tw.predictions(i)
        assert len(rows) == len(tw.VERL_ROWS) - 1
        assert (gpus, colocated) not in {(r["gpus"], r["colocated"]) for r in rows}
        work = measured / tw.seconds_per_work(gpus, colocated)
        assert work * tw.seconds_per_work(gpus, colocated) == pytest.approx(measured)


def test_the_split_whatifs_are_the_tables_ratios_against_the_models():
    ws = tw.split_whatifs()
    assert [w["colocated_gpus"] for w in ws] == [32, 64, 128]
    assert [round(w["measured"], 2) for w in ws] == [0.86, 0.85, 1.01]
    # more GPUs per trainer rank pay more serial work: the model's speedup of the split grows with scale
    assert ws[0]["predicted"] < ws[1]["predicted"] < ws[2]["predicted"]


def test_the_prediction_moves_with_the_colocation_overhead(monkeypatch):
    from core.simulator import ClusterConfig
    from core.simulator.training import train_rate

    before = tw.split_whatifs()[0]["predicted"]

    def no_overhead(gpus: int, colocated: bool) -> float:
        cluster = ClusterConfig(train_dp=gpus, train_tp=1, colocation_overhead=1.0)
        return 1.0 / (gpus * train_rate(cluster, colocated=colocated))

    monkeypatch.setattr(tw, "seconds_per_work", no_overhead)
    assert tw.split_whatifs()[0]["predicted"] < before


def test_main_prints_every_fit_and_the_mean(capsys):
    tw.main()
    out = capsys.readouterr().out
    assert out.count("fit on ") == len(tw.VERL_ROWS) and "mean |error| over 30 predicted rows" in out
    assert out.count("what-if, trainer of") == 3
