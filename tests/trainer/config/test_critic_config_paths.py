"""The critic's config classes at upstream's paths (verl.workers.config and the older verl.trainer.config.config),
its groups composed on their own (dp_critic.yaml, megatron_critic.yaml), MegatronCriticConfig loading but refused
for training before Ray starts, and CriticConfig's own check at construction."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

import verl.trainer.config.config as older_module
from tests.trainer.config.overrides_helpers import problems_of
from verl.trainer.config import load_config
from verl.trainer.config.yaml_files import CONFIG_DIR
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import CriticConfig, FSDPCriticConfig, MegatronCriticConfig


def _group(name: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR / "critic"), version_base=None):
        return compose(config_name=name)


def test_the_older_module_holds_the_same_classes():
    assert older_module.CriticConfig is CriticConfig
    assert older_module.FSDPCriticConfig is FSDPCriticConfig
    assert older_module.MegatronCriticConfig is MegatronCriticConfig
    assert issubclass(MegatronCriticConfig, CriticConfig) and not issubclass(MegatronCriticConfig, FSDPCriticConfig)


def test_dp_critic_composes_alone_with_the_actors_defaults():
    critic = omega_conf_to_dataclass(_group("dp_critic"))
    assert type(critic) is FSDPCriticConfig
    # the keys that follow the actor fall back to the actor's defaults when no actor is composed
    assert (critic.rollout_n, critic.ppo_mini_batch_size, critic.ppo_epochs) == (1, 4, 1)
    assert critic.use_dynamic_bsz is False and critic.shuffle is False and critic.loss_agg_mode == "token-mean"
    assert critic.forward_max_token_len_per_gpu == critic.ppo_max_token_len_per_gpu == 32768
    assert critic.forward_micro_batch_size_per_gpu == critic.ppo_micro_batch_size_per_gpu == 2
    assert critic.model.path is None and critic.optim.lr == 1e-5


def test_in_the_trainer_the_critic_still_follows_the_actor():
    cfg = load_config(["actor_rollout_ref.actor.ppo_epochs=3", "actor_rollout_ref.rollout.n=5",
                       "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum", "critic.ppo_max_token_len_per_gpu=999"])
    assert (cfg.critic.ppo_epochs, cfg.critic.rollout_n, cfg.critic.loss_agg_mode) == (3, 5, "seq-mean-token-sum")
    assert cfg.critic.forward_max_token_len_per_gpu == 999
    assert cfg.critic.model.path == cfg.actor_rollout_ref.model.path


def test_megatron_critic_composes_and_loads_with_upstreams_fields():
    critic = omega_conf_to_dataclass(_group("megatron_critic"))
    assert type(critic) is MegatronCriticConfig
    assert critic.strategy == "megatron" and critic.nccl_timeout == 600 and critic.load_weight is True
    assert critic.megatron == {} and critic.kl_ctrl == {} and critic.data_loader_seed is None
    assert MegatronCriticConfig().strategy == "megatron"


def test_trainer_refuses_the_megatron_critic_before_ray():
    first = problems_of(load_config(["critic=megatron_critic"]))[0]
    assert first.startswith("critic._target_='verl.workers.config.MegatronCriticConfig' is refused: the Megatron-LM "
                            "backend")


def test_both_update_sizes_raise_value_error():
    with pytest.raises(ValueError, match="You have set both ppo_micro_batch_size=8"):
        FSDPCriticConfig(ppo_micro_batch_size=8, ppo_micro_batch_size_per_gpu=2)
    assert CriticConfig(ppo_micro_batch_size=8, ppo_micro_batch_size_per_gpu=None).ppo_micro_batch_size == 8
    assert CriticConfig(ppo_micro_batch_size=8, use_dynamic_bsz=True).use_dynamic_bsz is True


def test_forward_global_size_is_accepted_with_its_per_gpu_key():
    """Upstream loads both forward sizes; the trainer then uses the per-GPU one (verl.trainer.config.deprecated)."""
    critic = omega_conf_to_dataclass({"_target_": "verl.workers.config.FSDPCriticConfig",
                                      "forward_micro_batch_size": 4, "forward_micro_batch_size_per_gpu": 1})
    assert (critic.forward_micro_batch_size, critic.forward_micro_batch_size_per_gpu) == (4, 1)
