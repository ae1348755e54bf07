"""Upstream's typed worker configs (verl.workers.config): what the workers receive and annotate.

The yaml's sections name these classes in `_target_`; verl.utils.config.omega_conf_to_dataclass and the trainer's
pre-Ray check (verl.trainer.config.validate_config) build them, checking every key with its full dotted name.
"""

from verl.workers.config.actor import (
    ActorConfig,
    FSDPActorConfig,
    McoreActorConfig,
    PolicyLossConfig,
    RefConfig,
    RouterReplayConfig,
)
from verl.workers.config.actor_rollout_ref import ActorRolloutRefConfig
from verl.workers.config.critic import CriticConfig, FSDPCriticConfig, FSDPCriticModelCfg, MegatronCriticConfig
from verl.workers.config.distillation import (
    DistillationConfig,
    DistillationLossConfig,
    DistillationTeacherInferenceConfig,
    DistillationTeacherModelConfig,
    DistillationTeacherModelsConfig,
)
from verl.workers.config.engine import (
    CheckpointConfig,
    FSDPEngineConfig,
    MixedPrecisionConfig,
    QATEngineConfig,
    WrapPolicyConfig,
)
from verl.workers.config.model import HFModelConfig, MegatronLoraConfig, MtpConfig
from verl.workers.config.optimizer import FSDPOptimizerConfig, OptimizerConfig
from verl.workers.config.reward import RewardConfig
from verl.workers.config.reward_model import (
    FSDPRewardModelConfig,
    McoreRewardModelConfig,
    ModuleConfig,
    RewardManagerConfig,
    RewardModelConfig,
    RewardModelModelConfig,
    RewardModelRolloutConfig,
    RewardScoringConfig,
    SandboxFusionConfig,
)
from verl.workers.config.rollout import (
    AgentLoopConfig,
    CustomAsyncServerConfig,
    MultiTurnConfig,
    RolloutConfig,
    SamplingConfig,
    SkipConfig,
    TraceConfig,
)
from verl.workers.config.rollout_services import CheckpointEngineConfig, PrometheusConfig

__all__ = [
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AgentLoopConfig",
    "CheckpointConfig",
    "CheckpointEngineConfig",
    "CriticConfig",
    "CustomAsyncServerConfig",
    "DistillationConfig",
    "DistillationLossConfig",
    "DistillationTeacherInferenceConfig",
    "DistillationTeacherModelConfig",
    "DistillationTeacherModelsConfig",
    "FSDPActorConfig",
    "FSDPCriticConfig",
    "FSDPCriticModelCfg",
    "FSDPEngineConfig",
    "FSDPOptimizerConfig",
    "FSDPRewardModelConfig",
    "HFModelConfig",
    "McoreActorConfig",
    "McoreRewardModelConfig",
    "MegatronLoraConfig",
    "MegatronCriticConfig",
    "MixedPrecisionConfig",
    "ModuleConfig",
    "MtpConfig",
    "MultiTurnConfig",
    "OptimizerConfig",
    "PolicyLossConfig",
    "PrometheusConfig",
    "QATEngineConfig",
    "RefConfig",
    "RewardConfig",
    "RewardManagerConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RewardModelRolloutConfig",
    "RewardScoringConfig",
    "RolloutConfig",
    "RouterReplayConfig",
    "SamplingConfig",
    "SandboxFusionConfig",
    "SkipConfig",
    "TraceConfig",
    "WrapPolicyConfig",
]
