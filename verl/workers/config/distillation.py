"""The `distillation` section (upstream after v0.7, verl.workers.config.DistillationConfig): on-policy
distillation. With `enabled`, upstream starts the teacher models (`teacher_models.<name>`, each an inference
engine configured by its `inference` section) on a resource pool of their own (`nnodes` x `n_gpus_per_node`),
routes each sample to a teacher by its `teacher_key` field, has the teacher score the student's rollout (top-k
log-probs) and adds a distillation loss (`distillation_loss`) to the actor's update, with or without the task
rewards.

Not built here: every key must keep upstream's default (DISTILLATION_REFUSAL), so none is accepted and ignored.
Upstream adds teachers as `+distillation.teacher_models.<name>.*`; such a name is not a key here, so it is
reported as an unknown key before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl.base_config import BaseConfig
from verl.utils.config_schema import dict_field, refused

__all__ = [
    "DISTILLATION_REFUSAL",
    "DistillationConfig",
    "DistillationLossConfig",
    "DistillationTeacherInferenceConfig",
    "DistillationTeacherModelConfig",
    "DistillationTeacherModelsConfig",
]

DISTILLATION_REFUSAL = (
    "on-policy distillation from teacher models is not built: upstream serves the teachers on an inference pool of "
    "their own (distillation.nnodes x n_gpus_per_node), scores the student's rollouts with their (top-k) log-probs "
    "and adds a distillation loss to the actor's update; here no teacher is started, no teacher log-prob reaches "
    "the batch and the actor's loss has no distillation term",
    "Leave every distillation key at its default (enabled=false); a KL penalty towards a fixed reference policy is "
    "actor_rollout_ref.actor.use_kl_loss / algorithm.use_kl_in_reward.",
)
_R = DISTILLATION_REFUSAL
_ROLLOUT = "actor_rollout_ref.rollout."


@dataclass
class DistillationLossConfig(BaseConfig):
    """`distillation.distillation_loss`: the estimator of the student-teacher divergence (`loss_mode`, over the
    teacher's `topk` tokens), its weight and clamps, and whether it enters as a policy-gradient term (with the
    PPO clip of `policy_loss_mode`)."""

    loss_mode: str = refused("k3", *_R)
    topk: int | None = refused(32, *_R)
    use_task_rewards: bool = refused(True, *_R)
    distillation_loss_coef: float = refused(1.0, *_R)
    loss_max_clamp: float | None = refused(None, *_R)
    log_prob_min_clamp: float | None = refused(None, *_R)
    use_policy_gradient: bool = refused(False, *_R)
    policy_loss_mode: str = refused("vanilla", *_R)
    clip_ratio: float = refused(0.2, *_R)
    clip_ratio_low: float = refused(0.2, *_R)
    clip_ratio_high: float = refused(0.2, *_R)


@dataclass
class DistillationTeacherInferenceConfig(BaseConfig):
    """`distillation.teacher_models.<name>.inference`: the teacher's inference engine. Upstream builds it as its
    RolloutConfig (the `_target_` it names) from these keys; here it is this section of upstream's keys, each
    refused unless at its default. The keys the yaml makes follow actor_rollout_ref.rollout accept that value."""

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.workers.config.RolloutConfig",)

    name: str | None = refused("hf", *_R, follows=_ROLLOUT + "name")
    dtype: str | None = refused(None, *_R, follows=_ROLLOUT + "dtype")
    gpu_memory_utilization: float = refused(0.5, *_R)
    enforce_eager: bool = refused(True, *_R)
    cudagraph_capture_sizes: list[int] | None = refused(None, *_R)
    free_cache_engine: bool = refused(True, *_R)
    data_parallel_size: int = refused(1, *_R)
    expert_parallel_size: int = refused(1, *_R)
    tensor_model_parallel_size: int = refused(2, *_R)
    max_num_batched_tokens: int = refused(8192, *_R)
    max_model_len: int | None = refused(None, *_R)
    max_num_seqs: int = refused(1024, *_R)
    load_format: str = refused("auto", *_R)
    engine_kwargs: dict[str, Any] = refused(dict_field(), *_R)
    limit_images: int | None = refused(None, *_R)
    enable_chunked_prefill: bool = refused(True, *_R)
    enable_prefix_caching: bool = refused(True, *_R)
    disable_log_stats: bool = refused(True, *_R)
    skip_tokenizer_init: bool = refused(False, *_R)
    prompt_length: int = refused(512, *_R, follows=_ROLLOUT + "prompt_length")
    response_length: int = refused(512, *_R, follows=_ROLLOUT + "response_length")
    temperature: float = refused(1.0, *_R, follows=_ROLLOUT + "temperature")


@dataclass
class DistillationTeacherModelConfig(BaseConfig):
    """`distillation.teacher_models.<name>`: one teacher: the samples it scores (`key`, matched against the
    samples' `teacher_key` field), its model, how many engine replicas serve it, and their engine."""

    key: str | None = refused(None, *_R)
    model_path: str | None = refused(None, *_R)
    num_replicas: int = refused(0, *_R)
    inference: DistillationTeacherInferenceConfig = field(default_factory=DistillationTeacherInferenceConfig)


@dataclass
class DistillationTeacherModelsConfig(BaseConfig):
    """`distillation.teacher_models`: upstream's map of teacher names to teachers; its yaml ships one,
    `teacher_model` (the only name accepted here)."""

    teacher_model: DistillationTeacherModelConfig = field(default_factory=DistillationTeacherModelConfig)


@dataclass
class DistillationConfig(BaseConfig):
    """`distillation`: on-policy distillation (see the module's docstring); refused unless every key is at its
    default (DISTILLATION_REFUSAL)."""

    enabled: bool = refused(False, *_R)
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)
    n_gpus_per_node: int = refused(8, *_R)  # the teachers' pool, beside the trainer's
    nnodes: int = refused(0, *_R)
    teacher_models: DistillationTeacherModelsConfig = field(default_factory=DistillationTeacherModelsConfig)
    teacher_key: str = refused("data_source", *_R)  # the sample field naming its teacher
