"""The advisor's model proposal (core.simulator.model_guess): a trace named or described
with a model proposes that preset, never the default for a run that says otherwise."""

from __future__ import annotations

import pytest

from core.simulator.model_guess import propose_model


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("verl dapo 32b", "Qwen2.5-32B"),
        ("verl_dapo_qwen2_5_32b", "Qwen2.5-32B"),
        ("verl_video_qwen2_5_vl_7b", "Qwen2.5-VL-7B"),
        ("search_r1_qwen2_5_7b", "Qwen2.5-7B"),
        ("rllm_deepcoder_14b_16k", "DeepCoder-14B"),  # 16k is a length, not a size
        ("grpo Qwen3-8B math", "Qwen3-8B"),
        ("llama 3.1 8B gsm8k", "Llama-3.1-8B"),
        ("qwen2.5-1.5b tiny", "Qwen2.5-1.5B"),
    ],
)
def test_a_name_that_names_a_model_proposes_it(name, want):
    got = propose_model(name)
    assert got is not None and got[0] == want and got[1] == name


def test_metadata_wins_and_nothing_is_guessed_without_a_size():
    meta = {"config": {"actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-72B-Instruct"}}}, "note": "7b"}
    assert propose_model("run 7b", meta) == ("Qwen2.5-72B", "Qwen/Qwen2.5-72B-Instruct")
    assert propose_model("grpo client live") is None
    assert propose_model("demo: synthetic long-tailed GRPO run", {"steps": 60}) is None
    assert propose_model("16k context run") is None
    assert propose_model("mystery 123b") is None  # no preset of that size


def test_model_proposal_says_where_the_model_came_from():
    from core.simulator.model_guess import model_proposal

    by_name = model_proposal("verl dapo 32b")
    assert by_name == {
        "model": "Qwen2.5-32B",
        "source": "name",
        "text": "verl dapo 32b",
        "note": "proposed from the trace name ('verl dapo 32b')",
    }
    by_meta = model_proposal("run 1", {"model": "Qwen/Qwen2.5-72B-Instruct"})
    assert by_meta is not None and by_meta["source"] == "metadata" and by_meta["model"] == "Qwen2.5-72B"
    assert model_proposal("grpo client live") is None
