"""Upstream's older module of the critic's config classes: ``from verl.trainer.config.config import CriticConfig``.

The classes live in verl.workers.config.critic; these are the same class objects, so a `_target_` naming either
path builds the same section.
"""

from verl.workers.config.critic import CriticConfig, FSDPCriticConfig, MegatronCriticConfig

__all__ = ["CriticConfig", "FSDPCriticConfig", "MegatronCriticConfig"]
