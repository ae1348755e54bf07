"""Trainer configs: the yaml files users edit, and the dataclasses that check them before a run starts.

from verl.trainer.config import load_config, validate_config
cfg = load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4"])
typed = validate_config(cfg)          # raises ConfigError naming each bad key
"""

from verl.base_config import BaseConfig
from verl.trainer.config.algorithm import (
    AlgoConfig,
    FilterGroupsConfig,
    KLControlConfig,
    PFPPOConfig,
    RolloutCorrectionConfig,
)
from verl.trainer.config.data import CustomClsConfig, DataConfig
from verl.trainer.config.deprecated import register_resolvers
from verl.trainer.config.overrides import precheck_argv, prepare_argv, unknown_override_problems
from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.trainer.config.reward import (
    CustomRewardFunctionConfig,
    OverlongBufferConfig,
    RewardModelConfig,
    RewardModelModelConfig,
    SandboxFusionConfig,
)
from verl.trainer.config.trainer import RayKwargsConfig, TrainerConfig
from verl.trainer.config.validate import CONFIG_DIR, load_config, validate_config
from verl.utils.config_errors import ConfigError, ConfigWarning
from verl.utils.config_schema import build_config, schema_keys

# The worker sections' classes live beside the workers (verl.workers.config); the trainer's tree holds them, and
# upstream imports CheckpointConfig from here, so they are importable from here too (the same classes).
from verl.workers.config import (
    ActorConfig,
    ActorRolloutRefConfig,
    AgentLoopConfig,
    CheckpointConfig,
    CriticConfig,
    CustomAsyncServerConfig,
    FSDPActorConfig,
    FSDPCriticConfig,
    FSDPCriticModelCfg,
    FSDPEngineConfig,
    FSDPOptimizerConfig,
    HFModelConfig,
    McoreActorConfig,
    MixedPrecisionConfig,
    MultiTurnConfig,
    OptimizerConfig,
    PolicyLossConfig,
    RefConfig,
    RolloutConfig,
    SamplingConfig,
    WrapPolicyConfig,
)

register_resolvers()  # the yaml's ${verl.per_gpu_default:...}, before any composition

__all__ = [
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AgentLoopConfig",
    "AlgoConfig",
    "BaseConfig",
    "CONFIG_DIR",
    "CheckpointConfig",
    "ConfigError",
    "ConfigWarning",
    "CriticConfig",
    "CustomAsyncServerConfig",
    "CustomClsConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FSDPActorConfig",
    "FSDPCriticConfig",
    "FSDPCriticModelCfg",
    "FSDPEngineConfig",
    "FSDPOptimizerConfig",
    "FilterGroupsConfig",
    "HFModelConfig",
    "KLControlConfig",
    "McoreActorConfig",
    "MixedPrecisionConfig",
    "MultiTurnConfig",
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
    "RolloutCorrectionConfig",
    "SamplingConfig",
    "SandboxFusionConfig",
    "TrainerConfig",
    "WrapPolicyConfig",
    "build_config",
    "load_config",
    "precheck_argv",
    "prepare_argv",
    "schema_keys",
    "unknown_override_problems",
    "validate_config",
]
