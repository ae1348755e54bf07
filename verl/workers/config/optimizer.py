"""The optimizer section (`actor.optim`, `critic.optim`): upstream's OptimizerConfig and FSDPOptimizerConfig.

The optimizer is built from it by verl.workers.fsdp_utils.build_optimizer (the class `optimizer` of the module
`optimizer_impl`, AdamW of torch.optim by default), its schedule by build_lr_scheduler.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from dataclasses import dataclass
from typing import Any

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
    # upstream's: the optimizer is the class `optimizer` of the module `optimizer_impl` (any importable module:
    # torch.optim, torchao.optim, bitsandbytes.optim, your own); it gets lr and weight_decay, betas when its name
    # has "adam" in it, then override_optimizer_config's entries (extra or replacing constructor arguments)
    optimizer: str = "AdamW"
    optimizer_impl: str = "torch.optim"
    override_optimizer_config: dict[str, Any] | None = None
    # true: the schedule's first step is step 0 (lr 0 at the start of a warmup); false: step 1 (torchtitan's count)
    zero_indexed_step: bool = True

    def __post_init__(self) -> None:
        optimizer_class(self)  # an unknown module, class or constructor argument stops the run before Ray
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


def optimizer_class(optim: FSDPOptimizerConfig) -> type:
    """The class ``optim.optimizer`` of the module ``optim.optimizer_impl``, checked to be a torch optimizer that
    takes every key of ``optim.override_optimizer_config``; ValueError naming the key otherwise."""
    try:
        module = importlib.import_module(optim.optimizer_impl)
    except ImportError as e:
        raise ValueError(f"optim.optimizer_impl={optim.optimizer_impl!r} cannot be imported ({e}); install it, or "
                         f"use torch.optim") from e
    cls = getattr(module, optim.optimizer, None)
    if cls is None:
        names = sorted(n for n, v in vars(module).items() if isinstance(v, type) and _is_optimizer(v))
        raise ValueError(f"optim.optimizer={optim.optimizer!r} is not in {optim.optimizer_impl} "
                         f"(its optimizers: {names})")
    if not _is_optimizer(cls):
        raise ValueError(f"optim.optimizer={optim.optimizer!r}: {optim.optimizer_impl}.{optim.optimizer} is not a "
                         f"torch.optim.Optimizer subclass")
    override = optim.override_optimizer_config or {}
    if "params" in override:
        raise ValueError("optim.override_optimizer_config.params: the parameters are the model's; remove it")
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(override) - set(params) - {"self"})
        if unknown:
            raise ValueError(f"optim.override_optimizer_config has {unknown}, which {optim.optimizer_impl}."
                             f"{optim.optimizer} does not take; its arguments: {sorted(set(params) - {'self'})}")
    return cls


def _is_optimizer(cls: type) -> bool:
    import torch

    return isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)
