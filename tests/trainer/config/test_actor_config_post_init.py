"""ActorConfig's own checks at construction (upstream's __post_init__, ValueError), the same rule reported by key in
the trainer's check, and upstream's Megatron actor group (megatron_actor.yaml): it composes and loads, and the
trainer refuses it before Ray starts with the Megatron reason."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from tests.trainer.config.overrides_helpers import problems_of
from verl.trainer.config import load_config
from verl.trainer.config.yaml_files import CONFIG_DIR
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.config_errors import ConfigError
from verl.workers.config import ActorConfig, FSDPActorConfig, McoreActorConfig


@pytest.mark.parametrize("cls", [ActorConfig, FSDPActorConfig, McoreActorConfig])
def test_a_bad_loss_agg_mode_raises_value_error(cls):
    strategy = "megatron" if cls is McoreActorConfig else "fsdp"
    with pytest.raises(ValueError, match="Invalid loss_agg_mode: 'seq-sum'; choose one of: token-mean"):
        cls(strategy=strategy, loss_agg_mode="seq-sum")


def test_both_micro_batch_sizes_raise_unless_dynamic():
    with pytest.raises(ValueError, match="You have set both ppo_micro_batch_size=4 .* AND ppo_micro_batch_size_per_gpu=2"):
        ActorConfig(ppo_micro_batch_size=4, ppo_micro_batch_size_per_gpu=2)
    with pytest.raises(ValueError, match="You have set both"):
        ActorConfig(ppo_micro_batch_size=4)  # the per-GPU default (2) counts as set, the message says so
    # token budgets cut the micro-batches, so neither size is read: no conflict
    assert ActorConfig(ppo_micro_batch_size=4, use_dynamic_bsz=True).ppo_micro_batch_size == 4
    # one of them, or neither (upstream accepts it here; the trainer's batch check asks for one), is fine
    assert ActorConfig(ppo_micro_batch_size=8, ppo_micro_batch_size_per_gpu=None).ppo_micro_batch_size == 8
    assert ActorConfig(ppo_micro_batch_size=None, ppo_micro_batch_size_per_gpu=None).ppo_micro_batch_size is None


def test_post_init_problem_is_reported_by_key_through_the_builder():
    with pytest.raises(ConfigError) as info:
        omega_conf_to_dataclass({"_target_": "verl.workers.config.ActorConfig", "ppo_micro_batch_size": 8,
                                 "ppo_micro_batch_size_per_gpu": 2}, key="actor_rollout_ref.actor")
    assert isinstance(info.value, ValueError)  # upstream's exception type, as ConfigError is one
    (problem,) = info.value.problems
    assert problem.startswith("actor_rollout_ref.actor: You have set both ppo_micro_batch_size=8")
    # a bad value of a key is reported by the key's own check, once (the dataclass default stands in for it)
    with pytest.raises(ConfigError) as info:
        omega_conf_to_dataclass({"loss_agg_mode": "seq-sum"}, ActorConfig, key="actor_rollout_ref.actor")
    assert info.value.problems == ["actor_rollout_ref.actor.loss_agg_mode='seq-sum' is not allowed; choose one of: "
                                   "token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, "
                                   "seq-mean-token-sum-norm."]


def test_megatron_actor_yaml_composes_and_loads_with_upstreams_fields():
    with initialize_config_dir(config_dir=str(CONFIG_DIR / "actor"), version_base=None):
        cfg = compose(config_name="megatron_actor")
    actor = omega_conf_to_dataclass(cfg)
    assert type(actor) is McoreActorConfig
    assert actor.strategy == "megatron" and actor.load_weight is True and actor.data_loader_seed is None
    assert actor.megatron == {} and actor.use_rollout_log_probs is False
    # actor.yaml's keys come along, with their defaults
    assert actor.clip_ratio == 0.2 and actor.ppo_micro_batch_size_per_gpu == 2 and actor.rollout_n == 1


def test_trainer_refuses_the_megatron_actor_group_before_ray():
    cfg = load_config(["actor@actor_rollout_ref.actor=megatron_actor"])
    first = problems_of(cfg)[0]
    assert first.startswith("actor_rollout_ref.actor._target_='verl.workers.config.McoreActorConfig' is refused: "
                            "the Megatron-LM backend")
    assert "Use strategy=fsdp2" in first
