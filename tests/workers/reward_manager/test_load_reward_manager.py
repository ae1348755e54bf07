"""verl.trainer.ppo.reward: custom reward files, manager selection, compute_reward."""

import dataclasses
import textwrap

import pytest
import torch

from tests.workers.reward_manager.conftest import RESPONSE_LEN, make_batch
from verl.rewards import default_compute_score
from verl.trainer.config import (
    CustomRewardFunctionConfig,
    DataConfig,
    OverlongBufferConfig,
    PPOTrainerConfig,
    RewardModelConfig,
)
from verl.trainer.ppo.reward import compute_reward, get_custom_reward_fn, load_reward_manager
from verl.utils.config_errors import RewardFunctionError
from verl.workers.reward_manager import BatchRewardManager, DAPORewardManager, NaiveRewardManager

SAMPLES = [("Tom has 12", "#### 14", "14"), ("Anna has 9", "#### 10", "11")]


def make_config(path=None, name="compute_score", manager="naive", reward_kwargs=None, overlong_buffer=None):
    """The typed trainer config load_reward_manager receives from the launcher."""
    return PPOTrainerConfig(
        custom_reward_function=CustomRewardFunctionConfig(path=path, name=name, reward_kwargs=reward_kwargs or {}),
        reward_model=RewardModelConfig(reward_manager=manager,
                                       overlong_buffer=OverlongBufferConfig(**(overlong_buffer or {}))),
        data=DataConfig(reward_fn_key="data_source", max_response_length=32))


def write(tmp_path, source, filename="my_reward.py"):
    path = tmp_path / filename
    path.write_text(textwrap.dedent(source))
    return str(path)


def test_no_path_means_default(tmp_path):
    assert get_custom_reward_fn(make_config()) is None
    manager = load_reward_manager(make_config(), tokenizer=None, num_examine=0)
    assert isinstance(manager, NaiveRewardManager)
    assert manager.compute_score is default_compute_score


def test_custom_function_is_loaded_with_kwargs(tmp_path, tokenizer):
    path = write(tmp_path, """
        def length_reward(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
            return scale * len(solution_str)
    """)
    config = make_config(path, "length_reward", reward_kwargs={"scale": 0.5})
    fn = get_custom_reward_fn(config)
    assert fn(data_source="x", solution_str="abcd", ground_truth="", extra_info={}) == 2.0
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    data, lengths = make_batch(tokenizer, SAMPLES, data_source="unknown/source")
    reward, extra = compute_reward(data, manager)
    expected = torch.zeros(2, RESPONSE_LEN)
    expected[0, lengths[0] - 1] = 0.5 * len("#### 14")
    expected[1, lengths[1] - 1] = 0.5 * len("#### 10")
    assert torch.equal(reward, expected) and extra == {"reward_timeout": [False, False]}  # scored in the pool


def test_default_function_name_is_compute_score(tmp_path):
    path = write(tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 1\n")
    assert get_custom_reward_fn(make_config(path))(data_source="", solution_str="", ground_truth="", extra_info={}) == 1


def test_missing_file(tmp_path):
    with pytest.raises(RewardFunctionError, match="custom_reward_function.path=.*missing.py"):
        get_custom_reward_fn(make_config(str(tmp_path / "missing.py")))


def test_missing_function_lists_what_is_there(tmp_path):
    path = write(tmp_path, "def score_a(**kw):\n    return 0\n", filename="other.py")
    with pytest.raises(RewardFunctionError, match="'compute_score' is not defined in .*other.py.*score_a"):
        get_custom_reward_fn(make_config(path))


def test_wrong_signature(tmp_path):
    path = write(tmp_path, "def compute_score(text, answer):\n    return 0\n", filename="sig.py")
    with pytest.raises(TypeError, match="data_source, solution_str, ground_truth, extra_info"):
        get_custom_reward_fn(make_config(path))


def test_batch_manager_expects_plural_arguments(tmp_path):
    path = write(tmp_path, """
        def compute_score(data_sources, solution_strs, ground_truths, extra_infos):
            return [1.0 for _ in solution_strs]
    """, filename="batched.py")
    manager = load_reward_manager(make_config(path, manager="batch"), tokenizer=None, num_examine=0)
    assert isinstance(manager, BatchRewardManager)
    with pytest.raises(TypeError, match="data_source, solution_str"):
        get_custom_reward_fn(make_config(path, manager="naive"))


def test_dapo_reads_overlong_buffer_from_config():
    config = make_config(manager="dapo", overlong_buffer={"enable": True, "len": 8, "penalty_factor": 1.0})
    manager = load_reward_manager(config, tokenizer=None, num_examine=0)
    assert isinstance(manager, DAPORewardManager)
    assert manager.max_resp_len == 32 and manager.overlong_buffer_cfg["len"] == 8
    explicit = load_reward_manager(config, tokenizer=None, num_examine=0, max_resp_len=64)
    assert explicit.max_resp_len == 64


def test_unknown_manager():
    with pytest.raises(ValueError, match="reward_model.reward_manager='mystery'"):
        load_reward_manager(make_config(manager="mystery"), tokenizer=None, num_examine=0)


def test_compute_reward_returns_extra_info(tokenizer):
    data, lengths = make_batch(tokenizer, SAMPLES, data_source="aime2024", extra=None)
    reward, extra = compute_reward(data, load_reward_manager(make_config(), tokenizer, num_examine=0))
    # math_dapo: +1 / -1 with acc and pred; "#### 14" has no Answer: line or box -> -1.
    assert extra["acc"] == [False, False] and extra["score"] == [-1.0, -1.0]
    assert reward[0, lengths[0] - 1] == -1.0


def test_scoring_section_reaches_every_builtin_manager(tmp_path):
    """reward_model.scoring.* reach naive/dapo/prime/batch; reward_model.reward_kwargs.<key> (upstream's prime
    spelling, passed by the launcher) wins."""
    from verl.trainer.config.reward import RewardScoringConfig

    batched = write(tmp_path, """
        def batched(data_sources, solution_strs, ground_truths, extra_infos):
            return [0.0] * len(solution_strs)
    """)
    for manager in ("naive", "dapo", "prime", "batch"):
        config = make_config(path=batched if manager == "batch" else None,
                             name="batched" if manager == "batch" else "compute_score", manager=manager)
        scoring = RewardScoringConfig(timeout=7.5, on_timeout="error", num_processes=3)
        config.reward_model = dataclasses.replace(config.reward_model, scoring=scoring)
        scorer = load_reward_manager(config, tokenizer=None, num_examine=0).scorer
        assert (scorer.timeout, scorer.on_timeout) == (7.5, "error")
        assert scorer.num_processes == (1 if manager == "batch" else 3)  # one batched call at a time
        kwargs_win = load_reward_manager(config, tokenizer=None, num_examine=0, timeout=2.0).scorer
        assert kwargs_win.timeout == 2.0
    config = make_config()
    config.reward_model = dataclasses.replace(config.reward_model, scoring=RewardScoringConfig(timeout=None))
    assert not load_reward_manager(config, tokenizer=None, num_examine=0).scorer.limited  # the explicit opt-out
    assert load_reward_manager(make_config(), tokenizer=None, num_examine=0).scorer.timeout == 300.0  # default
