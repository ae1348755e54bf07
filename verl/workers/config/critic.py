"""The `critic` section: the value model, used when the advantage estimator needs values (gae). Upstream's
CriticConfig / FSDPCriticConfig, the critic's model section FSDPCriticModelCfg, and MegatronCriticConfig (readable,
refused for training). verl.trainer.config.config, upstream's older module, re-exports the three critic classes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl.base_config import BaseConfig
from verl.utils.config_schema import Refusal, at_least, choice, dict_field, refused
from verl.utils.profiler.config import RoleProfilerConfig
from verl.workers.config.engine import (
    CHECKPOINTING_POLICIES,
    MEGATRON_REFUSAL,
    CheckpointConfig,
    FSDPEngineConfig,
    check_one_micro_batch_size,
    train_strategy,
)
from verl.workers.config.model import (
    FUSED_KERNELS_REFUSAL,
    LIGER_REFUSAL,
    MTP_REFUSAL,
    NO_EXTERNAL_LIB,
    FusedKernelOptions,
    MegatronLoraConfig,
    MtpConfig,
    TiledMlpConfig,
)
from verl.workers.config.optimizer import FSDPOptimizerConfig, OptimizerConfig
from verl.workers.config.registries import LOSS_AGG_MODES


def _critic_optim() -> FSDPOptimizerConfig:
    return FSDPOptimizerConfig(lr=1e-5)


@dataclass
class FSDPCriticModelCfg(BaseConfig):
    """`critic.model`: the value model's folder (the actor's by default), LoRA, and its FSDP engine."""

    # resolved on the driver, as the actor's model section
    _mutable_fields = frozenset({"path", "tokenizer_path", "gradient_checkpointing_policy"})

    path: str | None = None  # None: the actor's model
    # upstream's: the folder whose config.json builds the value model (the weights still come from path); None: path
    hf_config_path: str | None = None
    tokenizer_path: str | None = None
    custom_chat_template: str | None = refused(
        None, "the critic scores the token ids the rollout made and renders no chat, so a chat template of its own "
        "would never be used", "Remove it (actor_rollout_ref.model.custom_chat_template sets the rollout's template).")
    override_config: dict[str, Any] = dict_field()
    external_lib: str | None = refused(None, *NO_EXTERNAL_LIB, follows="actor_rollout_ref.model.external_lib")
    enable_gradient_checkpointing: bool = True  # upstream's default, as the actor's
    gradient_checkpointing_policy: str = choice("auto", CHECKPOINTING_POLICIES)  # ours, as the actor's
    enable_activation_offload: bool = False  # as the actor's: the critic's layers offload what they save
    use_remove_padding: bool = True  # upstream's default, as the actor's
    fsdp_config: FSDPEngineConfig = field(default_factory=FSDPEngineConfig)
    # LoRA on the critic's trunk (peft); the value head (`score`) stays fully trainable as peft's modules_to_save
    lora_rank: int = at_least(0, 0)
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"
    exclude_modules: str | list[str] | None = None  # peft's: module names (or a regex) never adapted
    # a saved critic adapter (peft folder whose modules_to_save holds the value head `score`) to start from
    lora_adapter_path: str | None = None
    trust_remote_code: bool = False
    use_shm: bool = refused(False, "copying the critic's model folder to /dev/shm is not built",
                            "Remove it (actor_rollout_ref.model.use_shm copies the actor's model).")
    tiled_mlp: TiledMlpConfig = field(default_factory=TiledMlpConfig)  # as the actor's (verl.models.tiled_mlp)
    # later upstream builds critic.model as the actor's HFModelConfig: its GPU-kernel, MTP and Megatron-LoRA keys
    # are refused here as the actor's are
    use_liger: bool = refused(False, *LIGER_REFUSAL)
    use_fused_kernels: bool = refused(False, *FUSED_KERNELS_REFUSAL)
    fused_kernel_options: FusedKernelOptions = field(default_factory=FusedKernelOptions)
    mtp: MtpConfig = refused(field(default_factory=MtpConfig), *MTP_REFUSAL)
    lora: MegatronLoraConfig = field(default_factory=MegatronLoraConfig)


@dataclass
class CriticConfig(BaseConfig):
    """The value model's PPO update, whatever engine trains it."""

    # the deprecated global sizes become per-GPU ones after the check (verl.trainer.config.deprecated), and
    # optim.clip_grad is copied onto grad_clip (verl.trainer.config.upstream_keys)
    _mutable_fields = frozenset({"ppo_mini_batch_size", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu",
                                 "forward_micro_batch_size",
                                 "forward_micro_batch_size_per_gpu", "grad_clip"})

    rollout_n: int = at_least(1, 1)
    strategy: str = train_strategy("fsdp")
    # upstream: null lets algorithm.adv_estimator decide (gae: on); checked in verl.trainer.config.critic_enable
    enable: bool | None = None
    ppo_mini_batch_size: int = at_least(4, 1)  # in prompts, like the actor's
    ppo_micro_batch_size: int | None = at_least(None, 1)  # deprecated global size (verl.trainer.config.deprecated)
    ppo_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = at_least(32768, 1)
    forward_max_token_len_per_gpu: int = at_least(32768, 1)
    ppo_epochs: int = at_least(1, 1)
    shuffle: bool = False
    data_loader_seed: int | None = 42  # upstream's: seeds the mini-batch shuffle, as the actor's
    max_consecutive_nonfinite_grad_skips: int | None = at_least(3, 0)  # ours, as the actor's
    cliprange_value: float = 0.5
    loss_agg_mode: str = choice("token-mean", LOSS_AGG_MODES)
    # upstream after v0.7 (the yaml follows the actor's): seq-mean-token-sum-norm's divisor (None: the padded length)
    loss_scale_factor: float | None = None
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    profiler: RoleProfilerConfig = field(default_factory=RoleProfilerConfig)  # verl.utils.profiler
    optim: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=1e-5))  # the engine's class below
    model: FSDPCriticModelCfg = field(default_factory=FSDPCriticModelCfg)

    def __post_init__(self) -> None:
        # upstream's rule at construction (ValueError); from the yaml the builder reports it under `critic`
        check_one_micro_batch_size(self.use_dynamic_bsz, self.ppo_micro_batch_size, self.ppo_micro_batch_size_per_gpu,
                                   "ppo_micro_batch_size")
        # loss_scale_factor is checked with the run (verl.trainer.config.checks): it follows the actor's, whose own
        # check already names a value the critic only inherits


