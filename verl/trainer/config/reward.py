"""The `reward_model` and `custom_reward_function` sections: where scores come from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.base import BaseConfig, at_least, choice, dict_field
from verl.trainer.config.engine import TRAIN_STRATEGIES, FSDPConfig
from verl.trainer.config.registries import REWARD_MANAGERS, reward_manager_registered


@dataclass
class RewardModelModelConfig(BaseConfig):
    input_tokenizer: str | None = None  # the actor's, to decode before re-tokenizing
    path: str | None = None
    external_lib: str | None = None
    use_remove_padding: bool = False
    use_fused_kernels: bool = False
    trust_remote_code: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class SandboxFusionConfig(BaseConfig):
    url: str | None = None
    max_concurrent: int = at_least(64, 1)
    memory_limit_mb: int = at_least(1024, 1)


@dataclass
class OverlongBufferConfig(BaseConfig):
    """DAPO's soft length penalty over the last `len` tokens before max_response_length."""

    enable: bool = False
    len: int = at_least(0, 0)
    penalty_factor: float = 0.0
    log: bool = False


@dataclass
class RewardModelConfig(BaseConfig):
    enable: bool = False
    strategy: str = choice("fsdp", TRAIN_STRATEGIES)
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size: int | None = None  # deprecated: global
    micro_batch_size_per_gpu: int | None = at_least(2, 1)
    max_length: int | None = None
    ulysses_sequence_parallel_size: int = at_least(1, 1)
    use_dynamic_bsz: bool = False
    forward_max_token_len_per_gpu: int = at_least(32768, 1)
    reward_manager: str = choice("naive", REWARD_MANAGERS, reward_manager_registered)
    reward_kwargs: dict[str, Any] = dict_field()
    launch_reward_fn_async: bool = False
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)


@dataclass
class CustomRewardFunctionConfig(BaseConfig):
    path: str | None = None  # a python file; None uses the built-in scores chosen by data_source
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = dict_field()
