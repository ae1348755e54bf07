"""Reward managers: decoding, score placement, extra info, error messages, registry."""


import pytest
import torch

from tests.workers.reward_manager.conftest import RESPONSE_LEN, make_batch
from verl.workers.reward_manager import (
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    PrimeRewardManager,
    get_reward_manager_cls,
    register,
)
from verl.workers.reward_manager.dapo import overlong_penalty
from verl.workers.reward_manager.scoring import RewardScoreError

SAMPLES = [
    ("Tom has 12", "12 + 2 = 14. #### 14", "14"),  # right
    ("Anna has 9", "#### 10", "11"),  # wrong
    ("Ben has 3", "3 apples", "3"),  # no marker
]


def expected_tensor(lengths, scores):
    tensor = torch.zeros(len(scores), RESPONSE_LEN)
    for row, (length, score) in enumerate(zip(lengths, scores)):
        tensor[row, length - 1] = score
    return tensor


def test_naive_scores_on_last_valid_token(tokenizer):
    data, lengths = make_batch(tokenizer, SAMPLES)
    reward = NaiveRewardManager(tokenizer, num_examine=0)(data)
    assert reward.dtype == torch.float32 and reward.shape == (3, RESPONSE_LEN)
    assert torch.equal(reward, expected_tensor(lengths, [1.0, 0.0, 0.0]))


def test_naive_passes_decoded_text_and_row_fields(tokenizer):
    calls = []

    def spy(data_source, solution_str, ground_truth, extra_info):
        calls.append((data_source, solution_str, ground_truth, extra_info))
        return 0.5

    data, lengths = make_batch(tokenizer, SAMPLES, data_source="custom")
    # timeout=None: scored in this process, so the spy's list sees the calls (the default pool would not)
    out = NaiveRewardManager(tokenizer, 0, compute_score=spy, timeout=None)(data, return_dict=True)
    assert calls[0] == ("custom", "12 + 2 = 14. #### 14", "14", {"index": 0})  # eos and padding skipped
    assert [c[1] for c in calls] == [s[1] for s in SAMPLES]
    assert out["reward_extra_info"] == {}
    assert torch.equal(out["reward_tensor"], expected_tensor(lengths, [0.5, 0.5, 0.5]))
    assert data.non_tensor_batch["extra_info"][0] == {"index": 0}  # the batch is not modified


def test_dict_scores_fill_extra_info(tokenizer):
    def scorer(data_source, solution_str, ground_truth, extra_info):
        right = solution_str.endswith(ground_truth)
        return {"score": 2.0 if right else -1.0, "acc": right}

    data, lengths = make_batch(tokenizer, SAMPLES)
    out = NaiveRewardManager(tokenizer, 0, compute_score=scorer)(data, return_dict=True)
    assert out["reward_extra_info"] == {"score": [2.0, -1.0, -1.0], "acc": [True, False, False],
                                        "reward_timeout": [False, False, False]}  # the pool says none ran out
    assert torch.equal(out["reward_tensor"], expected_tensor(lengths, [2.0, -1.0, -1.0]))


def test_response_mask_when_attention_mask_is_absent(tokenizer):
    data, lengths = make_batch(tokenizer, SAMPLES)
    mask = data.batch["attention_mask"][:, -RESPONSE_LEN:]
    data.batch["response_mask"] = mask
    del data.batch["attention_mask"]
    reward = NaiveRewardManager(tokenizer, 0)(data)
    assert torch.equal(reward, expected_tensor(lengths, [1.0, 0.0, 0.0]))


def test_num_examine_prints_per_data_source(tokenizer, capsys):
    data, _ = make_batch(tokenizer, SAMPLES, data_source=["arithmetic", "arithmetic", "openai/gsm8k"])
    NaiveRewardManager(tokenizer, num_examine=1)(data)
    out = capsys.readouterr().out
    assert out.count("[response]") == 2  # one per data source
    assert "[prompt] Tom has 12" in out and "[ground_truth] 14" in out and "[score] 1.0" in out


def test_non_number_score_names_sample_source_and_function(tokenizer):
    def bad_score(data_source, solution_str, ground_truth, extra_info):
        return "yes"

    data, _ = make_batch(tokenizer, SAMPLES)
    with pytest.raises(RewardScoreError) as info:
        NaiveRewardManager(tokenizer, 0, compute_score=bad_score)(data)
    message = str(info.value)
    assert "sample 0" in message and "'arithmetic'" in message and "bad_score" in message and "'yes'" in message


def test_raising_score_is_chained(tokenizer):
    def broken(data_source, solution_str, ground_truth, extra_info):
        if extra_info["index"] == 1:
            raise ZeroDivisionError("oops")
        return 1.0

    data, _ = make_batch(tokenizer, SAMPLES)
    with pytest.raises(RewardScoreError, match="sample 1 .*broken.*ZeroDivisionError: oops") as info:
        NaiveRewardManager(tokenizer, 0, compute_score=broken)(data)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.parametrize(
    "result, match",
    [({"acc": True}, "without 'score'"), (float("nan"), "non-finite"), (None, "NoneType")],
)
def test_malformed_results(tokenizer, result, match):
    data, _ = make_batch(tokenizer, SAMPLES)
    with pytest.raises(RewardScoreError, match=match):
        NaiveRewardManager(tokenizer, 0, compute_score=lambda **kw: result)(data)


