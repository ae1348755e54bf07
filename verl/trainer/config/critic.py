"""The `critic` section: the value model, used when the advantage estimator needs values (gae)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.actor import NO_ACTIVATION_OFFLOAD, NO_EXTERNAL_LIB
from verl.trainer.config.base import BaseConfig, at_least, choice, dict_field, refused
from verl.trainer.config.engine import (
    CHECKPOINTING_POLICIES,
    CheckpointConfig,
    OptimConfig,
    WorkerFSDPConfig,
    train_strategy,
)
from verl.trainer.config.registries import LOSS_AGG_MODES


def _critic_optim() -> OptimConfig:
    return OptimConfig(lr=1e-5)


@dataclass
class CriticModelConfig(BaseConfig):
    path: str | None = None  # None: the actor's model
    tokenizer_path: str | None = None
    override_config: dict[str, Any] = dict_field()
    external_lib: str | None = refused(None, *NO_EXTERNAL_LIB, follows="actor_rollout_ref.model.external_lib")
    enable_gradient_checkpointing: bool = True  # upstream's default, as the actor's
    gradient_checkpointing_policy: str = choice("auto", CHECKPOINTING_POLICIES)  # ours, as the actor's
    enable_activation_offload: bool = refused(False, *NO_ACTIVATION_OFFLOAD)
    use_remove_padding: bool = True  # upstream's default, as the actor's
    fsdp_config: WorkerFSDPConfig = field(default_factory=WorkerFSDPConfig)
    # LoRA on the critic's trunk (peft); the value head (`score`) stays fully trainable as peft's modules_to_save
    lora_rank: int = at_least(0, 0)
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"
    trust_remote_code: bool = False


@dataclass
class CriticConfig(BaseConfig):
    rollout_n: int = at_least(1, 1)
    strategy: str = train_strategy("fsdp")
    optim: OptimConfig = field(default_factory=_critic_optim)
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    ppo_mini_batch_size: int = at_least(4, 1)  # in prompts, like the actor's
    ppo_micro_batch_size: int | None = at_least(None, 1)  # deprecated global size (verl.trainer.config.deprecated)
    ppo_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    forward_micro_batch_size: int | None = refused(
        None,
        "the deprecated global size is not built for the value pass; it follows critic.ppo_micro_batch_size",
        "Set critic.forward_micro_batch_size_per_gpu instead.",
        follows="critic.ppo_micro_batch_size",
    )
    forward_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = at_least(32768, 1)
    forward_max_token_len_per_gpu: int = at_least(32768, 1)
    ulysses_sequence_parallel_size: int = at_least(1, 1)  # Ulysses: verl.utils.ulysses
    ppo_epochs: int = at_least(1, 1)
    shuffle: bool = False
    grad_clip: float = 1.0
    max_consecutive_nonfinite_grad_skips: int | None = at_least(3, 0)  # ours, as the actor's
    cliprange_value: float = 0.5
    loss_agg_mode: str = choice("token-mean", LOSS_AGG_MODES)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
