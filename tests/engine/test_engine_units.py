"""The engine replay's pure parts, without an engine: the calibration's fit
(engine/calibrate.py) on step logs made here — it recovers the coefficients of the
simulator's decode form and keeps chunked-prefill steps out — and the replayed workload
(engine/workload.py)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.calibrate import cpu_share, decode_rows, fit


def test_decode_fit_recovers_the_iteration_time_form():
    rng = np.random.default_rng(0)
    a, b_kv, c_seq = 2.4e-3, 0.21e-6, 146e-6
    log = []
    for batch in (1, 8, 32, 64):
        for ctx in (64, 512, 1024):
            for g in range(32):
                kv = batch * (ctx + g)
                dt = a + b_kv * kv + c_seq * batch
                log.append([0.0, dt * (1 + 0.01 * rng.standard_normal()), batch, kv, 0, 0, dt])
    # a chunked prefill's step: requests still waiting for their first token, far slower
    log.append([0.0, 0.5, 8, 4096, 0, 24, 0.25])
    x, y = decode_rows(log)
    assert len(y) == 4 * 3 * 32  # the prefill step is not a decode row
    c, r2 = fit(x, y)
    assert c == pytest.approx([a, b_kv, c_seq], rel=0.05)
    assert r2 > 0.99
    assert cpu_share(log) == pytest.approx((sum(x[6] for x in log)) / sum(x[1] for x in log))


def test_fit_keeps_coefficients_non_negative():
    x = np.column_stack([np.ones(20), np.arange(20.0), np.zeros(20)])
    y = 1.0 - 0.01 * np.arange(20.0)  # a falling line: the slope would be negative
    c, _ = fit(x, y)
    assert (c >= 0).all()


def test_engine_workload_keeps_whole_groups_scales_and_clips():
    from core.simulator import StepWorkload
    from engine.workload import engine_workload, prompt_ids

    w = StepWorkload.from_groups(3, [100, 200, 300], [np.array([10, 4000]), np.array([50, 60]), np.array([7, 8])])
    (out,) = engine_workload([w], max_requests=5, length_scale=0.5, max_len=1024)
    assert out.step == 3 and out.n_samples == 4  # two whole groups: a third would exceed 5
    assert out.prompt_len.tolist() == [50, 50, 100, 100]
    assert out.response_len.tolist() == [5, 1024 - 50, 25, 30]  # 2000 clipped to the context left
    (one,) = engine_workload([w], max_requests=1)
    assert one.n_samples == 2  # at least one whole group
    assert prompt_ids(3, 1, 8, 100) == prompt_ids(3, 1, 8, 100) != prompt_ids(3, 2, 8, 100)
    with pytest.raises(ValueError, match="length-scale"):
        engine_workload([w], length_scale=0)


def multiturn_step() -> object:
    """Two groups of two trajectories: group 0's with 2 and 1 turns, group 1's with 3 and 1."""
    from core.simulator import StepWorkload

    i = lambda *v: np.array(v, np.int64)  # noqa: E731
    return StepWorkload(
        step=4,
        group=i(0, 0, 1, 1),
        prompt_len=i(100, 100, 40, 40),
        response_len=i(300, 20, 500, 30),
        turn_sample=i(0, 0, 1, 2, 2, 2, 3),
        turn_prompt_tokens=i(100, 260, 100, 40, 190, 300, 40),
        turn_cached_tokens=i(0, 90, 100, 0, 40, 150, 40),
        turn_completion_tokens=i(60, 40, 20, 50, 30, 70, 30),
        turn_tool_latency_s=np.array([0.5, 0.3, 0.0, 0.2, np.nan, 0.0, 0.0]),
    )


def test_a_multiturn_step_is_replayed_turn_by_turn_with_the_context_the_cache_serves():
    from engine.workload import engine_workload

    (out,) = engine_workload([multiturn_step()], block_size=16)
    assert out.turn_sample.tolist() == [0, 0, 1, 2, 2, 2, 3]
    assert out.prompt_len.tolist() == [100, 100, 40, 40]  # the first turn's prompt
    assert out.turn_tool_latency_s.tolist() == [0.5, 0.0, 0.0, 0.2, 0.0, 0.0, 0.0]  # unknown: none; last: no wait
    # the cache serves a later turn the previous turn's prompt and response, a group's
    # later sample its first prompt: whole 16-token blocks, never a prompt's last token
    assert out.turn_cached_tokens.tolist() == [0, 160, 96, 0, 80, 208, 32]
    (half,) = engine_workload([multiturn_step()], max_requests=2, length_scale=0.5)
    assert half.n_samples == 2 and half.turn_sample.tolist() == [0, 0, 1]  # one whole group
    assert half.turn_prompt_tokens.tolist() == [50, 130, 50] and half.turn_completion_tokens.tolist() == [30, 20, 10]
    assert half.turn_cached_tokens.tolist() == [0, 80, 49]  # block 1: up to the prompt's last token
