"""The optimizer section (`actor.optim`, `critic.optim`): upstream's OptimizerConfig and FSDPOptimizerConfig.

AdamW is built from it by verl.workers.fsdp_utils.build_optimizer, its schedule by build_lr_scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl.base_config import BaseConfig
from verl.utils.config_schema import choice, list_field

WARMUP_STYLES = ("constant", "cosine")


@dataclass
class OptimizerConfig(BaseConfig):
    """What every engine's optimizer has: the learning rate, its warmup, AdamW's betas and decay, the clip."""

    # filled in by the trainer from the data and epochs
    _mutable_fields = frozenset({"total_training_steps"})

    lr: float = 1e-6
    lr_warmup_steps_ratio: float = 0.0
    total_training_steps: int = -1  # filled in by the trainer from the data and epochs
    weight_decay: float = 0.01
    lr_warmup_steps: int = -1  # -1: use lr_warmup_steps_ratio
    betas: list[float] = list_field([0.9, 0.999])
    # upstream's engine name for the role's grad_clip; the yaml makes it follow grad_clip, set either
    clip_grad: float = 1.0


@dataclass
class FSDPOptimizerConfig(OptimizerConfig):
    """The FSDP engine's optimizer: OptimizerConfig plus the schedule's shape."""

    min_lr_ratio: float | None = 0.0
    num_cycles: float = 0.5
    warmup_style: str = choice("constant", WARMUP_STYLES)
