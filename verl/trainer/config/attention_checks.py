"""``*.model.override_config.attn_implementation`` (upstream's key for the HF attention kernel): the loader passes
it to ``from_pretrained``; values that cannot run on this installation are refused before Ray starts.

Flash attention is a CUDA-only package (flash-attn for flash_attention_2, flash_attn_interface for
flash_attention_3); where it is not importable the choice is refused with the default that works everywhere:
sdpa, which use_remove_padding runs per packed segment (verl/models/varlen_attention.py)."""

from __future__ import annotations

import importlib.util

from verl.trainer.config.ppo_trainer import PPOTrainerConfig

# transformers' built-in implementations; the flash ones name the module they import
ATTN_IMPLEMENTATIONS = {"eager": None, "sdpa": None, "flex_attention": None,
                        "flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def attn_implementation_problems(override_config: dict, key: str) -> list[str]:
    """Messages for ``{key}.override_config.attn_implementation``; none when unset (sdpa) or runnable here."""
    value = override_config.get("attn_implementation")
    if value is None:
        return []
    full_key = f"{key}.override_config.attn_implementation"
    if value not in ATTN_IMPLEMENTATIONS:
        return [f"{full_key}={value!r} is not one of {sorted(ATTN_IMPLEMENTATIONS)}; leave it unset for sdpa."]
    module = ATTN_IMPLEMENTATIONS[value]
    if module is not None and importlib.util.find_spec(module) is None:
        return [f"{full_key}={value} is refused: it needs the {module!r} package, which only installs on CUDA GPUs "
                "and is not importable here. Leave it unset (sdpa; with use_remove_padding each packed sequence "
                "runs its own attention) or install flash attention on the GPU machines."]
    return []


def check_attn_implementation(cfg: PPOTrainerConfig) -> list[str]:
    problems = attn_implementation_problems(cfg.actor_rollout_ref.model.override_config, "actor_rollout_ref.model")
    if cfg.use_critic:
        problems += attn_implementation_problems(cfg.critic.model.override_config, "critic.model")
    return problems
