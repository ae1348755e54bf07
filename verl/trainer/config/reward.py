"""The `reward_model` and `custom_reward_function` sections: where scores come from, and the checks of
`reward_model` that need more than one key. The reward model's classes live in verl.workers.config.reward_model
(upstream's path); they are re-exported here, where the trainer's code has imported them from."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from verl.utils.config_schema import MutableConfig, dict_field
from verl.workers.config import FSDPEngineConfig
from verl.workers.config.reward_model import (
    FSDPRewardModelConfig,
    McoreRewardModelConfig,
    OverlongBufferConfig,
    RewardModelConfig,
    RewardModelModelConfig,
    RewardModelRolloutConfig,
    RewardScoringConfig,
    SandboxFusionConfig,
)

__all__ = [
    "CustomRewardFunctionConfig",
    "LegacySandboxFusionConfig",
    "FSDPRewardModelConfig",
    "McoreRewardModelConfig",
    "OverlongBufferConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RewardModelRolloutConfig",
    "RewardScoringConfig",
    "SandboxFusionConfig",
    "check_genrm",
    "check_reward_loop",
    "check_reward_model",
]


@dataclass
class LegacySandboxFusionConfig(MutableConfig):
    """Upstream v0.7's deprecated top-level `sandbox_fusion` (null: unset). What a user's yaml sets here is folded
    onto reward_model.sandbox_fusion before typing (verl.trainer.config.reward_section), so these stay null."""

    url: str | None = None
    max_concurrent: int | None = None
    memory_limit_mb: int | None = None


@dataclass
class CustomRewardFunctionConfig(MutableConfig):
    path: str | None = None  # a python file; None uses the built-in scores chosen by data_source
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = dict_field()


def check_reward_loop(cfg: Any) -> list[str]:
    """reward_model.use_reward_loop's keys that need more than one key (cfg: the PPOTrainerConfig)."""
    rm = cfg.reward_model
    problems: list[str] = []
    if rm.reward_loop_source == "importlib" and not (rm.reward_loop_module_path and rm.reward_loop_class_name):
        problems.append("reward_model.reward_loop_source=importlib needs reward_model.reward_loop_module_path (a "
                        "python file) and reward_model.reward_loop_class_name (the reward manager class in it); in "
                        "upstream v0.7's spelling reward.reward_manager.module.path and reward.reward_manager.name.")
    if not rm.use_reward_loop:
        for key, default in (("num_workers", 8), ("max_concurrency_per_worker", 1)):
            if getattr(rm, key, default) != default:
                problems.append(f"reward_model.{key}={getattr(rm, key)} is read by the reward loop only; set "
                                "reward_model.use_reward_loop=true (or drop the key).")
        for key in ("reward_loop_module_path", "reward_loop_class_name"):
            if getattr(rm, key) is not None:
                problems.append(f"reward_model.{key} is read by the reward loop only; set "
                                "reward_model.use_reward_loop=true (or drop the key).")
        if rm.reward_loop_source != "register":
            problems.append("reward_model.reward_loop_source=importlib is read by the reward loop only; set "
                            "reward_model.use_reward_loop=true.")
    return problems


_DISRM_ONLY = (("model.use_remove_padding", False), ("micro_batch_size", None), ("max_length", None))


def check_genrm(cfg: Any) -> list[str]:
    """reward_model.rollout.*: a generative reward model on its own engine (cfg: the PPOTrainerConfig)."""
    rm = cfg.reward_model
    engine = rm.rollout.name
    if engine is None:
        changed = [f.name for f in fields(RewardModelRolloutConfig)
                   if getattr(rm.rollout, f.name) != getattr(RewardModelRolloutConfig(), f.name)]
        return [f"reward_model.rollout.{key} is read only by the generative reward model's engine; set "
                "reward_model.rollout.name=hf (or vllm), reward_model.enable=true and reward_model.use_reward_loop=true"
                ", or drop the key." for key in changed]
    problems = []
    if not rm.enable:
        problems.append(f"reward_model.rollout.name={engine} starts a generative reward model only with "
                        "reward_model.enable=true (upstream's switch); set it, or drop reward_model.rollout.name.")
    if not rm.use_reward_loop:
        problems.append(f"reward_model.rollout.name={engine}: the generative reward model is asked by the reward "
                        "loop's reward functions; set reward_model.use_reward_loop=true.")
    if not rm.model.path:
        problems.append(f"reward_model.rollout.name={engine} needs reward_model.model.path: an HF folder holding the "
                        "judge (a causal LM with a chat template).")
    for key, default in _DISRM_ONLY:
        value = rm
        for part in key.split("."):
            value = getattr(value, part)
        if value != default:
            problems.append(f"reward_model.{key}={value!r} is read by the discriminative reward-model worker, which "
                            f"reward_model.rollout.name={engine} replaces by the judge engine; drop the key.")
    problems += _disrm_keys_set(cfg, engine)
    engine_kwargs = rm.rollout.engine_kwargs
    others = sorted(k for k, v in engine_kwargs.items() if v and k != engine)
    if others or (engine == "hf" and engine_kwargs.get("hf")):
        problems.append(f"reward_model.rollout.engine_kwargs.{(others or ['hf'])[0]} is read by another engine than "
                        f"reward_model.rollout.name={engine} (vllm: passed to vllm.LLM; hf takes none); drop it.")
    return problems


