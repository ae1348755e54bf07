"""Pieces shared by every trained or evaluated model: FSDP sharding, optimizer, checkpoint contents."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.trainer.config.base import BaseConfig, Refusal, choice, list_field, refused, refused_values

DTYPES = ("fp32", "float32", "bf16", "bfloat16", "fp16", "float16")
WARMUP_STYLES = ("constant", "cosine")
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")
TRAIN_STRATEGIES = ("fsdp", "fsdp2")
# gradient_checkpointing_policy (ours): what checkpointing keeps (verl.models.checkpoint_policy); auto resolves per device
CHECKPOINTING_POLICIES = ("auto", "full", "selective")
MEGATRON_REFUSAL = Refusal(
    "the Megatron-LM backend (tensor, pipeline and expert parallelism, mcore checkpoints) is not built",
    "Use strategy=fsdp2: FSDP2 shards parameters, gradients and optimizer state over all ranks, "
    "ulysses_sequence_parallel_size splits long sequences, model.lora_rank trains an adapter; see docs/scaling.md "
    "(Megatron).",
)


def train_strategy(default: str = "fsdp"):
    """A trained role's `strategy`: fsdp or fsdp2 (both FSDP2); `megatron`, upstream's other backend, refused with
    what to use instead rather than as an unknown name."""
    return refused_values(choice(default, TRAIN_STRATEGIES), {"megatron": MEGATRON_REFUSAL})


@dataclass
class WrapPolicyConfig(BaseConfig):
    # Upstream: a positive number wraps any module with at least that many parameters.
    min_num_params: int = refused(
        0,
        "only per-decoder-layer wrapping is built (every layer is one FSDP2 unit, the model the root)",
        "Remove it; the layer wrapping is what 0 means.",
    )


@dataclass
class MixedPrecisionConfig(BaseConfig):
    # null: compute in the hardware's dtype (bf16 where native: CUDA, AVX512-BF16, AMX; fp32 where bf16 would be
    # emulated), resolved once on the driver and logged; upstream's unset mixed_precision computes in bf16.
    param_dtype: str | None = choice(None, DTYPES)
    reduce_dtype: str = choice("fp32", DTYPES)
    buffer_dtype: str = refused(
        choice("fp32", DTYPES),
        "FSDP2's mixed precision has no buffer dtype; buffers keep the model's dtype (fsdp_config.model_dtype)",
        "Remove it, or set fsdp_config.model_dtype.",
    )


@dataclass
class FSDPConfig(BaseConfig):
    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = refused(
        False,
        "not built: CPU offload follows param_offload / optimizer_offload (and does nothing on a CPU-only machine)",
        "Use fsdp_config.param_offload=true instead.",
    )
    reshard_after_forward: bool = True
    fsdp_size: int = -1  # -1: shard over all ranks; smaller: HSDP (replicate x shard), as the SFT trainer does
    forward_prefetch: bool = refused(
        False, "not built: FSDP2 prefetches the next layer by itself", "Remove it."
    )
    model_dtype: str = choice("fp32", DTYPES)
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)


# Upstream's name for the same section.
FSDPEngineConfig = FSDPConfig


@dataclass
class WorkerFSDPConfig(FSDPConfig):
    """fsdp_config of the RL workers (actor, reference, critic): they shard over all ranks.

    strategy / use_orig_params / forward_prefetch are upstream's engine keys: fsdp and fsdp2 both mean FSDP2
    here; the other two are FSDP1 options FSDP2 has no use for, accepted with a one-line note
    (verl.trainer.config.upstream_keys)."""

    strategy: str = train_strategy("fsdp")
    use_orig_params: bool = False
    fsdp_size: int = refused(
        -1,
        "the RL workers shard over all ranks; HSDP (fsdp_size smaller than the world) is built for SFT only",
        "Set fsdp_size=-1 (the default), or change trainer.n_gpus_per_node / trainer.nnodes.",
    )
    forward_prefetch: bool = False  # FSDP1's; FSDP2 prefetches the next layer itself (a note when true)


@dataclass
class OptimConfig(BaseConfig):
    lr: float = 1e-6
    lr_warmup_steps: int = -1  # -1: use lr_warmup_steps_ratio
    lr_warmup_steps_ratio: float = 0.0
    min_lr_ratio: float | None = 0.0
    num_cycles: float = 0.5
    warmup_style: str = choice("constant", WARMUP_STYLES)
    total_training_steps: int = -1  # filled in by the trainer from the data and epochs
    weight_decay: float = 0.01
    betas: list[float] = list_field([0.9, 0.999])
    # upstream's engine name for the role's grad_clip; the yaml makes it follow grad_clip, set either
    clip_grad: float = 1.0


OptimizerConfig = OptimConfig


@dataclass
class CheckpointConfig(BaseConfig):
    save_contents: list[str] = list_field(["model", "optimizer", "extra"], CHECKPOINT_CONTENTS)
    load_contents: list[str] = list_field(["model", "optimizer", "extra"], CHECKPOINT_CONTENTS)
