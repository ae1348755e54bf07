"""Upstream v0.7's `reward:` section (reward/reward.yaml) as typed config: RewardConfig and the classes below it.

This schema keeps the older layout (`reward_model.*`, `custom_reward_function.*`); the trainer runs from those keys.
Every leaf of this section mirrors one of them in the yaml, and verl.trainer.config.reward_section folds what a
user writes here onto them before the config is typed. So this tree is read-only in practice: it shows, in v0.7's
spelling, the values the run uses. The reward loop, the judge engine and the sandbox read `reward_model.*`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl.utils.config_schema import MutableConfig, dict_field, refused
from verl.workers.config.reward_model import JUDGE_KEY_REFUSALS, RewardManagerConfig, SandboxFusionConfig


@dataclass
class RewardFunctionConfig(MutableConfig):
    """reward.custom_reward_function: mirrors custom_reward_function.path / name."""

    path: str | None = None
    name: str = "compute_score"


@dataclass
class RewardRolloutConfig(MutableConfig):
    """reward.reward_model.rollout: the judge engine. v0.7 names upstream's RolloutConfig for it; this section has
    only the judge's keys, mirroring reward_model.rollout.* and its vLLM arguments (engine_kwargs.vllm)."""

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.workers.config.RolloutConfig",
                                                  "verl.workers.config.rollout.RolloutConfig")

    name: str | None = None
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
    cudagraph_capture_sizes: list[int] | None = refused(None, *JUDGE_KEY_REFUSALS["cudagraph_capture_sizes"])
    free_cache_engine: bool = refused(True, *JUDGE_KEY_REFUSALS["free_cache_engine"])
    data_parallel_size: int = refused(1, *JUDGE_KEY_REFUSALS["data_parallel_size"])
    expert_parallel_size: int = refused(1, *JUDGE_KEY_REFUSALS["expert_parallel_size"])
    tensor_model_parallel_size: int = 1
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    max_num_seqs: int = 1024
    load_format: str = "auto"
    engine_kwargs: dict[str, Any] = dict_field({"vllm": {}, "sglang": {}})
    limit_images: int | None = refused(None, *JUDGE_KEY_REFUSALS["limit_images"])
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    disable_log_stats: bool = True
    skip_tokenizer_init: bool = True
    prompt_length: int = 2048
    response_length: int = 2048


@dataclass
class RewardModelConfig(MutableConfig):
    """reward.reward_model: mirrors reward_model.enable / enable_resource_pool / n_gpus_per_node / nnodes /
    model.path and the judge engine (reward_model.rollout). Not verl.workers.config.RewardModelConfig, which is the
    older `reward_model` section's class."""

    enable: bool = False
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 0
    nnodes: int = 0
    model_path: str | None = None
    rollout: RewardRolloutConfig = field(default_factory=RewardRolloutConfig)


@dataclass
class RewardConfig(MutableConfig):
    """Upstream v0.7's `reward` section."""

    num_workers: int = 8
    max_concurrency_per_worker: int = 1
    custom_reward_function: RewardFunctionConfig = field(default_factory=RewardFunctionConfig)
    reward_manager: RewardManagerConfig = field(default_factory=RewardManagerConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
