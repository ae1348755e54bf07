"""The actor's config group (the yaml files beside this one) is also upstream's import path of the actor's typed
config classes: ``from verl.trainer.config.actor import FSDPActorConfig``. They live in verl.workers.config."""

from verl.workers.config.actor import ActorConfig, FSDPActorConfig, McoreActorConfig, PolicyLossConfig

__all__ = ["ActorConfig", "FSDPActorConfig", "McoreActorConfig", "PolicyLossConfig"]
