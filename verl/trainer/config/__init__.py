"""Trainer configs: the yaml files users edit, and the dataclasses that check them before a run starts.

from verl.trainer.config import load_config, validate_config
cfg = load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4"])
typed = validate_config(cfg)          # raises ConfigError naming each bad key
"""

from verl.trainer.config.actor import ActorConfig, ActorRolloutRefConfig, ModelConfig, PolicyLossConfig, RefConfig
from verl.trainer.config.algorithm import AlgoConfig, FilterGroupsConfig, KLControlConfig, PFPPOConfig
from verl.trainer.config.base import BaseConfig, build_config, schema_keys
from verl.trainer.config.critic import CriticConfig, CriticModelConfig
from verl.trainer.config.data import CustomClsConfig, DataConfig
from verl.trainer.config.deprecated import register_resolvers
from verl.trainer.config.engine import (
    CheckpointConfig,
    FSDPConfig,
    FSDPEngineConfig,
    MixedPrecisionConfig,
    OptimConfig,
    OptimizerConfig,
    WrapPolicyConfig,
)
from verl.trainer.config.errors import ConfigError, ConfigWarning
from verl.trainer.config.overrides import precheck_argv, prepare_argv, unknown_override_problems
from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.trainer.config.reward import (
    CustomRewardFunctionConfig,
    OverlongBufferConfig,
    RewardModelConfig,
    RewardModelModelConfig,
    SandboxFusionConfig,
)
from verl.trainer.config.rollout import MultiTurnConfig, RolloutConfig, ValKwargsConfig
from verl.trainer.config.trainer import RayKwargsConfig, TrainerConfig
from verl.trainer.config.validate import CONFIG_DIR, load_config, validate_config

register_resolvers()  # the yaml's ${verl.per_gpu_default:...}, before any composition

__all__ = [
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AlgoConfig",
    "BaseConfig",
    "CONFIG_DIR",
    "CheckpointConfig",
    "ConfigError",
    "ConfigWarning",
    "CriticConfig",
    "CriticModelConfig",
    "CustomClsConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FSDPConfig",
    "FSDPEngineConfig",
    "FilterGroupsConfig",
    "KLControlConfig",
    "MixedPrecisionConfig",
    "ModelConfig",
    "MultiTurnConfig",
    "OptimConfig",
    "OptimizerConfig",
    "OverlongBufferConfig",
    "PFPPOConfig",
    "PPOTrainerConfig",
    "PolicyLossConfig",
    "RayKwargsConfig",
    "RefConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "SandboxFusionConfig",
    "TrainerConfig",
    "ValKwargsConfig",
    "WrapPolicyConfig",
    "build_config",
    "load_config",
    "precheck_argv",
    "prepare_argv",
    "schema_keys",
    "unknown_override_problems",
    "validate_config",
]
