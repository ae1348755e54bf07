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


def _judge_refused(default: Any, name: str) -> Any:
    return refused(default, *JUDGE_KEY_REFUSALS[name])


@dataclass
class RewardDisaggregationConfig(MutableConfig):
    """reward.reward_model.rollout.disaggregation (upstream after v0.7): prefill/decode disaggregated serving of the
    judge. Refused unless at upstream's defaults."""

    enabled: bool = _judge_refused(False, "disaggregation")
    prefill_replicas: int = _judge_refused(1, "disaggregation")
    decode_replicas: int = _judge_refused(1, "disaggregation")
    decode_tensor_model_parallel_size: int | None = _judge_refused(None, "disaggregation")
    transfer_backend: str = _judge_refused("nixl", "disaggregation")
    bootstrap_port: int | None = _judge_refused(None, "disaggregation")
    ib_device: str | None = _judge_refused(None, "disaggregation")


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
    # upstream after v0.7: vLLM's scheduler (engine_kwargs.vllm.scheduling_policy); the others are refused
    scheduling_policy: str = "fcfs"
    pipeline_model_parallel_size: int = _judge_refused(1, "pipeline_model_parallel_size")
    layered_summon: bool = _judge_refused(False, "layered_summon")
    full_determinism: bool = _judge_refused(False, "full_determinism")
    seed: int = _judge_refused(42, "seed")
    multi_stage_wake_up: bool = _judge_refused(False, "multi_stage_wake_up")
    ignore_eos: bool = _judge_refused(False, "ignore_eos")
    temperature: float = _judge_refused(1.0, "temperature")
    top_k: int = _judge_refused(-1, "top_k")
    top_p: float = _judge_refused(1.0, "top_p")
    do_sample: bool = _judge_refused(True, "do_sample")
    n: int = _judge_refused(1, "n")
    quantization: str | None = _judge_refused(None, "quantization")
    quantization_config_file: str | None = _judge_refused(None, "quantization_config_file")
    mtp: dict[str, Any] | None = _judge_refused(None, "mtp")
    disaggregation: RewardDisaggregationConfig = field(default_factory=RewardDisaggregationConfig)


@dataclass
class RewardModelConfig(MutableConfig):
    """reward.reward_model: mirrors reward_model.enable / enable_resource_pool / n_gpus_per_node / nnodes /
    model.path and the judge engine (reward_model.rollout). Not verl.workers.config.RewardModelConfig, which is the
    older `reward_model` section's class; upstream's yaml names that one for this section (`_target_`), where its
    class of the same name is this section's."""

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.workers.config.RewardModelConfig",)

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
