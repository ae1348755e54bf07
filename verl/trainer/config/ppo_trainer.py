"""The whole PPO trainer config (ppo_trainer.yaml) as one typed tree."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.trainer.config.algorithm import AlgoConfig
from verl.trainer.config.data import DataConfig
from verl.trainer.config.old_log_prob_reuse import OldLogProbReuse, decide_old_log_prob_reuse
from verl.trainer.config.reward import CustomRewardFunctionConfig, FSDPRewardModelConfig, LegacySandboxFusionConfig
from verl.trainer.config.trainer import RayKwargsConfig, TrainerConfig, TransferQueueConfig
from verl.utils.config_schema import MutableConfig
from verl.utils.profiler.config import GlobalProfilerConfig
from verl.utils.skip import SkipManagerConfig
from verl.workers.config import ActorRolloutRefConfig, DistillationConfig, FSDPCriticConfig
from verl.workers.config.reward import RewardConfig


@dataclass
class PPOTrainerConfig(MutableConfig):
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: FSDPCriticConfig = field(default_factory=FSDPCriticConfig)
    reward_model: FSDPRewardModelConfig = field(default_factory=FSDPRewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    # upstream v0.7's spellings of the two above: each leaf mirrors the key the run uses (reward/reward.yaml)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sandbox_fusion: LegacySandboxFusionConfig = field(default_factory=LegacySandboxFusionConfig)
    algorithm: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    # which steps are profiled and how (verl.utils.profiler; the roles' `profiler` sections say who)
    global_profiler: GlobalProfilerConfig = field(default_factory=GlobalProfilerConfig)
    transfer_queue: TransferQueueConfig = field(default_factory=TransferQueueConfig)  # refused unless disabled
    # upstream's on-policy distillation from teacher models: refused unless at its defaults
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
    # upstream main's run-wide rollout skip: refused unless at its defaults (actor_rollout_ref.rollout.skip is built)
    skip: SkipManagerConfig = field(default_factory=SkipManagerConfig)

    @property
    def use_critic(self) -> bool:
        """Only GAE needs learned values; every other estimator builds its baseline from rewards."""
        return self.algorithm.adv_estimator == "gae"

    @property
    def use_reference_policy(self) -> bool:
        return self.algorithm.use_kl_in_reward or self.actor_rollout_ref.actor.use_kl_loss

    @property
    def ref_in_actor(self) -> bool:
        """With LoRA the reference policy is the actor's own module with the adapter disabled: no ref worker."""
        return self.actor_rollout_ref.model.lora_rank > 0

    @property
    def old_log_prob_reuse(self) -> OldLogProbReuse:
        """Whether steps skip the actor's old-log-prob pass and use the update's first forward instead."""
        return decide_old_log_prob_reuse(self)

    @property
    def world_size(self) -> int:
        """Worker processes in total: GPUs, or CPU worker processes on a machine without one."""
        return self.trainer.nnodes * self.trainer.n_gpus_per_node
