"""RewardResult / MetricConfig, and a compute_score that returns a RewardResult, through the reward managers."""

import pytest
import torch

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.workers.reward_manager.conftest import RESPONSE_LEN, make_batch
from verl.rewards.result import MetricConfig, RewardResult
from verl.utils.reward_score import result as upstream_path
from verl.workers.reward_manager import DAPORewardManager, NaiveRewardManager, PrimeRewardManager
from verl.workers.reward_manager.prime import parallel_compute_score_async
from verl.workers.reward_manager.scoring import RewardScoreError, unpack_score

SAMPLES = [
    ("Tom has 12", "12 + 2 = 14. #### 14", "14"),
    ("Anna has 9", "#### 10", "11"),
]


def graded(data_source, solution_str, ground_truth, extra_info=None):
    """Module level, so the scoring processes can unpickle it."""
    right = solution_str.endswith(ground_truth)
    return RewardResult(score=1.0 if right else -0.5, metrics={"accuracy": float(right)}).add_metric(
        "length", len(solution_str)
    )


def graded_with_metadata(data_source, solution_str, ground_truth, extra_info=None):
    return RewardResult(score=0.25, metrics={"acc": 1.0}, metadata={"row": extra_info["index"]})


def sometimes_missing(data_source, solution_str, ground_truth, extra_info=None):
    return RewardResult(score=0.0).add_metric("tool_accuracy", 1.0, condition=extra_info["index"] == 0)


def test_one_class_whichever_path_imports_it():
    assert upstream_path.RewardResult is RewardResult and upstream_path.MetricConfig is MetricConfig


def test_dict_view_matches_to_dict():
    result = RewardResult(score=2, metrics={"acc": 0.5}, metadata={"why": "x"})
    assert result.to_dict() == {"score": 2, "acc": 0.5, "metadata": {"why": "x"}}
    assert list(result.keys()) == ["score", "acc", "metadata"]
    assert dict(result.items()) == result.to_dict()
    assert result["metadata"] == {"why": "x"} and "metadata" in result
    empty = RewardResult(score=0.0)
    assert "metadata" not in empty and list(empty.keys()) == ["score"]
    with pytest.raises(KeyError, match="metadata"):
        empty["metadata"]


def test_from_dict_round_trip_keeps_the_input():
    data = {"score": 1.0, "acc": 1.0, "metadata": {"k": 1}}
    result = RewardResult.from_dict(data)
    assert result == RewardResult(score=1.0, metrics={"acc": 1.0}, metadata={"k": 1})
    assert data == {"score": 1.0, "acc": 1.0, "metadata": {"k": 1}}
    assert RewardResult.from_dict(result.to_dict()) == result
    with pytest.raises(ValueError, match="'score'"):
        RewardResult.from_dict({"acc": 1.0})


def test_metric_config_word_rules():
    config = MetricConfig()
    assert [config.is_core_metric(n) for n in ("acc", "f1", "f1_macro", "Accuracy_reply")] == [True] * 4
    # "_" joins a word, as in upstream: the measure must lead the name (or be listed)
    assert not any(config.is_core_metric(n) for n in ("tool_accuracy", "val_acc", "accumulated", "f1score"))
    assert MetricConfig(core_metrics=["tool_accuracy"]).is_core_metric("tool_accuracy")
    assert not MetricConfig(auto_detect_accuracy=False).is_core_metric("accuracy")


def test_unpack_score_reads_a_reward_result():
    reward, fields = unpack_score(RewardResult(score=1, metrics={"acc": 1.0}), 0, "src", graded)
    assert reward == 1.0 and fields == {"score": 1, "acc": 1.0}
    with pytest.raises(RewardScoreError, match="score"):
        unpack_score(RewardResult(score="high"), 0, "src", graded)


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["in-process", "scoring-processes"])
def test_naive_manager_puts_metrics_in_reward_extra_info(timeout):
    tokenizer = build_tiny_tokenizer()
    data, lengths = make_batch(tokenizer, SAMPLES, data_source="custom")
    out = NaiveRewardManager(tokenizer, 0, compute_score=graded, timeout=timeout, num_processes=1)(data, return_dict=True)
    extra = out["reward_extra_info"]
    assert extra["score"] == [1.0, -0.5]
    assert extra["accuracy"] == [1.0, 0.0]
    assert extra["length"] == [len(SAMPLES[0][1]), len(SAMPLES[1][1])]
    expected = torch.zeros(2, RESPONSE_LEN)
    expected[0, lengths[0] - 1], expected[1, lengths[1] - 1] = 1.0, -0.5
    assert torch.equal(out["reward_tensor"], expected)


def test_metadata_rides_along_and_dapo_keeps_acc_from_the_metric():
    tokenizer = build_tiny_tokenizer()
    data, _ = make_batch(tokenizer, SAMPLES, data_source="custom")
    out = DAPORewardManager(tokenizer, 0, compute_score=graded_with_metadata, timeout=None)(data, return_dict=True)
    assert out["reward_extra_info"]["metadata"] == [{"row": 0}, {"row": 1}]
    # a RewardResult is a dict result, so DAPO does not overwrite the scorer's own "acc" with the reward
    assert out["reward_extra_info"]["acc"] == [1.0, 1.0]


def test_prime_manager_and_async_helper_take_reward_results():
    tokenizer = build_tiny_tokenizer()
    data, _ = make_batch(tokenizer, SAMPLES, data_source="custom")
    out = PrimeRewardManager(tokenizer, 0, compute_score=graded, num_processes=1, timeout=60.0)(data, return_dict=True)
    assert out["reward_extra_info"]["accuracy"] == [1.0, 0.0]
    import asyncio

    scores = asyncio.run(parallel_compute_score_async(
        graded, [s[1] for s in SAMPLES], [s[2] for s in SAMPLES], ["custom"] * 2, num_processes=1, timeout=60.0,
    ))  # fmt: skip
    assert scores == [1.0, -0.5]


def test_a_metric_missing_for_some_samples_is_named():
    tokenizer = build_tiny_tokenizer()
    data, _ = make_batch(tokenizer, SAMPLES, data_source="custom")
    with pytest.raises(RewardScoreError, match="tool_accuracy"):
        NaiveRewardManager(tokenizer, 0, compute_score=sometimes_missing, timeout=None)(data, return_dict=True)


def test_a_registered_data_source_may_return_a_reward_result():
    from verl.rewards import _SCORERS_BY_NAME, default_compute_score, register_data_source

    @register_data_source("test_reward_result_source")
    def scorer(solution_str, ground_truth, extra_info):
        return RewardResult(score=float(solution_str == ground_truth), metrics={"acc": 1.0})

    try:
        result = default_compute_score("test_reward_result_source", "a", "a")
        assert isinstance(result, RewardResult) and result["score"] == 1.0
        assert unpack_score(result, 0, "test_reward_result_source", scorer) == (1.0, {"score": 1.0, "acc": 1.0})
    finally:
        del _SCORERS_BY_NAME["test_reward_result_source"]
