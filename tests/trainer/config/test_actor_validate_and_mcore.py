"""ActorConfig.validate (upstream's run-time batch-size check) and McoreActorConfig (loads, but never trains)."""

import pytest
from omegaconf import OmegaConf

from verl.trainer.config import load_config, validate_config
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.config_errors import ConfigError
from verl.workers.config import ActorConfig, FSDPActorConfig, McoreActorConfig


def _actor(**kw):
    base = dict(strategy="fsdp", ppo_mini_batch_size=16, ppo_micro_batch_size=None, ppo_micro_batch_size_per_gpu=2)
    return ActorConfig(**{**base, **kw})


def test_validate_accepts_consistent_sizes():
    _actor().validate(n_gpus=4, train_batch_size=32)
    _actor(ppo_micro_batch_size=4, ppo_micro_batch_size_per_gpu=None).validate(n_gpus=4, train_batch_size=16)


def test_validate_mini_batch_larger_than_train_batch():
    with pytest.raises(ValueError, match=r"train_batch_size \(8\) must be >= actor.ppo_mini_batch_size \(16\)"):
        _actor().validate(n_gpus=1, train_batch_size=8)


def test_validate_global_micro_batch_must_divide_and_cover_ranks():
    with pytest.raises(ValueError, match="must be divisible by ppo_micro_batch_size"):
        _actor(ppo_micro_batch_size=5, ppo_micro_batch_size_per_gpu=None).validate(n_gpus=1, train_batch_size=16)
    with pytest.raises(ValueError, match=r"must be >= n_gpus \(8\)"):
        _actor(ppo_micro_batch_size=4, ppo_micro_batch_size_per_gpu=None).validate(n_gpus=8, train_batch_size=16)


def test_validate_counts_ulysses_ranks_and_skips_dynamic_bsz():
    fsdp = FSDPActorConfig(ppo_mini_batch_size=16, ppo_micro_batch_size=4, ppo_micro_batch_size_per_gpu=None,
                           ulysses_sequence_parallel_size=2)
    fsdp.validate(n_gpus=8, train_batch_size=16, model_config={"use_remove_padding": True})
    _actor(use_dynamic_bsz=True).validate(n_gpus=64, train_batch_size=1)


def test_fsdp_validate_needs_remove_padding_for_ulysses():
    fsdp = FSDPActorConfig(ulysses_sequence_parallel_size=2, use_dynamic_bsz=True)
    with pytest.raises(ValueError, match="you must enable `use_remove_padding`"):
        fsdp.validate(n_gpus=2, train_batch_size=8, model_config={"use_remove_padding": False})
    fsdp.validate(n_gpus=2, train_batch_size=8)  # no model config given: nothing to check against


def test_mcore_actor_config_builds_with_upstream_defaults():
    cfg = omega_conf_to_dataclass({"_target_": "verl.workers.config.McoreActorConfig", "ppo_mini_batch_size": 8,
                                   "megatron": {"tensor_model_parallel_size": 2}})
    assert isinstance(cfg, McoreActorConfig) and isinstance(cfg, ActorConfig)
    assert cfg.strategy == "megatron" and cfg.load_weight is True and cfg.data_loader_seed is None
    assert cfg.megatron["tensor_model_parallel_size"] == 2 and cfg.profile == {}
    with pytest.raises(ConfigError, match="strategy='fsdp' is not allowed"):
        omega_conf_to_dataclass(OmegaConf.create({"strategy": "fsdp"}), McoreActorConfig)


def test_trainer_refuses_mcore_actor_before_training():
    cfg = load_config(["actor_rollout_ref.actor._target_=verl.workers.config.McoreActorConfig"])
    with pytest.raises(ConfigError, match="McoreActorConfig' is refused: the Megatron-LM backend"):
        validate_config(cfg, check_files=False)
