"""The `actor_rollout_ref` section: one worker's model, actor, reference and rollout together."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.base_config import BaseConfig
from verl.utils.config_schema import at_least, refused
from verl.workers.config.actor import FSDPActorConfig, RefConfig
from verl.workers.config.model import HFModelConfig
from verl.workers.config.rollout import RolloutConfig


@dataclass
class ActorRolloutRefConfig(BaseConfig):
    # One worker holds actor, rollout and (when used) reference, and hands weights to the rollout in process.
    hybrid_engine: bool = refused(
        True,
        "actor and rollout always share one worker here (weights are handed over in process)",
        "Set actor_rollout_ref.hybrid_engine=true.",
    )
    # seconds a collective of the worker's process group (nccl, or gloo on CPU) may wait before it fails
    nccl_timeout: int = at_least(600, 1)
    model: HFModelConfig = field(default_factory=HFModelConfig)
    # as the yaml: the section follows model.use_remove_padding (true), while FSDPActorConfig() alone keeps
    # upstream's dataclass default (false)
    actor: FSDPActorConfig = field(default_factory=lambda: FSDPActorConfig(use_remove_padding=True))
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
