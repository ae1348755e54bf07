"""The optimizer section (`actor.optim`, `critic.optim`): upstream's OptimizerConfig and FSDPOptimizerConfig.

AdamW is built from it by verl.workers.fsdp_utils.build_optimizer, its schedule by build_lr_scheduler.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from verl.base_config import BaseConfig
from verl.utils.config_schema import choice, list_field

LR_SCHEDULER_TYPES = ("constant", "cosine")


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
    """The FSDP engine's optimizer: OptimizerConfig plus the schedule's shape.

    ``lr_scheduler_type`` picks the schedule; ``warmup_style`` is upstream's deprecated name for it: when set it
    becomes ``lr_scheduler_type`` (setting both to different schedules is refused). A schedule other than
    constant or cosine is refused with ValueError. ``min_lr_ratio=None`` means no floor (0.0)."""

    min_lr_ratio: float | None = None
    num_cycles: float = 0.5
    # deprecated (upstream's older name): when set, it is the schedule
    warmup_style: str | None = None
    lr_scheduler_type: str = choice("constant", LR_SCHEDULER_TYPES)

    def __post_init__(self) -> None:
        for key in ("warmup_style", "lr_scheduler_type"):
            value = getattr(self, key)
            if value is not None and value not in LR_SCHEDULER_TYPES:
                raise ValueError(f"optim.{key}={value!r} is not implemented; use one of {list(LR_SCHEDULER_TYPES)}")
        if self.warmup_style is not None:
            if self.lr_scheduler_type not in ("constant", self.warmup_style):
                raise ValueError(
                    f"optim.warmup_style={self.warmup_style!r} (deprecated) and optim.lr_scheduler_type="
                    f"{self.lr_scheduler_type!r} disagree; set only lr_scheduler_type"
                )
            warnings.warn("optim.warmup_style is deprecated, use optim.lr_scheduler_type", DeprecationWarning, stacklevel=3)
            object.__setattr__(self, "lr_scheduler_type", self.warmup_style)
