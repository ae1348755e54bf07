"""The `actor_rollout_ref` section: the policy model, its PPO update, the reference policy and the rollout."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.base import BaseConfig, at_least, choice, dict_field, refused
from verl.trainer.config.engine import (
    CHECKPOINTING_POLICIES,
    CheckpointConfig,
    OptimConfig,
    WorkerFSDPConfig,
    train_strategy,
)
from verl.trainer.config.registries import KL_PENALTIES, LOSS_AGG_MODES, POLICY_LOSSES, policy_loss_registered
from verl.trainer.config.rollout import RolloutConfig

# Shared by the model sections of the actor and the critic (critic.py imports them).
NO_ACTIVATION_OFFLOAD = (
    "activation offloading is not built; enable_gradient_checkpointing saves activation memory instead",
    "Set enable_gradient_checkpointing=true instead.",
)
NO_EXTERNAL_LIB = (
    "importing a module before loading the model is built for the SFT trainer only",
    "Remove it; use a model folder whose classes transformers knows (model.trust_remote_code=true for code "
    "shipped with the model).",
)
NO_TORCH_COMPILE = ("torch.compile of the model is not built", "Set it to false.")


@dataclass
class ModelConfig(BaseConfig):
    path: str | None = None  # None: the bundled default model (verl.utils.default_model)
    custom_chat_template: str | None = None
    external_lib: str | None = refused(None, *NO_EXTERNAL_LIB)
    override_config: dict[str, Any] = dict_field()
    enable_gradient_checkpointing: bool = True  # upstream's default; docs/performance.md#defaults has its cost here
    # ours (upstream has no key): which activations checkpointing keeps; auto is selective on CPU, full on GPU
    gradient_checkpointing_policy: str = choice("auto", CHECKPOINTING_POLICIES)
    enable_activation_offload: bool = refused(False, *NO_ACTIVATION_OFFLOAD)
    use_remove_padding: bool = True  # upstream's default: pack the real tokens, no padding in the forward
    # LoRA (peft, verl.models.lora): > 0 trains an adapter of this rank on the actor; the reference policy is
    # then the same module with the adapter disabled (docs/lora.md)
    lora_rank: int = at_least(0, 0)
    lora_alpha: int = 16  # the adapter's output is scaled by lora_alpha / lora_rank
    target_modules: str | list[str] = "all-linear"  # peft's names: all-linear, or [q_proj, v_proj, ...]
    exclude_modules: str | list[str] | None = None  # peft's: module names (or a regex) never adapted
    lora_adapter_path: str | None = None  # a saved peft adapter folder to start from instead of a fresh adapter
    use_shm: bool = False  # copy the model folder to /dev/shm once on the driver; every worker loads that copy
    trust_remote_code: bool = False
    use_liger: bool = refused(
        False, "Liger kernels are GPU kernels this build does not include", "Set it to false."
    )
    use_fused_kernels: bool = refused(
        False,
        "the fused GPU log-prob kernels are not built (on CPU the fused RMSNorm/rotary are on already; "
        "VERL_FUSED_NORM_ROPE=0 turns them off)",
        "Set it to false.",
    )


@dataclass
class PolicyLossConfig(BaseConfig):
    loss_mode: str = choice("vanilla", POLICY_LOSSES, policy_loss_registered)
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    # sapo gate temperatures; the yaml makes them follow upstream's actor.tau_pos / actor.tau_neg
    tau_pos: float = 1.0
    tau_neg: float = 1.05


@dataclass
class ActorConfig(BaseConfig):
    strategy: str = train_strategy("fsdp")
    rollout_n: int = at_least(1, 1)  # ${actor_rollout_ref.rollout.n} in the yaml
    use_remove_padding: bool = True  # ${actor_rollout_ref.model.use_remove_padding} in the yaml
    ppo_mini_batch_size: int = at_least(4, 1)  # in prompts; the workers multiply by rollout.n
    ppo_micro_batch_size: int | None = at_least(None, 1)  # deprecated global size (verl.trainer.config.deprecated)
    ppo_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = at_least(16384, 1)
    grad_clip: float = 1.0
    # ours: a NaN/inf grad norm skips the optimizer step; this many in a row stop the run (0 or null: never)
    max_consecutive_nonfinite_grad_skips: int | None = at_least(3, 0)
    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = choice("token-mean", LOSS_AGG_MODES)
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    use_torch_compile: bool = refused(False, *NO_TORCH_COMPILE)
    entropy_from_logits_with_chunking: bool = False  # verl.workers.actor.entropy
    entropy_checkpointing: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = choice("low_var_kl", KL_PENALTIES)
    ppo_epochs: int = at_least(1, 1)
    shuffle: bool = False
    # a vision-language model's vision tower gets no gradient (verl.models.vision); refused for a text model
    freeze_vision_tower: bool = False
    ulysses_sequence_parallel_size: int = at_least(1, 1)  # Ulysses: verl.utils.ulysses
    # upstream's spelling of the sapo temperatures; policy_loss.tau_pos / tau_neg follow them in the yaml
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: WorkerFSDPConfig = field(default_factory=WorkerFSDPConfig)


@dataclass
class RefConfig(BaseConfig):
    strategy: str = train_strategy("fsdp")
    use_remove_padding: bool = True  # ${actor_rollout_ref.model.use_remove_padding} in the yaml
    fsdp_config: WorkerFSDPConfig = field(default_factory=WorkerFSDPConfig)
    # upstream compiles the entropy function with it, which the reference pass never computes: a note when true
    use_torch_compile: bool = False  # ${actor_rollout_ref.actor.use_torch_compile}
    # as the actor's (verl.workers.actor.entropy); the reference pass computes no entropy, so they change nothing
    entropy_from_logits_with_chunking: bool = False
    entropy_checkpointing: bool = False
    log_prob_micro_batch_size: int | None = at_least(None, 1)  # deprecated global size (verl.trainer.config.deprecated)
    log_prob_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = at_least(16384, 1)
    ulysses_sequence_parallel_size: int = at_least(1, 1)


@dataclass
class ActorRolloutRefConfig(BaseConfig):
    # One worker holds actor, rollout and (when used) reference, and hands weights to the rollout in process.
    hybrid_engine: bool = refused(
        True,
        "actor and rollout always share one worker here (weights are handed over in process)",
        "Set actor_rollout_ref.hybrid_engine=true.",
    )
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