@dataclass
class MegatronCriticConfig(CriticConfig):
    """Upstream's Megatron-LM critic section, so configs and code that name it still load and read back.

    Training with it is refused: the trainer builds `critic` as FSDPCriticConfig, and a `_target_` naming this
    class stops the run before Ray starts with the Megatron reason. `megatron` (upstream's engine section) and
    `kl_ctrl` (upstream's legacy key) are kept as the plain mappings they were given: no engine here reads them."""

    _target_refusal: ClassVar[Refusal] = MEGATRON_REFUSAL

    strategy: str = choice("megatron", ("megatron",))
    nccl_timeout: int = 600
    megatron: dict[str, Any] = dict_field()
    load_weight: bool = True
    data_loader_seed: int | None = None
    kl_ctrl: dict[str, Any] = dict_field()


@dataclass
class FSDPCriticConfig(CriticConfig):
    """`critic` trained with FSDP2: CriticConfig plus the engine's own keys."""

    optim: FSDPOptimizerConfig = field(default_factory=_critic_optim)
    # deprecated global size of the value pass, divided by the data-parallel size (verl.trainer.config.deprecated)
    forward_micro_batch_size: int | None = at_least(None, 1)
    forward_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    ulysses_sequence_parallel_size: int = at_least(1, 1)  # Ulysses: verl.utils.ulysses
    grad_clip: float = 1.0
    # later upstream's place of the critic's engine: settled with model.fsdp_config before typing (one setting per
    # key, verl.trainer.config.critic_fsdp); the worker reads model.fsdp_config
    fsdp: FSDPEngineConfig = field(default_factory=FSDPEngineConfig)