def test_inconsistent_dict_keys_are_reported(tokenizer):
    def flaky(data_source, solution_str, ground_truth, extra_info):
        return {"score": 1.0, "acc": True} if extra_info["index"] == 0 else 0.0

    data, _ = make_batch(tokenizer, SAMPLES)
    with pytest.raises(RewardScoreError, match="'score' was returned for 1 of 3"):
        NaiveRewardManager(tokenizer, 0, compute_score=flaky)(data, return_dict=True)


def test_missing_reward_fn_key_names_the_config_key(tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    with pytest.raises(KeyError, match="data.reward_fn_key"):
        NaiveRewardManager(tokenizer, 0, reward_fn_key="task")(data)


def test_rm_scores_pass_through(tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    data.batch["rm_scores"] = torch.ones(3, RESPONSE_LEN)
    assert torch.equal(NaiveRewardManager(tokenizer, 0)(data), torch.ones(3, RESPONSE_LEN))


def test_batch_manager_calls_once(tokenizer):
    calls = []

    def batched(data_sources, solution_strs, ground_truths, extra_infos):
        calls.append(len(solution_strs))
        return [float(s.endswith(t)) for s, t in zip(solution_strs, ground_truths)]

    data, lengths = make_batch(tokenizer, SAMPLES)
    out = BatchRewardManager(tokenizer, 0, compute_score=batched, timeout=None)(data, return_dict=True)
    assert calls == [3]
    assert torch.equal(out["reward_tensor"], expected_tensor(lengths, [1.0, 0.0, 0.0]))


def test_batch_manager_checks_the_result_length(tokenizer):
    data, _ = make_batch(tokenizer, SAMPLES)
    manager = BatchRewardManager(tokenizer, 0, compute_score=lambda **kw: [1.0])
    with pytest.raises(RewardScoreError, match="returned 1 scores for 3 samples"):
        manager(data)
    with pytest.raises(ValueError, match="custom_reward_function.path"):
        BatchRewardManager(tokenizer, 0)


def test_overlong_penalty_formula():
    # max 20, buffer 8: no penalty up to 12 tokens, then -(len - 12) / 8 * factor.
    assert overlong_penalty(10, 20, 8, 1.0) == 0.0
    assert overlong_penalty(12, 20, 8, 1.0) == 0.0
    assert overlong_penalty(16, 20, 8, 1.0) == -0.5
    assert overlong_penalty(20, 20, 8, 0.5) == -0.5


def test_dapo_adds_overlong_penalty(tokenizer):
    data, lengths = make_batch(tokenizer, SAMPLES)
    buffer_len = 4
    max_resp_len = lengths[0] + 2  # sample 0 runs 2 tokens into the 4-token buffer -> -0.5
    cfg = {"enable": True, "len": buffer_len, "penalty_factor": 1.0, "log": True}
    manager = DAPORewardManager(tokenizer, 0, max_resp_len=max_resp_len, overlong_buffer_cfg=cfg)
    out = manager(data, return_dict=True)
    penalties = [min(0.0, -(n - (max_resp_len - buffer_len)) / buffer_len) for n in lengths]
    assert penalties[0] == -0.5
    assert out["reward_extra_info"]["overlong_reward"] == penalties
    assert out["reward_extra_info"]["overlong"] == [p < 0 for p in penalties]
    assert out["reward_extra_info"]["acc"] == [1.0, 0.0, 0.0]
    assert torch.allclose(out["reward_tensor"], expected_tensor(lengths, [1.0 + penalties[0], penalties[1], penalties[2]]))


def test_dapo_needs_max_resp_len_when_enabled(tokenizer):
    with pytest.raises(ValueError, match="max_resp_len"):
        DAPORewardManager(tokenizer, 0, overlong_buffer_cfg={"enable": True, "len": 4, "penalty_factor": 1.0})
    disabled = DAPORewardManager(tokenizer, 0, overlong_buffer_cfg={"enable": False})
    data, lengths = make_batch(tokenizer, SAMPLES)
    assert torch.equal(disabled(data), expected_tensor(lengths, [1.0, 0.0, 0.0]))


def test_registry():
    assert get_reward_manager_cls("naive") is NaiveRewardManager
    assert get_reward_manager_cls("batch") is BatchRewardManager
    assert get_reward_manager_cls("dapo") is DAPORewardManager
    assert get_reward_manager_cls("prime") is PrimeRewardManager
    with pytest.raises(ValueError, match="^Unknown reward manager: nope .*'nope'.*batch, dapo, naive, prime"):
        get_reward_manager_cls("nope")

    @register("test_only_manager")
    class Mine(NaiveRewardManager):
        pass

    assert get_reward_manager_cls("test_only_manager") is Mine
    assert register("test_only_manager")(Mine) is Mine  # re-registering the same class is fine
    with pytest.raises(ValueError, match="already registered"):
        register("test_only_manager")(NaiveRewardManager)
