"""Pieces shared by every trained or evaluated model: FSDP sharding, optimizer, checkpoint contents."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.trainer.config.base import BaseConfig, at_least, choice, list_field

DTYPES = ("fp32", "float32", "bf16", "bfloat16", "fp16", "float16")
WARMUP_STYLES = ("constant", "cosine")
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")
TRAIN_STRATEGIES = ("fsdp", "fsdp2")


@dataclass
class WrapPolicyConfig(BaseConfig):
    # 0 wraps per transformer layer; a positive number wraps any module with at least that many parameters.
    min_num_params: int = at_least(0, 0)


@dataclass
class MixedPrecisionConfig(BaseConfig):
    param_dtype: str = choice("fp32", DTYPES)
    reduce_dtype: str = choice("fp32", DTYPES)
    buffer_dtype: str = choice("fp32", DTYPES)


@dataclass
class FSDPConfig(BaseConfig):
    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False
    model_dtype: str = choice("fp32", DTYPES)
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)


# Upstream's name for the same section.
FSDPEngineConfig = FSDPConfig


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


OptimizerConfig = OptimConfig


@dataclass
class CheckpointConfig(BaseConfig):
    save_contents: list[str] = list_field(["model", "optimizer", "extra"], CHECKPOINT_CONTENTS)
    load_contents: list[str] = list_field(["model", "optimizer", "extra"], CHECKPOINT_CONTENTS)
