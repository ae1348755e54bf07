"""Checks of the LoRA keys (actor_rollout_ref.model.lora_*, critic.model.lora_*), run before Ray starts.

`check_lora` looks at the keys alone; `check_lora_files` opens lora_adapter_path (with the other file checks,
so `validate_config(check_files=False)` skips it as it skips the data files).
"""

from __future__ import annotations

from typing import Any

from verl.trainer.config.ppo_trainer import PPOTrainerConfig

ACTOR = "actor_rollout_ref.model"
CRITIC = "critic.model"


def _module_names(key: str, value: Any, allow_none: bool) -> list[str]:
    if value is None:
        return [] if allow_none else [f"{key} is null; use all-linear or a list of module names such as [q_proj, v_proj]"]
    if isinstance(value, str):
        return [] if value.strip() else [f"{key} is an empty string; use all-linear or a list of module names"]
    if not value or any(not isinstance(v, str) or not v.strip() for v in value):
        return [f"{key}={list(value)!r}: give a non-empty list of module names (q_proj, v_proj, ...) or all-linear"]
    return []


def _section(key: str, model: Any, exclude: bool) -> list[str]:
    problems: list[str] = []
    if model.lora_rank > 0:
        if model.lora_alpha <= 0:
            problems.append(f"{key}.lora_alpha={model.lora_alpha} must be > 0 with {key}.lora_rank={model.lora_rank} "
                            f"(the adapter's output is scaled by lora_alpha / lora_rank); e.g. {key}.lora_alpha=16")
        problems += _module_names(f"{key}.target_modules", model.target_modules, allow_none=False)
        if exclude:
            problems += _module_names(f"{key}.exclude_modules", model.exclude_modules, allow_none=True)
    return problems


def check_lora(cfg: PPOTrainerConfig) -> list[str]:
    model = cfg.actor_rollout_ref.model
    problems = _section(ACTOR, model, exclude=True)
    if cfg.use_critic:
        problems += _section(CRITIC, cfg.critic.model, exclude=True)
    return problems


def check_lora_files(cfg: PPOTrainerConfig) -> list[str]:
    """lora_adapter_path (the actor's, and the critic's when it trains): a peft LoRA folder whose r and lora_alpha
    are the configured ones."""
    sections = [(ACTOR, cfg.actor_rollout_ref.model)] + ([(CRITIC, cfg.critic.model)] if cfg.use_critic else [])
    return [problem for prefix, model in sections for problem in _adapter_folder(prefix, model)]


def _adapter_folder(prefix: str, model: Any) -> list[str]:
    if not model.lora_adapter_path or model.lora_rank <= 0:
        return []
    from verl.models.lora import adapter_lacks_modules, check_adapter_folder, read_adapter_config

    key = f"{prefix}.lora_adapter_path"
    try:
        folder = check_adapter_folder(model.lora_adapter_path, key)
    except (FileNotFoundError, ValueError) as err:
        return [str(err)]
    saved = read_adapter_config(folder)
    if int(saved.get("r", -1)) != model.lora_rank or float(saved.get("lora_alpha", -1)) != float(model.lora_alpha):
        return [f"{key}={model.lora_adapter_path!r} holds an adapter with r={saved.get('r')}, lora_alpha="
                f"{saved.get('lora_alpha')}, but {prefix}.lora_rank={model.lora_rank}, {prefix}.lora_alpha="
                f"{model.lora_alpha}; set them to the adapter's values"]
    problem = adapter_lacks_modules(saved, ["score"] if prefix == CRITIC else None, key, model.lora_adapter_path)
    return [problem] if problem else []
