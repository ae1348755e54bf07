"""Upstream's older module of config classes: ``from verl.trainer.config.config import CriticConfig, ModuleConfig``
(and ``RewardManagerConfig``, which upstream v0.7's deprecation warning points to here).

The classes live in verl.workers.config.critic and .reward_model; these are the same class objects, so a
`_target_` naming either path builds the same section.
"""

from verl.workers.config.critic import CriticConfig, FSDPCriticConfig, MegatronCriticConfig
from verl.workers.config.reward_model import ModuleConfig, RewardManagerConfig

__all__ = ["CriticConfig", "FSDPCriticConfig", "MegatronCriticConfig", "ModuleConfig", "RewardManagerConfig"]
