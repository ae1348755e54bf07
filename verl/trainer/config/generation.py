"""The generation config (`python -m verl.trainer.main_generation`) as dataclasses; keys and defaults follow
generation.yaml (a test checks they agree).

Generation runs ActorRolloutRefWorker in its rollout role: `worker_config` turns these sections into the typed
ActorRolloutRefConfig the worker takes. Keys a rollout-only run has no use for are refused, not ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.data import TRUNCATION_MODES
from verl.trainer.config.trainer import DEVICES
from verl.utils.config_schema import MutableConfig, Refusal, at_least, choice, dict_field, refused, refused_values
from verl.workers.config import (
    ActorRolloutRefConfig,
    FSDPActorConfig,
    FSDPEngineConfig,
    HFModelConfig,
    MixedPrecisionConfig,
    RolloutConfig,
    SamplingConfig,
)
from verl.workers.config.engine import DTYPES, TRAIN_STRATEGIES
from verl.workers.config.rollout import ROLLOUT_DTYPES

_NOT_IN_GENERATION = "main_generation only generates: it computes no log-probs and runs no validation"


@dataclass
class GenTrainerConfig(MutableConfig):
    nnodes: int = at_least(1, 1)
    n_gpus_per_node: int = at_least(1, 1)  # workers per node; on a CPU-only machine: processes
    device: str = choice("auto", DEVICES)
    # the driver's deadlines on the Ray workers (nnodes x n_gpus_per_node > 1), as main_ppo's trainer section
    ray_wait_register_center_timeout: int | None = at_least(300, 1)
    worker_call_timeout_s: float | None = at_least(1800.0, 1.0)
    worker_call_timeout_per_sample_s: float = at_least(30.0, 0.0)


@dataclass
class GenDataConfig(MutableConfig):
    path: str = "~/data/arithmetic/test.parquet"
    prompt_key: str = "prompt"
    n_samples: int = at_least(1, 1)
    output_path: str = "~/data/arithmetic/generations.parquet"
    batch_size: int = at_least(64, 1)
    truncation: str = choice("error", TRUNCATION_MODES)


@dataclass
class GenModelConfig(MutableConfig):
    path: str | None = None  # None: the bundled default model
    external_lib: str | None = None
    trust_remote_code: bool = False
    custom_chat_template: str | None = None
    override_config: dict[str, Any] = dict_field()


@dataclass
class GenRolloutConfig(MutableConfig):
    name: str = refused_values(choice("hf", ("hf", "vllm")), {
        "sglang": Refusal("the sglang engine is not built", "Use rollout.name=hf or vllm.")})
    mode: str = refused("sync", "main_generation drives the engine in batches; the async server is not built",
                        "Remove rollout.mode.")
    temperature: float = at_least(1.0, 0.0)
    top_k: int = 50  # -1: off
    top_p: float = 0.7
    do_sample: bool = True
    prompt_length: int = at_least(512, 1)
    response_length: int = at_least(256, 1)
    dtype: str | None = choice(None, ROLLOUT_DTYPES)  # vllm's; null: the hardware's, as in ppo_trainer.yaml
    gpu_memory_utilization: float = 0.5
    ignore_eos: bool = False
    enforce_eager: bool = True
    free_cache_engine: bool = True
    load_format: str = "dummy_dtensor"
    tensor_model_parallel_size: int = at_least(1, 1)
    max_num_batched_tokens: int = at_least(8192, 1)
    max_model_len: int | None = None
    max_num_seqs: int = at_least(1024, 1)
    disable_log_stats: bool = True
    enable_chunked_prefill: bool = True
    micro_batch_size: int | None = refused(
        None, "the rollout generates each worker's whole slice in one call", "Bound memory with data.batch_size.")
    log_prob_micro_batch_size_per_gpu: int = refused(8, _NOT_IN_GENERATION, "Remove the override.")
    n: int = refused(1, "prompts are repeated by data.n_samples, not by the rollout", "Set data.n_samples instead.")
    calculate_log_probs: bool = refused(False, _NOT_IN_GENERATION, "Remove the override.")
    val_kwargs: SamplingConfig = refused(field(default_factory=SamplingConfig), _NOT_IN_GENERATION,
                                          "Set the sampling keys of rollout itself (temperature, top_k, ...).")
    engine_kwargs: dict[str, Any] = dict_field({"vllm": {}, "sglang": {}})

    def to_rollout(self) -> RolloutConfig:
        shared = {name: getattr(self, name) for name in (
            "name", "mode", "temperature", "top_k", "top_p", "do_sample", "prompt_length", "response_length",
            "dtype", "gpu_memory_utilization", "ignore_eos", "enforce_eager", "free_cache_engine", "load_format",
            "tensor_model_parallel_size", "max_num_batched_tokens", "max_model_len", "max_num_seqs",
            "disable_log_stats", "enable_chunked_prefill", "calculate_log_probs")}
        return RolloutConfig(**shared, engine_kwargs=dict(self.engine_kwargs))


@dataclass
class GenMixedPrecisionConfig(MutableConfig):
    param_dtype: str | None = choice(None, DTYPES)  # the hf rollout's compute dtype; null: the hardware's
    # A rollout-only worker runs no backward, so there are no gradients to reduce.
    reduce_dtype: str = refused(choice("fp32", DTYPES), "main_generation runs no backward, so FSDP reduces no "
                                "gradients", "Remove actor.fsdp_config.mixed_precision.reduce_dtype.")
    buffer_dtype: str = refused(choice("fp32", DTYPES), "FSDP2's mixed precision has no buffer dtype; buffers keep "
                                "the model's dtype", "Remove it, or set actor.fsdp_config.model_dtype.")

    def to_engine(self) -> MixedPrecisionConfig:
        return MixedPrecisionConfig(param_dtype=self.param_dtype)


@dataclass
class GenFSDPConfig(MutableConfig):
    fsdp_size: int = refused(-1, "the rollout worker always shards over all of its ranks", "Remove the override.")
    forward_prefetch: bool = refused(False, "FSDP forward prefetching is not built", "Remove the override.")
    param_offload: bool = False  # GPU only: parameters wait in host memory between uses
    reshard_after_forward: bool = True
    model_dtype: str = choice("fp32", DTYPES)  # the dtype the hf rollout generates in
    mixed_precision: GenMixedPrecisionConfig = field(default_factory=GenMixedPrecisionConfig)

    def to_engine(self) -> FSDPEngineConfig:
        return FSDPEngineConfig(param_offload=self.param_offload, reshard_after_forward=self.reshard_after_forward,
                          model_dtype=self.model_dtype, mixed_precision=self.mixed_precision.to_engine())


@dataclass
class GenActorConfig(MutableConfig):
    strategy: str = choice("fsdp", TRAIN_STRATEGIES)  # both use FSDP2's fully_shard
    ulysses_sequence_parallel_size: int = refused(1, "Ulysses sequence parallelism is not built", "Set it to 1.")
    fsdp_config: GenFSDPConfig = field(default_factory=GenFSDPConfig)


@dataclass
class GenerationConfig(MutableConfig):
    trainer: GenTrainerConfig = field(default_factory=GenTrainerConfig)
    data: GenDataConfig = field(default_factory=GenDataConfig)
    model: GenModelConfig = field(default_factory=GenModelConfig)
    rollout: GenRolloutConfig = field(default_factory=GenRolloutConfig)
    actor: GenActorConfig = field(default_factory=GenActorConfig)
    # ray.init keyword arguments, used only when workers start on Ray; any ray.init argument.
    ray_init: dict[str, Any] = dict_field({"num_cpus": None, "timeline_json_file": None})

    def worker_config(self, model_path: str) -> ActorRolloutRefConfig:
        """The typed section ActorRolloutRefWorker(role="rollout") takes."""
        model = HFModelConfig(path=model_path, custom_chat_template=self.model.custom_chat_template,
                            external_lib=self.model.external_lib, override_config=dict(self.model.override_config),
                            trust_remote_code=self.model.trust_remote_code)
        actor = FSDPActorConfig(strategy=self.actor.strategy, fsdp_config=self.actor.fsdp_config.to_engine(),
                                use_remove_padding=True)
        return ActorRolloutRefConfig(model=model, actor=actor, rollout=self.rollout.to_rollout())


def generation_problems(config: GenerationConfig) -> list[str]:
    import os

    data, rollout = config.data, config.rollout
    problems = []
    if not os.path.isfile(os.path.expanduser(data.path)):
        problems.append(f"data.path: parquet file {data.path!r} does not exist")
    greedy = rollout.temperature == 0.0 or not rollout.do_sample
    if greedy and data.n_samples > 1:
        problems.append(f"data.n_samples={data.n_samples} with greedy decoding (rollout.temperature=0 or "
                        "rollout.do_sample=false) gives n identical responses; sample, or set data.n_samples=1")
    if not data.output_path:
        problems.append("data.output_path is not set: where should the generations go?")
    if config.model.external_lib and config.trainer.nnodes * config.trainer.n_gpus_per_node > 1:
        problems.append("model.external_lib is imported in this process only; with Ray workers "
                        "(trainer.nnodes x trainer.n_gpus_per_node > 1) install it as a package the model config names")
    if config.trainer.device == "cuda" and not _cuda_visible():
        problems.append("trainer.device=cuda but no GPU is visible; set trainer.device=auto or cpu")
    return problems


def _cuda_visible() -> bool:
    import torch  # only for trainer.device=cuda: every other check runs without torch

    return torch.cuda.is_available()
