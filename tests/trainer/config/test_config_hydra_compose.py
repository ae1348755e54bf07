"""Upstream-style command lines compose with Hydra and validate unchanged."""

from __future__ import annotations

import pytest
from omegaconf import ListConfig

from verl.trainer.config import ConfigError, load_config, validate_config

# examples/grpo_trainer/run_qwen2-7b.sh from upstream, with sizes for 2 CPU workers.
UPSTREAM_GRPO = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=16",
    "data.max_prompt_length=256",
    "data.max_response_length=128",
    "data.filter_overlong_prompts=True",
    "data.truncation=error",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "algorithm.use_kl_in_reward=False",
    "trainer.critic_warmup=0",
    'trainer.logger=["console","tensorboard"]',
    "trainer.project_name=verl_grpo_example_gsm8k",
    "trainer.experiment_name=qwen2_7b_function_rm",
    "trainer.n_gpus_per_node=2",
    "trainer.nnodes=1",
    "trainer.save_freq=20",
    "trainer.test_freq=5",
    "trainer.total_epochs=15",
]


def test_upstream_grpo_command_line_validates():
    typed = validate_config(load_config(UPSTREAM_GRPO), check_files=False)
    assert typed.algorithm.adv_estimator == "grpo" and typed.actor_rollout_ref.rollout.n == 5
    assert typed.actor_rollout_ref.rollout.prompt_length == 256  # follows data.max_prompt_length
    assert typed.trainer.logger == ["console", "tensorboard"]
    assert typed.trainer.default_local_dir == "checkpoints/verl_grpo_example_gsm8k/qwen2_7b_function_rm"
    assert typed.trainer.report_dir == typed.trainer.default_local_dir + "/report"
    assert typed.use_reference_policy and not typed.use_critic


def test_grpo_overrides_compose_and_follow_interpolations():
    cfg = load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "trainer.logger=[console]"])
    typed = validate_config(cfg, check_files=False)
    assert typed.critic.rollout_n == 4  # ${actor_rollout_ref.rollout.n}
    assert typed.trainer.logger == ["console"]


@pytest.mark.parametrize("logger, expected", [("console", ["console"]), ("[console,wandb]", ["console", "wandb"])])
def test_logger_as_bare_string_or_list(logger, expected):
    cfg = load_config([f"trainer.logger={logger}"])
    typed = validate_config(cfg, check_files=False)
    assert typed.trainer.logger == expected
    # The DictConfig the trainer reads is normalised too.
    assert isinstance(cfg.trainer.logger, ListConfig) and list(cfg.trainer.logger) == expected


def test_single_train_file_string_becomes_a_list():
    cfg = load_config(["data.train_files=/data/a.parquet", "data.val_files=[/data/b.parquet,/data/c.parquet]"])
    typed = validate_config(cfg, check_files=False)
    assert typed.data.train_files == ["/data/a.parquet"]
    assert typed.data.val_files == ["/data/b.parquet", "/data/c.parquet"]


def test_free_form_keys_are_added_with_plus():
    cfg = load_config(
        ["+actor_rollout_ref.model.override_config.attention_dropout=0.1", "+ray_kwargs.ray_init.num_gpus=0"]
    )
    typed = validate_config(cfg, check_files=False)
    assert typed.actor_rollout_ref.model.override_config == {"attention_dropout": 0.1}
    assert typed.ray_kwargs.ray_init["num_gpus"] == 0


def test_unknown_override_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError) as info:
        load_config(["actor_rollout_ref.actor.ppo_mini_batch_siz=2"])
    assert str(info.value) == (
        "Unknown config key 'actor_rollout_ref.actor.ppo_mini_batch_siz'. "
        "Did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'?"
    )
