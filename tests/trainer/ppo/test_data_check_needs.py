"""What the data check asks of each row, judged from the trainer config (verl/trainer/ppo/data_check.py)."""

import pytest

from tests.helpers.typed_config import with_values
from verl.trainer.config import PPOTrainerConfig
from verl.trainer.ppo.data_check import has_builtin_scorer, row_needs


@pytest.fixture
def config():
    return PPOTrainerConfig()


def test_builtin_rule_reward_needs_ground_truth_and_scorers(config):
    needs = row_needs(config)
    assert needs.ground_truth and needs.has_scorer is has_builtin_scorer
    assert needs.reward_columns == ("data_source", "reward_model") and needs.prompt_key == "prompt"


def test_custom_reward_function_reads_the_columns_but_decides_itself(config):
    needs = row_needs(with_values(config, **{"custom_reward_function.path": "my_reward.py"}))
    assert not needs.ground_truth and needs.has_scorer is None
    assert needs.reward_columns == ("data_source", "reward_model")


@pytest.mark.parametrize("overrides", [
    {"reward_model.enable": True},
    {"actor_rollout_ref.rollout.mode": "async", "actor_rollout_ref.rollout.agent.agent_loop_config_path": "l.yaml"},
    {"actor_rollout_ref.rollout.mode": "async",
     "actor_rollout_ref.rollout.multi_turn.interaction_config_path": "i.yaml"},
])
def test_reward_model_or_agent_loop_scores_without_the_reward_columns(config, overrides):
    needs = row_needs(with_values(config, **overrides))
    assert needs.reward_columns == () and not needs.ground_truth and needs.has_scorer is None


def test_agent_loop_config_under_sync_rollout_changes_nothing(config):
    sync = with_values(config, **{"actor_rollout_ref.rollout.mode": "sync",
                                  "actor_rollout_ref.rollout.agent.agent_loop_config_path": "l.yaml"})
    assert row_needs(sync).ground_truth


def test_builtin_scorer_names_and_prefixes():
    assert has_builtin_scorer("openai/gsm8k") and has_builtin_scorer("arithmetic")
    assert has_builtin_scorer("aime2024")  # registered as a prefix
    assert has_builtin_scorer("codecontests")  # scored in the sandbox
    assert not has_builtin_scorer("my_task") and not has_builtin_scorer("None")