def _disrm_keys_set(cfg: Any, engine: str) -> list[str]:
    """The discriminative worker's keys whose yaml defaults follow other sections (critic's batching, the policy's
    tokenizer) or are whole sections: set away from those, they would be ignored by the judge engine."""
    rm = cfg.reward_model
    followed = {
        "micro_batch_size_per_gpu": (rm.micro_batch_size_per_gpu, 2),
        "use_dynamic_bsz": (rm.use_dynamic_bsz, cfg.critic.use_dynamic_bsz),
        "forward_max_token_len_per_gpu": (rm.forward_max_token_len_per_gpu, cfg.critic.forward_max_token_len_per_gpu),
        "model.fsdp_config": (rm.model.fsdp_config, FSDPEngineConfig()),
    }
    problems = [f"reward_model.{key} is read by the discriminative reward-model worker, which "
                f"reward_model.rollout.name={engine} replaces by the judge engine; drop the key."
                for key, (value, default) in followed.items() if value != default]
    if rm.model.input_tokenizer not in (None, cfg.actor_rollout_ref.model.path):
        problems.append(f"reward_model.model.input_tokenizer={rm.model.input_tokenizer!r}: the judge engine renders "
                        f"its prompts with reward_model.model.path's own chat template (reward_model.rollout.name="
                        f"{engine}), so no input tokenizer is read; drop the key.")
    return problems


def check_reward_model(cfg: Any) -> list[str]:
    """reward_model's rules that need more than one key (cfg: the PPOTrainerConfig)."""
    rm = cfg.reward_model
    problems = check_reward_loop(cfg) + check_genrm(cfg)
    if not rm.enable or rm.rollout.name is not None:
        if rm.enable and rm.enable_resource_pool and (rm.n_gpus_per_node <= 0 or rm.nnodes <= 0):
            problems.append(f"reward_model.enable_resource_pool=true needs reward_model.n_gpus_per_node and "
                            f"reward_model.nnodes above 0 (got {rm.n_gpus_per_node} and {rm.nnodes}): the judge "
                            "engine's own pool (on CPU, its CPU threads).")
        return problems
    if not rm.model.path:
        problems.append("reward_model.enable=true needs reward_model.model.path: an HF folder holding a token- or "
                        "sequence-classification model with one label (examples/reward_model/ builds one).")
    if rm.enable_resource_pool and (rm.n_gpus_per_node <= 0 or rm.nnodes <= 0):
        problems.append(f"reward_model.enable_resource_pool=true needs reward_model.n_gpus_per_node and "
                        f"reward_model.nnodes above 0 (got {rm.n_gpus_per_node} and {rm.nnodes}): the size of the "
                        "reward model's own pool (on CPU, worker ranks).")
    if rm.micro_batch_size is not None and rm.micro_batch_size < 1:
        problems.append(f"reward_model.micro_batch_size must be >= 1 or null, got {rm.micro_batch_size}.")
    if not rm.use_dynamic_bsz and not (rm.micro_batch_size or rm.micro_batch_size_per_gpu):
        problems.append("reward_model needs reward_model.micro_batch_size_per_gpu (or use_dynamic_bsz=true with "
                        "forward_max_token_len_per_gpu).")
    if rm.max_length is not None and rm.max_length < 2:
        problems.append(f"reward_model.max_length must be >= 2 or null, got {rm.max_length}.")
    if rm.model.external_lib:
        import importlib.util

        try:
            found = importlib.util.find_spec(rm.model.external_lib) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            problems.append(f"reward_model.model.external_lib={rm.model.external_lib!r} is not an importable module "
                            "here; install it (the reward-model worker imports it before loading the model).")
    return problems
