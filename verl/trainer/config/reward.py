"""The `reward_model` and `custom_reward_function` sections: where scores come from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.base import BaseConfig, at_least, choice, dict_field, refused
from verl.trainer.config.engine import TRAIN_STRATEGIES, FSDPConfig
from verl.trainer.config.registries import REWARD_MANAGERS, reward_manager_registered

NO_REWARD_MODEL = (
    "model-based reward is not built yet; rewards come from rules (custom_reward_function, or the built-in score "
    "chosen by data_source)",
    "Remove reward_model.enable and the reward model's keys; for your own scoring set custom_reward_function.path.",
)
def _no_rm(spec, follows: str | None = None):
    return refused(spec, *NO_REWARD_MODEL, follows=follows)


@dataclass
class RewardModelModelConfig(BaseConfig):
    input_tokenizer: str | None = _no_rm(None, follows="actor_rollout_ref.model.path")
    path: str | None = _no_rm(None)
    external_lib: str | None = _no_rm(None, follows="actor_rollout_ref.model.external_lib")
    use_remove_padding: bool = _no_rm(False)
    use_fused_kernels: bool = _no_rm(False, follows="actor_rollout_ref.model.use_fused_kernels")
    trust_remote_code: bool = _no_rm(False)
    fsdp_config: FSDPConfig = _no_rm(field(default_factory=FSDPConfig))


@dataclass
class SandboxFusionConfig(BaseConfig):
    """Where code-contest rewards run their tests: a SandboxFusion ``/run_code`` URL, or None to have the trainer
    start the bundled sandbox (``python -m verl.tools.sandbox``) when a code data source needs one. Upstream v0.9
    spells the section ``reward.sandbox_fusion``; both spellings set these keys."""

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
    enable: bool = _no_rm(False)
    strategy: str = _no_rm(choice("fsdp", TRAIN_STRATEGIES))
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size: int | None = _no_rm(None)
    micro_batch_size_per_gpu: int | None = _no_rm(at_least(2, 1))
    max_length: int | None = _no_rm(None)
    ulysses_sequence_parallel_size: int = _no_rm(at_least(1, 1))
    use_dynamic_bsz: bool = _no_rm(False, follows="critic.use_dynamic_bsz")
    forward_max_token_len_per_gpu: int = _no_rm(at_least(32768, 1), follows="critic.forward_max_token_len_per_gpu")
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
